//! `mai-agent run "<intent>"`: one agent task in the foreground, with live progress on stderr,
//! the bot's messages on stdout, and questions answered at the terminal.

use std::io::{BufRead, Write};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use mai_core::host::{ChatTarget, Host};
use mai_core::ids::{PersonId, StreamId};
use mai_core::role::Role;
use mai_core::task::{TaskId, TaskLevel, TaskRecord, TaskStatus};
use mai_engine::Engine;
use mai_engine::TaskEvent;
use mai_engine::{Caller, CreateTask, Door};
use mai_host::EmbeddedHost;
use serde_json::json;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use crate::app::App;
use crate::console::{CONSOLE_PLATFORM, CONSOLE_USER};

pub struct RunArgs {
    /// What to do: a new intent, or an existing task to continue in the foreground.
    pub what: RunWhat,
    pub role: Role,
    pub stream: String,
    pub json: bool,
}

pub enum RunWhat {
    Intent(String),
    /// An existing task (id, prefix or title), e.g. one interrupted by a crash.
    Resume(String),
}

/// Runs the task to its end; returns whether it completed.
pub async fn run(app: App, args: RunArgs) -> Result<bool> {
    let App {
        engine, host, mcp, ..
    } = app;
    // MCP servers are child processes: stop them however this command ends.
    let _mcp_guard = McpShutdown(mcp);
    let person = PersonId::new(CONSOLE_PLATFORM, CONSOLE_USER)?;
    // The console chat the task lives in (a private chat of the person at the terminal).
    let stream = host
        .open_stream(
            CONSOLE_PLATFORM,
            &ChatTarget::Private {
                user_id: args.stream.clone(),
            },
        )
        .await?;
    let caller = Caller {
        door: Door::Local,
        ..Caller::person(person.clone(), args.role, stream.clone(), None)
    };
    let terminal = Terminal {
        engine: &engine,
        host: &host,
        caller: &caller,
        person: &person,
        stream: &stream,
        args: &args,
    };
    let mut events = engine.subscribe();
    engine.start().await?;
    let task = terminal.create_or_resume().await?;
    // Not a task resumed after it finished. Events are received from before the engine
    // started, so a task that ends at once (its model down) still has its end shown.
    if !task.status.is_terminal() {
        terminal.follow(&task, &mut events).await?;
    }
    engine.stop().await;
    finish(&args, &engine.get(&caller, task.id).await?)
}

/// The task's side of the terminal: who acts, in which chat, with which engine.
struct Terminal<'a> {
    engine: &'a Arc<Engine>,
    host: &'a Arc<EmbeddedHost>,
    caller: &'a Caller,
    person: &'a PersonId,
    stream: &'a StreamId,
    args: &'a RunArgs,
}

impl Terminal<'_> {
    /// Creates the task of `args`, or finds the one to resume; says which.
    async fn create_or_resume(&self) -> Result<TaskRecord> {
        match &self.args.what {
            RunWhat::Intent(intent) => {
                let task = self
                    .engine
                    .create(self.caller, CreateTask::agent(intent.clone()))
                    .await
                    .context("could not create the task")?;
                let (short, role) = (task.id.short(), self.args.role);
                eprintln!("task {short} \"{}\" created ({role} role)", task.title);
                Ok(task)
            }
            RunWhat::Resume(reference) => {
                let task = self.engine.resolve(self.caller, reference).await?;
                eprintln!(
                    "task {} \"{}\" is {}",
                    task.id.short(),
                    task.title,
                    task.status
                );
                Ok(task)
            }
        }
    }

    /// Shows the task's progress (and its reply's) and answers its questions at the terminal,
    /// until it has ended and its reply, if it posts one, has ended too.
    async fn follow(
        &self,
        task: &TaskRecord,
        events: &mut broadcast::Receiver<TaskEvent>,
    ) -> Result<()> {
        let mut watched = vec![task.id];
        let mut outcome: Option<TaskStatus> = None;
        let mut reply_done = false;
        while outcome.is_none() || !reply_done {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(RecvError::Lagged(missed)) => {
                    eprintln!("  (progress display skipped {missed} events)");
                    continue;
                }
                Err(RecvError::Closed) => bail!("the engine stopped unexpectedly"),
            };
            if !watched.contains(&event.task_id()) {
                continue;
            }
            show(&event, event.task_id() != task.id);
            match event {
                TaskEvent::Question { task_id, .. } if task_id == task.id => {
                    self.answer_question().await?;
                }
                TaskEvent::Status {
                    task_id, status, ..
                } if task_id == task.id && status.is_terminal() => {
                    let (reply, done) = self.reply_of(task, status).await?;
                    reply_done = done;
                    watched.push(reply);
                    outcome = Some(status);
                }
                TaskEvent::Status {
                    task_id, status, ..
                } if task_id != task.id && status.is_terminal() => {
                    reply_done = true;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Reads an answer at the terminal and hands it to the task as the person's chat reply.
    async fn answer_question(&self) -> Result<()> {
        let answer = ask_terminal().await?;
        crate::console::ingest_line(self.host, &self.args.stream, &answer).await?;
        self.engine
            .handle_user_reply(self.person, self.stream, &answer)
            .await?;
        Ok(())
    }

    /// The reply task of `task`, which ended in `status`, and whether there is nothing (more)
    /// to wait for: completed and failed agent tasks post a reply (or a notice), which may have
    /// been delivered already, before the end was read.
    async fn reply_of(&self, task: &TaskRecord, status: TaskStatus) -> Result<(TaskId, bool)> {
        let record = self.engine.get(self.caller, task.id).await?;
        let reply = mai_engine::reply_task_id(&record);
        let posts_reply = record.level == TaskLevel::Agent
            && matches!(status, TaskStatus::Completed | TaskStatus::Failed);
        let done = !posts_reply
            || self
                .engine
                .get(self.caller, reply)
                .await
                .is_ok_and(|r| r.status.is_terminal());
        Ok((reply, done))
    }
}

/// Stops the MCP servers when dropped.
struct McpShutdown(Option<mai_mcp::McpManager>);

impl Drop for McpShutdown {
    fn drop(&mut self) {
        if let Some(manager) = &self.0 {
            manager.shutdown();
        }
    }
}

/// Prints how the task ended; returns whether it completed.
fn finish(args: &RunArgs, task: &TaskRecord) -> Result<bool> {
    let answer = task
        .metadata
        .answer
        .as_ref()
        .or(task.metadata.error.as_ref());
    if args.json {
        println!(
            "{}",
            json!({"task_id": task.id, "status": task.status, "answer": answer,
                   "error": task.metadata.error, "rounds": task.metadata.rounds})
        );
    } else if task.metadata.rounds == 0 && task.status != TaskStatus::Completed {
        // `round 1` was shown when it started; it never got an answer, so it does not count.
        eprintln!(
            "task {} {} before the model answered",
            task.id.short(),
            task.status
        );
    } else {
        eprintln!(
            "task {} {} after {} round(s)",
            task.id.short(),
            task.status,
            task.metadata.rounds
        );
    }
    Ok(task.status == TaskStatus::Completed)
}

/// One progress line; events of the reply task are marked as such.
fn show(event: &TaskEvent, is_reply: bool) {
    let who = if is_reply { "reply " } else { "" };
    match event {
        TaskEvent::Status { status, reason, .. } => eprintln!("  {who}[{status}] {reason}"),
        TaskEvent::Round { round, .. } => eprintln!("  round {round}"),
        TaskEvent::ToolCall {
            tool, arguments, ..
        } => eprintln!("    → {tool} {arguments}"),
        TaskEvent::ToolResult {
            tool, ok, preview, ..
        } => {
            let mark = if *ok { "ok" } else { "error" };
            eprintln!(
                "    ← {tool} {mark}: {}",
                preview.chars().take(160).collect::<String>()
            )
        }
        TaskEvent::Question { question, .. } => eprintln!("  ? {question}"),
        TaskEvent::Answer { .. }
        | TaskEvent::Sent { .. }
        | TaskEvent::Created { .. }
        | TaskEvent::Changed { .. } => {}
    }
}

/// Reads one answer line from the terminal.
async fn ask_terminal() -> Result<String> {
    tokio::task::spawn_blocking(|| {
        eprint!("answer> ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        if line.is_empty() {
            bail!("stdin closed while the task waits for an answer");
        }
        Ok(line.trim_end().to_owned())
    })
    .await?
}
