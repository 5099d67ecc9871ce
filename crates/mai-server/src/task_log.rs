//! The life of each task in the service's log, at info level: created, started, question asked,
//! answered (it runs again), completed or failed with its rounds and running time, cancelled.
//! Reply tasks (the instant tasks that deliver a result) log at debug: their parent's lines
//! already say it.
//!
//! Follows the engine's event stream like the metrics do; events are best-effort, so a log that
//! fell behind says how many it skipped. Must not: change a task, or log whole messages (a
//! question or a title is cut to [`SHOWN`] characters, a status reason to [`REASON_SHOWN`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use chrono::{DateTime, Utc};
use mai_core::task::{TaskId, TaskLevel, TaskRecord, TaskStatus};
use mai_engine::{Caller, Engine, TaskEvent};
use tokio::sync::broadcast::error::RecvError;

/// How much of a title or a question a log line shows.
const SHOWN: usize = 80;
/// How much of a failure's reason a log line shows: enough for what failed and what to do
/// (`could not connect to the model API at … is the model server running? check …`).
const REASON_SHOWN: usize = 300;

/// What the log remembers of a task between its events.
struct Known {
    title: String,
    quiet: bool,
    /// The highest round seen (a cron task's record resets its count after each run).
    rounds: u32,
}

/// Starts logging the life of every task of `engine` until it is dropped.
pub fn follow(engine: &Engine) {
    let mut events = engine.subscribe();
    let engine = engine.clone();
    tokio::spawn(async move {
        let mut known: HashMap<TaskId, Known> = HashMap::new();
        loop {
            match events.recv().await {
                Ok(event) => log_event(&engine, &mut known, event).await,
                Err(RecvError::Lagged(skipped)) => {
                    tracing::warn!("the task log fell behind and skipped {skipped} task events");
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
}

async fn log_event(engine: &Engine, known: &mut HashMap<TaskId, Known>, event: TaskEvent) {
    let id = event.task_id();
    if let TaskEvent::Round { round, .. } = &event {
        if let Some(task) = known.get_mut(&id) {
            task.rounds = task.rounds.max(*round);
        }
        return;
    }
    if !matches!(
        event,
        TaskEvent::Created { .. } | TaskEvent::Status { .. } | TaskEvent::Question { .. }
    ) {
        return;
    }
    if let Entry::Vacant(slot) = known.entry(id) {
        let Some(record) = record(engine, id).await else {
            return;
        };
        slot.insert(Known {
            title: cut(&record.title),
            quiet: record.level == TaskLevel::Instant,
            rounds: record.metadata.rounds,
        });
    }
    let Some(task) = known.get(&id) else {
        return;
    };
    let (line, finished) = match event {
        TaskEvent::Created { .. } => (format!("created: {}", task.title), false),
        TaskEvent::Question { question, .. } => (format!("asks: {}", cut(&question)), false),
        TaskEvent::Status { status, reason, .. } => {
            let Some(line) = status_line(engine, task, id, status, &reason).await else {
                return;
            };
            (line, status.is_terminal())
        }
        _ => return,
    };
    emit(task.quiet, line.starts_with("failed"), id, &line);
    if finished {
        known.remove(&id);
    }
}

/// The line of a status change; `None` for a change the question line already tells.
async fn status_line(
    engine: &Engine,
    task: &Known,
    id: TaskId,
    status: TaskStatus,
    reason: &str,
) -> Option<String> {
    let reason = cut_to(reason, REASON_SHOWN);
    match status {
        TaskStatus::WaitingInput => None,
        TaskStatus::Running if reason == "dispatched" => Some(format!("started: {}", task.title)),
        TaskStatus::Running if reason == "resumed with the answer" => {
            Some(format!("answered, running again: {}", task.title))
        }
        TaskStatus::Completed | TaskStatus::Failed => {
            let (rounds, took) = match record(engine, id).await {
                Some(record) => (record.metadata.rounds.max(task.rounds), last_run(&record)),
                None => (task.rounds, None),
            };
            let took = took.map_or(String::new(), |secs| format!(" in {secs} s"));
            let ending = if status == TaskStatus::Completed {
                "completed".to_owned()
            } else {
                format!("failed ({reason})")
            };
            Some(format!(
                "{ending} after {rounds} round(s){took}: {}",
                task.title
            ))
        }
        status => Some(format!("{status} ({reason}): {}", task.title)),
    }
}

fn emit(quiet: bool, failed: bool, id: TaskId, line: &str) {
    let task = id.short();
    if quiet {
        tracing::debug!("task {task} {line}");
    } else if failed {
        tracing::warn!("task {task} {line}");
    } else {
        tracing::info!("task {task} {line}");
    }
}

async fn record(engine: &Engine, id: TaskId) -> Option<TaskRecord> {
    let reader = Caller::admin_reader("task-log").ok()?;
    engine.get(&reader, id).await.ok()
}

/// Seconds from the start of the task's last run (its first `running` since it was last
/// scheduled or queued) to its end.
fn last_run(task: &TaskRecord) -> Option<i64> {
    let mut started: Option<DateTime<Utc>> = None;
    let mut run = None;
    for change in &task.status_log {
        match change.status {
            TaskStatus::Scheduled | TaskStatus::Pending => started = None,
            TaskStatus::Running => started = started.or(Some(change.at)),
            status if status.is_terminal() => {
                run = started.map(|from| (change.at - from).num_seconds());
            }
            _ => {}
        }
    }
    run
}

fn cut(text: &str) -> String {
    cut_to(text, SHOWN)
}

/// `text` on one line, at most `shown` characters (and `…` when cut).
fn cut_to(text: &str, shown: usize) -> String {
    let line = text.replace('\n', " ");
    match line.char_indices().nth(shown) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_long_title_or_question_is_cut_to_one_short_line() {
        let long = "a\nb".repeat(100);
        let shown = cut(&long);
        assert!(!shown.contains('\n'));
        assert_eq!(shown.chars().count(), SHOWN + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn a_failure_reason_keeps_what_to_do_beyond_the_title_length() {
        let reason = "model call failed: could not connect to the model API at \
                      http://127.0.0.1:9/v1/chat/completions: Connection refused (os error \
                      111); is the model server running? check [llm].base_url";
        assert!(reason.chars().count() > SHOWN);
        assert_eq!(cut_to(reason, REASON_SHOWN), reason);
    }
}
