//! Appending to a task's agent history inside a write transaction (on the writer's thread):
//! entries are numbered on from the stored maximum.
//!
//! A task's entries are one key range of the `task_history` table: the key (its rowid) is the
//! task's number (`tasks.num`) shifted left by 32 bits, plus the entry's sequence number, so
//! appending an entry writes one page at the end of its task's range (migration 7).

use mai_core::store::{NewHistoryEntry, StoreError};
use mai_core::task::TaskId;
use rusqlite::{Connection, params};

use crate::codec::time_text;
use crate::error::{corrupt, db};

/// A history entry as columns, encoded before the write lock is taken.
#[derive(Debug)]
pub(crate) struct HistoryRow {
    pub round: i64,
    pub kind: &'static str,
    pub payload: String,
    pub at: String,
}

pub(crate) fn encode_history(
    id: TaskId,
    entries: &[NewHistoryEntry],
) -> Result<Vec<HistoryRow>, StoreError> {
    entries
        .iter()
        .map(|entry| {
            Ok(HistoryRow {
                round: i64::from(entry.round),
                kind: entry.kind.as_str(),
                payload: serde_json::to_string(&entry.payload).map_err(|error| {
                    corrupt(id, format!("cannot encode a history payload: {error}"))
                })?,
                at: time_text(entry.at),
            })
        })
        .collect()
}

/// Where a task's next history entry goes: its number and the entry's sequence number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HistoryAt {
    num: i64,
    seq: i64,
}

impl HistoryAt {
    /// After the entry with key `last` (none: the task has no history yet) of task `num`.
    pub(crate) fn after(num: i64, last: Option<i64>) -> Self {
        let seq = last.map_or(0, |key| (key & 0xFFFF_FFFF) + 1);
        HistoryAt { num, seq }
    }
}

/// Appends `rows` numbered on from `at`.
pub(crate) fn insert_history(
    connection: &Connection,
    task: &str,
    at: HistoryAt,
    rows: &[HistoryRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = connection
        .prepare_cached(
            "INSERT INTO task_history (key, task_id, seq, round, kind, payload, at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .map_err(db(doing))?;
    for (seq, row) in (at.seq..).zip(rows) {
        let key = (at.num << 32) | seq;
        insert
            .execute(params![
                key,
                task,
                seq,
                row.round,
                row.kind,
                row.payload,
                row.at
            ])
            .map_err(db(doing))?;
    }
    Ok(())
}
