//! The mapping between domain values and column values; the only place that knows how a task,
//! a status-log line or a history entry looks in a row.
//!
//! Decoding never trusts the database: anything that does not parse becomes
//! [`StoreError::Corrupt`] naming the task.

use chrono::{DateTime, SecondsFormat, Utc};
use mai_core::store::{HistoryEntry, HistoryKind, StoreError};
use mai_core::task::{StatusChange, TaskId, TaskLevel, TaskRecord, TaskStatus};
use uuid::Uuid;

use crate::error::corrupt;
use crate::without_field::WithoutField;

/// The record's JSON key that lives in its own table instead.
const STATUS_LOG_KEY: &str = "status_log";

/// The stored form of a task id: 32 lowercase hex digits, so prefixes are key ranges.
pub(crate) fn id_key(id: TaskId) -> String {
    id.0.simple().to_string()
}

/// Parses a stored id key back; `None` if it is not a uuid.
pub(crate) fn parse_id_key(key: &str) -> Option<TaskId> {
    Uuid::try_parse(key).ok().map(TaskId)
}

/// RFC 3339 in UTC with nanoseconds: fixed width, so text order is time order, and exact.
pub(crate) fn time_text(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

fn parse_time(text: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(text).map(|at| at.with_timezone(&Utc))
}

pub(crate) fn level_text(level: TaskLevel) -> &'static str {
    match level {
        TaskLevel::Instant => "instant",
        TaskLevel::Agent => "agent",
    }
}

fn parse_history_kind(text: &str) -> Option<HistoryKind> {
    [
        HistoryKind::Message,
        HistoryKind::Injection,
        HistoryKind::Note,
    ]
    .into_iter()
    .find(|kind| kind.as_str() == text)
}

/// A task as the columns of its `tasks` row.
#[derive(Debug)]
pub(crate) struct TaskRow {
    pub id: String,
    pub title: String,
    pub owner: String,
    pub stream_id: String,
    pub status: &'static str,
    pub level: &'static str,
    pub created_at: String,
    pub updated_at: String,
    /// The record as JSON without its status log.
    pub record: String,
    /// The person the task acts for (`platform:user_id`); set once, at insert.
    pub requester: Option<String>,
    /// The task that made this one with `create_subtask` (not set for reply tasks); set once.
    pub created_by: Option<String>,
    /// The task that made this one, a reply's included; set once.
    pub parent_id: Option<String>,
}

impl TaskRow {
    pub(crate) fn encode(task: &TaskRecord) -> Result<Self, StoreError> {
        let record = serde_json::to_string(&WithoutField {
            value: task,
            skip: STATUS_LOG_KEY,
        })
        .map_err(|error| corrupt(task.id, format!("cannot encode the record: {error}")))?;
        Ok(TaskRow {
            id: id_key(task.id),
            title: task.title.clone(),
            owner: task.owner.to_string(),
            stream_id: task.stream_id.as_str().to_owned(),
            status: task.status.as_str(),
            level: level_text(task.level),
            created_at: time_text(task.created_at),
            updated_at: time_text(task.updated_at),
            record,
            requester: task.requester().map(ToString::to_string),
            created_by: task
                .metadata
                .parent_task_id
                .filter(|_| !task.metadata.is_reply)
                .map(id_key),
            parent_id: task.metadata.parent_task_id.map(id_key),
        })
    }
}

/// One status-log line as column text; equal lines compare equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogLine {
    pub at: String,
    pub status: String,
    pub actor: String,
    pub reason: String,
}

impl LogLine {
    pub(crate) fn encode(change: &StatusChange) -> Self {
        LogLine {
            at: time_text(change.at),
            status: change.status.as_str().to_owned(),
            actor: change.actor.clone(),
            reason: change.reason.clone(),
        }
    }
}

/// Decodes a stored status as the `status` column of task `task` holds it.
pub(crate) fn parse_status(task: &str, text: &str) -> Result<TaskStatus, StoreError> {
    text.parse()
        .map_err(|error| corrupt(display_key(task), error))
}

/// A stored id key shown the way people see ids (hyphenated) when it parses.
fn display_key(key: &str) -> String {
    parse_id_key(key).map_or_else(|| key.to_owned(), |id| id.to_string())
}

/// Rebuilds a record from its row: the id and status columns, the record JSON, and the status
/// log as a JSON array of `[at, status, actor, reason]` arrays in order.
pub(crate) fn decode_task(
    key: &str,
    status: &str,
    record: &str,
    status_log: &str,
) -> Result<TaskRecord, StoreError> {
    let shown = display_key(key);
    // The record holds no status log (the encoder leaves it out; the field defaults to empty).
    let mut task: TaskRecord = serde_json::from_str(record)
        .map_err(|error| corrupt(&shown, format!("the record does not decode: {error}")))?;
    if id_key(task.id) != key {
        return Err(corrupt(
            &shown,
            format!("the record holds another id ({})", task.id),
        ));
    }
    if task.status != parse_status(key, status)? {
        return Err(corrupt(
            &shown,
            format!(
                "the record says `{}`, the status column `{status}`",
                task.status
            ),
        ));
    }
    let lines: Vec<(String, String, String, String)> = serde_json::from_str(status_log)
        .map_err(|error| corrupt(&shown, format!("the status log does not decode: {error}")))?;
    task.status_log = lines
        .into_iter()
        .map(|(at, status, actor, reason)| {
            Ok(StatusChange {
                at: parse_time(&at)
                    .map_err(|error| corrupt(&shown, format!("status log time `{at}`: {error}")))?,
                status: parse_status(key, &status)?,
                actor,
                reason,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(task)
}

/// Rebuilds one history entry from its columns.
pub(crate) fn decode_history(
    task: TaskId,
    seq: i64,
    round: i64,
    kind: &str,
    payload: &str,
    at: &str,
) -> Result<HistoryEntry, StoreError> {
    let bad = |detail: String| corrupt(task, format!("history entry {seq}: {detail}"));
    Ok(HistoryEntry {
        seq: u64::try_from(seq).map_err(|_| bad("negative sequence number".to_owned()))?,
        round: u32::try_from(round).map_err(|_| bad(format!("round {round} out of range")))?,
        kind: parse_history_kind(kind).ok_or_else(|| bad(format!("unknown kind `{kind}`")))?,
        payload: serde_json::from_str(payload)
            .map_err(|error| bad(format!("the payload is not JSON: {error}")))?,
        at: parse_time(at).map_err(|error| bad(format!("time `{at}`: {error}")))?,
    })
}
