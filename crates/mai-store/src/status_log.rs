//! Appending to a task's status log inside a write transaction (on the writer's thread): which
//! lines of a record's log the store lacks, and inserting them. Lines are only ever added,
//! never changed or removed.

use mai_core::store::StoreError;
use rusqlite::{Connection, params};

use crate::codec::LogLine;
use crate::error::{corrupt, db};

/// What the store holds of a task's status log: its length and last line.
pub(crate) struct StoredTail {
    len: usize,
    last: Option<LogLine>,
}

impl StoredTail {
    /// A stored log of `len` lines ending with `last` (`None` when empty).
    pub(crate) fn new(len: usize, last: Option<LogLine>) -> Self {
        StoredTail { len, last }
    }

    /// How many lines the store holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether `log` continues the stored log: it holds the stored last line at its place.
    pub(crate) fn extended_by(&self, log: &[LogLine]) -> bool {
        match (self.len.checked_sub(1), &self.last) {
            (Some(last_index), Some(last)) => log.get(last_index) == Some(last),
            _ => true,
        }
    }

    /// From the update's `[seq, at, status, actor, reason]` (NULL for an empty log).
    pub(crate) fn decode(key: &str, tail: Option<&str>) -> Result<Self, StoreError> {
        let Some(tail) = tail else {
            return Ok(StoredTail { len: 0, last: None });
        };
        let (seq, at, status, actor, reason): (u64, String, String, String, String) =
            serde_json::from_str(tail)
                .map_err(|error| corrupt(key, format!("status log tail `{tail}`: {error}")))?;
        let len = usize::try_from(seq)
            .ok()
            .and_then(|seq| seq.checked_add(1))
            .ok_or_else(|| corrupt(key, format!("status log sequence number {seq}")))?;
        Ok(StoredTail {
            len,
            last: Some(LogLine {
                at,
                status,
                actor,
                reason,
            }),
        })
    }
}

/// Appends the lines of `log` the store does not have yet.
///
/// Normally `log` is the stored log plus new lines. A compare-and-set can also pass on a record
/// whose log diverged from the stored one (its status went A→B→A meanwhile): then the lines
/// from the first difference on are this writer's own and are appended after the stored ones,
/// so the stored log stays append-only and ends with the status just written.
pub(crate) fn append_new_log_lines(
    connection: &Connection,
    task: TaskKey<'_>,
    stored: StoredTail,
    log: &[LogLine],
    doing: &'static str,
) -> Result<(), StoreError> {
    let first_new = if stored.extended_by(log) {
        stored.len
    } else {
        first_difference(connection, task.num, log).map_err(db(doing))?
    };
    let new_lines = log.get(first_new..).unwrap_or_default();
    insert_log_lines(connection, task, stored.len, new_lines, doing)
}

/// The index of the first line of `log` that differs from the stored log (or that the stored
/// log does not have).
fn first_difference(connection: &Connection, num: i64, log: &[LogLine]) -> rusqlite::Result<usize> {
    let mut select = connection.prepare_cached(
        "SELECT at, status, actor, reason FROM task_status_log \
         WHERE key >= (?1 << 32) AND key < ((?1 + 1) << 32) ORDER BY key",
    )?;
    let stored = select
        .query_map([num], |row| {
            Ok(LogLine {
                at: row.get(0)?,
                status: row.get(1)?,
                actor: row.get(2)?,
                reason: row.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(first_difference_in(log, &stored))
}

/// The index of the first line of `log` that differs from `stored` (or that `stored` lacks).
pub(crate) fn first_difference_in(log: &[LogLine], stored: &[LogLine]) -> usize {
    let differs = log
        .iter()
        .zip(stored)
        .position(|(line, stored)| line != stored);
    differs.unwrap_or(log.len().min(stored.len()))
}

/// Which task a log belongs to: its id (the key its rows name) and its number (`tasks.num`,
/// which keys the rows, see migration 8).
#[derive(Clone, Copy)]
pub(crate) struct TaskKey<'a> {
    pub(crate) id: &'a str,
    pub(crate) num: i64,
}

/// Inserts `lines` as log rows numbered from `first_seq`, each keyed by its task's number and
/// its own (`num << 32 | seq`), so a task's log is one key range.
pub(crate) fn insert_log_lines(
    connection: &Connection,
    task: TaskKey<'_>,
    first_seq: usize,
    lines: &[LogLine],
    doing: &'static str,
) -> Result<(), StoreError> {
    let first_seq =
        i64::try_from(first_seq).map_err(|_| corrupt(task.id, "the status log is too long"))?;
    let mut insert = connection
        .prepare_cached(
            "INSERT INTO task_status_log (key, task_id, seq, at, status, actor, reason) \
             VALUES ((?1 << 32) | ?3, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(db(doing))?;
    for (seq, line) in (first_seq..).zip(lines) {
        insert
            .execute(params![
                task.num,
                task.id,
                seq,
                line.at,
                line.status,
                line.actor,
                line.reason
            ])
            .map_err(db(doing))?;
    }
    Ok(())
}
