//! Appending to a task's agent history inside a write transaction (on the writer's thread):
//! entries are numbered on from the stored maximum.

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

/// Appends `rows` numbered from `first_seq` (the stored maximum + 1).
pub(crate) fn insert_history(
    connection: &Connection,
    key: &str,
    first_seq: i64,
    rows: &[HistoryRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = connection
        .prepare_cached(
            "INSERT INTO task_history (task_id, seq, round, kind, payload, at) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .map_err(db(doing))?;
    for (seq, row) in (first_seq..).zip(rows) {
        insert
            .execute(params![key, seq, row.round, row.kind, row.payload, row.at])
            .map_err(db(doing))?;
    }
    Ok(())
}
