//! Chat commands (see docs/design.md, "Hosts and bridges"): `/maitask` (alias `/mt`) `create`,
//! `list [-all] [status]`, `status`, `cancel`, `history`, `ask`, `usage`, `help` — parsed here and run
//! through the task facade, which does every role and ownership check (docs/design.md, "Roles and the
//! permission model").
//!
//! Replies are raw, short text meant to be sent as is (never polished): one line per task with
//! its 8-character short id. Anything unmatched — an unknown subcommand, a missing argument —
//! gets the help with a one-line hint, because a person typing a command wants to know what to
//! type instead. Must not: reach the store directly or decide permissions itself (apart from
//! `list -all` being admin-only, which only widens a listing).

use mai_core::role::Role;
use mai_core::store::TaskFilter;
use mai_core::task::{TaskRecord, TaskStatus};

use crate::engine::Engine;
use crate::tasks::{Caller, CreateTask};

const HELP: &str = "/maitask (alias /mt) — background tasks
  create <intent>        start a task
  list [-all] [status]   your tasks (-all: everyone's, admins only)
  status <id>            one task in detail
  cancel <id>            stop a task
  history <id>           a task's timeline
  ask <id> <text>        answer a task's question
  usage [person]         today's tokens, cost and limits (person: admins only)
  help                   this text
<id> is the 8-character short id from list.";

/// How many tasks `list` shows.
const LIST_LIMIT: u32 = 20;
/// How many status changes `history` shows (the latest).
const HISTORY_LINES: usize = 15;
/// How much of an answer or question `status` shows.
const DETAIL_CHARS: usize = 300;

/// Runs `text` if it is a `/maitask` command; returns the reply, or `None` when it is not one.
pub async fn handle_command(engine: &Engine, caller: &Caller, text: &str) -> Option<String> {
    let (word, rest) = next_token(text)?;
    let word = word.to_ascii_lowercase();
    if word != "/maitask" && word != "/mt" {
        return None;
    }
    Some(run(engine, caller, parse(rest)).await)
}

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Create {
        intent: String,
    },
    List {
        all: bool,
        status: Option<String>,
    },
    Status {
        id: String,
    },
    Cancel {
        id: String,
    },
    History {
        id: String,
    },
    Ask {
        id: String,
        text: String,
    },
    /// Today's usage and limits of the speaker, or (admins) of another person.
    Usage {
        person: Option<String>,
    },
    /// Help, with why it is shown (an unknown subcommand, a missing argument).
    Help {
        hint: Option<String>,
    },
}

fn parse(args: &str) -> Command {
    let Some((sub, rest)) = next_token(args) else {
        return Command::Help { hint: None };
    };
    let sub = sub.to_ascii_lowercase();
    let usage = |form: &str| Command::Help {
        hint: Some(format!("usage: /maitask {form}")),
    };
    match sub.as_str() {
        "create" => match remainder(rest) {
            Some(intent) => Command::Create { intent },
            None => usage("create <intent>"),
        },
        "list" => {
            let mut all = false;
            let mut status = None;
            let mut rest = rest;
            while let Some((token, after)) = next_token(rest) {
                match token.to_ascii_lowercase().as_str() {
                    "-all" | "--all" | "-a" => all = true,
                    other if status.is_none() => status = Some(other.to_owned()),
                    _ => return usage("list [-all] [status]"),
                }
                rest = after;
            }
            Command::List { all, status }
        }
        "status" | "cancel" | "history" => match id_of(rest) {
            Some((id, _)) => match sub.as_str() {
                "status" => Command::Status { id },
                "cancel" => Command::Cancel { id },
                _ => Command::History { id },
            },
            None => usage(&format!("{sub} <id>")),
        },
        "ask" => match id_of(rest).and_then(|(id, after)| Some((id, remainder(after)?))) {
            Some((id, text)) => Command::Ask { id, text },
            None => usage("ask <id> <text>"),
        },
        "usage" => Command::Usage {
            person: id_of(rest).map(|(person, _)| person),
        },
        "help" => Command::Help { hint: None },
        _ => Command::Help {
            hint: Some(format!("unknown subcommand `{sub}`")),
        },
    }
}

async fn run(engine: &Engine, caller: &Caller, command: Command) -> String {
    let result = match command {
        Command::Help { hint } => Ok(match hint {
            Some(hint) => format!("{hint}\n{HELP}"),
            None => HELP.to_owned(),
        }),
        Command::Create { intent } => engine
            .create(caller, CreateTask::agent(intent))
            .await
            .map(|task| format!("created {}", line(&task))),
        Command::List { all, status } => list(engine, caller, all, status).await,
        Command::Status { id } => match engine.resolve(caller, &id).await {
            Ok(task) => with_usage(engine, detail(&task), &task).await,
            Err(error) => Err(error),
        },
        Command::Cancel { id } => engine.cancel(caller, &id).await.map(|task| {
            // A running task stops at its next await; say so rather than claim it is done.
            let verb = if task.status == TaskStatus::Running {
                "stopping"
            } else {
                "cancelled"
            };
            format!("{verb} {} {}", task.id.short(), task.title)
        }),
        Command::History { id } => engine.history(caller, &id).await.map(|history| {
            let mut out = line(&history.task);
            let skipped = history.status_log.len().saturating_sub(HISTORY_LINES);
            if skipped > 0 {
                out.push_str(&format!("\n… {skipped} earlier changes"));
            }
            for change in &history.status_log[skipped..] {
                out.push_str(&format!(
                    "\n{} {} — {} ({})",
                    change.at.format("%m-%d %H:%M"),
                    change.status,
                    change.reason,
                    change.actor
                ));
            }
            out.push_str(&format!("\n{} agent steps", history.entries.len()));
            out
        }),
        Command::Usage { person } => usage(engine, caller, person).await,
        Command::Ask { id, text } => engine
            .answer(caller, &id, &text)
            .await
            .map(|task| format!("answered {} {}", task.id.short(), task.title)),
    };
    result.unwrap_or_else(|error| error.to_string())
}

async fn list(
    engine: &Engine,
    caller: &Caller,
    all: bool,
    status: Option<String>,
) -> Result<String, crate::error::EngineError> {
    let statuses = match status {
        Some(status) => match status.parse::<TaskStatus>() {
            Ok(status) => vec![status],
            Err(error) => return Ok(error.to_string()),
        },
        None => Vec::new(),
    };
    let mut note = String::new();
    let everyone = all && caller.role == Role::Admin;
    if all && !everyone {
        note.push_str("-all is for admins; showing your tasks\n");
    }
    // "Your tasks" are the tasks acting for you, whoever owns them: a planner task made for you
    // is owned by the planner of its chat.
    let (requester, owner) = match (&caller.requester, everyone) {
        (_, true) => (None, None),
        (Some(person), false) => (Some(person.clone()), None),
        (None, false) => (None, Some(caller.owner.clone())),
    };
    let filter = TaskFilter {
        requester,
        owner,
        statuses,
        limit: Some(LIST_LIMIT + 1),
        ..TaskFilter::default()
    };
    let tasks = engine.list(caller, filter).await?;
    if tasks.is_empty() {
        note.push_str("no tasks");
        return Ok(note);
    }
    let shown = tasks.len().min(LIST_LIMIT as usize);
    let lines: Vec<String> = tasks[..shown].iter().map(line).collect();
    note.push_str(&lines.join("\n"));
    if tasks.len() > shown {
        note.push_str(&format!(
            "\n(only the newest {LIST_LIMIT}; filter by status)"
        ));
    }
    Ok(note)
}

/// `text` followed by what `task`'s model calls cost so far.
async fn with_usage(
    engine: &Engine,
    mut text: String,
    task: &TaskRecord,
) -> Result<String, crate::error::EngineError> {
    let totals = engine.task_usage(task.id).await?;
    text.push_str(&format!(
        "
usage: {}",
        crate::usage::usage_line(&totals, &engine.currency())
    ));
    Ok(text)
}

/// `usage [person]`: the speaker's own figures and limits today; an admin may name someone
/// (`platform:user_id`, or a user id on the speaker's platform).
async fn usage(
    engine: &Engine,
    caller: &Caller,
    person: Option<String>,
) -> Result<String, crate::error::EngineError> {
    let Some(me) = &caller.requester else {
        return Ok("usage is shown to people; this caller acts for nobody".into());
    };
    let (person, role) = match person {
        None => (me.clone(), caller.role),
        Some(_) if caller.role != Role::Admin => {
            return Ok(format!(
                "only admins may see someone else's usage; /mt usage shows yours ({me})"
            ));
        }
        Some(named) => {
            let text = if named.contains(':') {
                named
            } else {
                format!("{}:{named}", me.platform)
            };
            let person = text.parse::<mai_core::ids::PersonId>().map_err(|e| {
                crate::error::EngineError::Invalid(format!(
                    "`{text}` is not a person: {e} (give platform:user_id)"
                ))
            })?;
            let role = engine.role_in(&person, caller.group_id.as_deref());
            (person, role)
        }
    };
    crate::admission::describe_budgets(engine, &person, role, &caller.stream_id).await
}

/// One task on one line: short id, status, title.
fn line(task: &TaskRecord) -> String {
    format!("{} {} {}", task.id.short(), task.status, task.title)
}

fn detail(task: &TaskRecord) -> String {
    let mut out = line(task);
    out.push_str(&format!("\nintent: {}", clip(&task.intent)));
    out.push_str(&format!(
        "\ncreated: {} by {}",
        task.created_at.format("%Y-%m-%d %H:%M"),
        task.owner
    ));
    if let Some(at) = task.scheduled_at {
        out.push_str(&format!("\nnext run: {}", at.format("%Y-%m-%d %H:%M")));
    }
    if let Some(waiting) = &task.metadata.waiting {
        out.push_str(&format!("\nwaiting for: {}", clip(&waiting.question)));
    }
    if let Some(answer) = &task.metadata.answer {
        out.push_str(&format!("\nanswer: {}", clip(answer)));
    }
    if let Some(error) = &task.metadata.error {
        out.push_str(&format!("\nerror: {}", clip(error)));
    }
    out
}

fn clip(text: &str) -> String {
    if text.chars().count() <= DETAIL_CHARS {
        return text.to_owned();
    }
    let head: String = text.chars().take(DETAIL_CHARS).collect();
    format!("{head}…")
}

/// A task id argument: the next token, if it is not empty.
fn id_of(rest: &str) -> Option<(String, &str)> {
    next_token(rest).filter(|(id, _)| !id.trim().is_empty())
}

/// The first token of `s` (whitespace-separated; a token starting with a quote runs to the
/// matching quote, so ids and words may be quoted) and what follows it.
fn next_token(s: &str) -> Option<(String, &str)> {
    let s = s.trim_start();
    let first = s.chars().next()?;
    if let Some(close) = closing_quote(first) {
        let body = &s[first.len_utf8()..];
        return Some(match body.find(close) {
            Some(end) => (body[..end].to_owned(), &body[end + close.len_utf8()..]),
            // An unclosed quote takes the rest.
            None => (body.to_owned(), ""),
        });
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some((s[..end].to_owned(), &s[end..]))
}

/// The rest of a command as free text (an intent, an answer): trimmed, one pair of surrounding
/// quotes removed; `None` when empty.
fn remainder(s: &str) -> Option<String> {
    let s = s.trim();
    let mut chars = s.chars();
    let unquoted = match (chars.next(), chars.next_back()) {
        (Some(open), Some(close)) if closing_quote(open) == Some(close) && s.len() > 1 => {
            s[open.len_utf8()..s.len() - close.len_utf8()].trim()
        }
        _ => s,
    };
    (!unquoted.is_empty()).then(|| unquoted.to_owned())
}

fn closing_quote(open: char) -> Option<char> {
    match open {
        '"' => Some('"'),
        '\'' => Some('\''),
        '“' => Some('”'),
        '「' => Some('」'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subcommands_and_arguments() {
        assert_eq!(
            parse("  create   buy  milk "),
            Command::Create {
                intent: "buy  milk".into()
            }
        );
        assert_eq!(
            parse("create \"buy milk\""),
            Command::Create {
                intent: "buy milk".into()
            }
        );
        assert_eq!(
            parse("LIST -all running"),
            Command::List {
                all: true,
                status: Some("running".into())
            }
        );
        assert_eq!(
            parse("ask 'ab12cd34' yes, do it"),
            Command::Ask {
                id: "ab12cd34".into(),
                text: "yes, do it".into()
            }
        );
    }

    #[test]
    fn unmatched_input_is_help_with_a_hint() {
        assert_eq!(parse(""), Command::Help { hint: None });
        assert!(
            matches!(parse("frobnicate"), Command::Help { hint: Some(h) } if h.contains("unknown"))
        );
        assert!(
            matches!(parse("status"), Command::Help { hint: Some(h) } if h.contains("status <id>"))
        );
        assert!(
            matches!(parse("ask ab12cd34"), Command::Help { hint: Some(h) } if h.contains("ask <id> <text>"))
        );
        assert!(matches!(
            parse("create \"\""),
            Command::Help { hint: Some(_) }
        ));
    }
}
