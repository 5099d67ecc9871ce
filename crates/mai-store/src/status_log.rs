//! Appending to a task's status log inside a write transaction: which lines of a record's log
//! the store lacks, and inserting them. Lines are only ever added, never changed or removed.

use mai_core::store::StoreError;
use mai_core::task::StatusChange;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use crate::codec::LogLine;
use crate::error::{corrupt, db};

/// What the store holds of a task's status log: its length and last line.
pub(crate) struct StoredTail {
    len: usize,
    last: Option<LogLine>,
}

impl StoredTail {
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
pub(crate) async fn append_new_log_lines(
    tx: &mut SqliteConnection,
    key: &str,
    stored: StoredTail,
    log: &[StatusChange],
    doing: &'static str,
) -> Result<(), StoreError> {
    let extends_stored = match (stored.len.checked_sub(1), &stored.last) {
        (Some(last_index), Some(last)) => log
            .get(last_index)
            .is_some_and(|line| LogLine::encode(line) == *last),
        _ => true,
    };
    let first_new = if extends_stored {
        stored.len
    } else {
        first_difference(tx, key, log, doing).await?
    };
    let new_lines = log.get(first_new..).unwrap_or_default();
    insert_log_lines(tx, key, stored.len, new_lines, doing).await
}

/// The index of the first line of `log` that differs from the stored log (or that the stored
/// log does not have).
async fn first_difference(
    tx: &mut SqliteConnection,
    key: &str,
    log: &[StatusChange],
    doing: &'static str,
) -> Result<usize, StoreError> {
    let stored: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT at, status, actor, reason FROM task_status_log WHERE task_id = ? ORDER BY seq",
    )
    .bind(key)
    .fetch_all(&mut *tx)
    .await
    .map_err(db(doing))?;
    let differs = log
        .iter()
        .zip(&stored)
        .position(|(line, (at, status, actor, reason))| {
            let line = LogLine::encode(line);
            (&line.at, &line.status, &line.actor, &line.reason) != (at, status, actor, reason)
        });
    Ok(differs.unwrap_or(log.len().min(stored.len())))
}

/// Rows per multi-row insert: 6 parameters each stays far below SQLite's parameter limit.
pub(crate) const ROWS_PER_INSERT: usize = 500;

/// Inserts `lines` as log rows numbered from `first_seq` (one statement per
/// [`ROWS_PER_INSERT`] lines).
pub(crate) async fn insert_log_lines(
    tx: &mut SqliteConnection,
    key: &str,
    first_seq: usize,
    lines: &[StatusChange],
    doing: &'static str,
) -> Result<(), StoreError> {
    let first_seq =
        i64::try_from(first_seq).map_err(|_| corrupt(key, "the status log is too long"))?;
    let numbered: Vec<(i64, LogLine)> = (first_seq..)
        .zip(lines.iter().map(LogLine::encode))
        .collect();
    for chunk in numbered.chunks(ROWS_PER_INSERT) {
        let mut insert = QueryBuilder::<Sqlite>::new(
            "INSERT INTO task_status_log (task_id, seq, at, status, actor, reason) ",
        );
        insert.push_values(chunk, |mut values, (seq, line)| {
            values
                .push_bind(key)
                .push_bind(*seq)
                .push_bind(line.at.as_str())
                .push_bind(line.status.as_str())
                .push_bind(line.actor.as_str())
                .push_bind(line.reason.as_str());
        });
        insert.build().execute(&mut *tx).await.map_err(db(doing))?;
    }
    Ok(())
}
