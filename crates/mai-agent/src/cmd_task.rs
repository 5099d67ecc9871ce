//! `mai-agent task list|status|history|cancel|ask|inject`: the local store, as the machine's
//! admin. Changes (`cancel`, `ask`, `inject`) go to the running `serve` when there is one
//! (`remote.rs` decides where), so they take effect at once instead of waiting for a restart.

use std::sync::Arc;

use anyhow::Result;
use mai_core::ids::{PersonId, StreamId};
use mai_core::role::Role;
use mai_core::store::{HistoryEntry, TaskFilter};
use mai_core::task::{StatusChange, TaskRecord, TaskStatus};
use mai_engine::Engine;
use mai_engine::{Caller, Door, usage_json, usage_line};

use crate::console::{CONSOLE_PLATFORM, CONSOLE_USER};
use crate::remote::{self, Target};
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub enum TaskCommand {
    /// List tasks, newest first.
    List {
        /// Only tasks in this status (scheduled, pending, running, waiting_input, paused,
        /// completed, failed, cancelled).
        #[arg(long)]
        status: Option<TaskStatus>,
        /// At most this many tasks.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Show one task.
    Status {
        /// The task: its id, an id prefix of at least 4 characters (the 8 shown), or its exact
        /// title.
        task: String,
    },
    /// Show a task's status log and agent history.
    History {
        /// The task: its id, an id prefix of at least 4 characters, or its exact title.
        task: String,
    },
    /// Cancel a task (through the running `serve`, if one runs on this data dir).
    Cancel {
        /// The task: its id, an id prefix of at least 4 characters, or its exact title.
        task: String,
    },
    /// Answer a task that waits for input (through the running `serve`, if any).
    Ask {
        /// The task: its id, an id prefix of at least 4 characters, or its exact title.
        task: String,
        /// The answer to its question.
        text: String,
    },
    /// Add an instruction to a running agent task, or answer a waiting one (through the running
    /// `serve`, if any).
    Inject {
        /// The task: its id, an id prefix of at least 4 characters, or its exact title.
        task: String,
        /// What the agent should also do or know, read before its next model call.
        instruction: String,
    },
}

/// The machine's admin at the terminal (the local store's reader).
pub(crate) fn operator() -> Result<Caller> {
    Ok(Caller {
        door: Door::Local,
        ..Caller::person(
            PersonId::new(CONSOLE_PLATFORM, CONSOLE_USER)?,
            Role::Admin,
            StreamId::new(format!("{CONSOLE_PLATFORM}:{CONSOLE_USER}"))?,
            None,
        )
    })
}

pub async fn run(
    engine: Arc<Engine>,
    settings: &Settings,
    command: TaskCommand,
    as_json: bool,
) -> Result<()> {
    let caller = operator()?;
    if let Target::Serve(serve) = remote::target_of(settings, &command)? {
        return through_serve(&serve, command).await;
    }
    match command {
        TaskCommand::List { status, limit } => {
            let filter = TaskFilter {
                statuses: status.into_iter().collect(),
                limit: Some(limit),
                ..TaskFilter::default()
            };
            let tasks = engine.list(&caller, filter).await?;
            if as_json {
                println!("{}", serde_json::to_string(&tasks)?);
            } else {
                print_list(&tasks);
            }
        }
        TaskCommand::Status { task } => {
            let task = engine.resolve(&caller, &task).await?;
            let usage = engine.task_usage(task.id).await?;
            if as_json {
                let mut value = serde_json::to_value(&task)?;
                value["usage"] = usage_json(&usage, &engine.currency());
                println!("{value}");
            } else {
                print_task(&task);
                println!("  usage    {}", usage_line(&usage, &engine.currency()));
            }
        }
        TaskCommand::History { task } => {
            let history = engine.history(&caller, &task).await?;
            let usage = engine.task_usage(history.task.id).await?;
            if as_json {
                let mut value = serde_json::to_value(&history)?;
                value["usage"] = usage_json(&usage, &engine.currency());
                println!("{value}");
            } else {
                print_task(&history.task);
                println!("  usage    {}", usage_line(&usage, &engine.currency()));
                print_timeline(&history.status_log, &history.entries);
            }
        }
        TaskCommand::Cancel { task } => {
            let task = engine.cancel(&caller, &task).await?;
            println!("{}", cancelled(&task));
        }
        TaskCommand::Ask { task, text } => {
            let task = engine.answer(&caller, &task, &text).await?;
            println!(
                "answered task {}; no service runs on this data directory, so it continues when \
                 `mai-agent serve` starts (or `mai-agent run --resume {}`)",
                task.id.short(),
                task.id.short()
            );
        }
        TaskCommand::Inject { task, instruction } => {
            let before = engine.resolve(&caller, &task).await?;
            let task = engine.inject(&caller, &task, &instruction).await?;
            print_injected(&task, before.status == TaskStatus::WaitingInput, false);
        }
    }
    Ok(())
}

/// `cancel`, `ask`, `inject` sent to the running `serve`, which applies them at once.
async fn through_serve(serve: &remote::Remote, command: TaskCommand) -> Result<()> {
    match command {
        TaskCommand::Cancel { task } => {
            let changed = serve.cancel(&task).await?;
            println!("{}", cancelled(&changed.task));
        }
        TaskCommand::Ask { task, text } => {
            let task = serve.answer(&task, &text).await?.task;
            println!(
                "answered task {}; the running service continues it now",
                task.id.short()
            );
        }
        TaskCommand::Inject { task, instruction } => {
            let changed = serve.inject(&task, &instruction).await?;
            print_injected(&changed.task, changed.flag, true);
        }
        TaskCommand::List { .. } | TaskCommand::Status { .. } | TaskCommand::History { .. } => {}
    }
    Ok(())
}

fn print_injected(task: &TaskRecord, answered: bool, live: bool) {
    let what = if answered {
        "answered the question of"
    } else {
        "added the instruction to"
    };
    let when = if live {
        "the running service applies it now"
    } else {
        "it applies when `mai-agent serve` runs the task"
    };
    println!("{what} task {}; {when}", task.id.short());
}

/// What `task cancel` did, from the record the engine returned.
fn cancelled(task: &TaskRecord) -> String {
    match task.status {
        TaskStatus::Cancelled => format!("cancelled task {} \"{}\"", task.id.short(), task.title),
        status => format!(
            "task {} \"{}\" is {status}: asked it to stop; it ends as cancelled at its next step",
            task.id.short(),
            task.title
        ),
    }
}

/// One line per task: id prefix, status, level, title.
fn print_list(tasks: &[TaskRecord]) {
    if tasks.is_empty() {
        println!("no tasks");
    }
    for task in tasks {
        println!(
            "{}  {:13}  {:7}  {}",
            task.id.short(),
            task.status.as_str(),
            level(task),
            task.title
        );
    }
}

/// A task's status log, then its agent history (each entry cut to 160 characters).
fn print_timeline(status_log: &[StatusChange], entries: &[HistoryEntry]) {
    println!("status log:");
    for change in status_log {
        println!(
            "  {}  {:13}  {}: {}",
            change.at.format("%F %T"),
            change.status.as_str(),
            change.actor,
            change.reason
        );
    }
    println!("agent history ({} entries):", entries.len());
    for entry in entries {
        let text = entry.payload.to_string();
        let short: String = text.chars().take(160).collect();
        println!(
            "  #{:<3} round {:<2} {:9} {short}",
            entry.seq,
            entry.round,
            entry.kind.as_str()
        );
    }
}

fn level(task: &TaskRecord) -> &'static str {
    match task.level {
        mai_core::task::TaskLevel::Agent => "agent",
        mai_core::task::TaskLevel::Instant => "instant",
    }
}

fn print_task(task: &TaskRecord) {
    println!("{}  {}", task.id, task.title);
    println!("  status   {}", task.status);
    println!("  level    {}", level(task));
    println!("  owner    {}   stream {}", task.owner, task.stream_id);
    println!("  rounds   {}", task.metadata.rounds);
    if let Some(waiting) = &task.metadata.waiting {
        println!("  question {}", waiting.question);
    }
    if let Some(answer) = &task.metadata.answer {
        println!("  answer   {answer}");
    }
    if let Some(error) = &task.metadata.error {
        println!("  error    {error}");
    }
}
