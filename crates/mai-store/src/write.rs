//! The write transactions: insert, compare-and-set save/checkpoint, history append.
//!
//! Every write transaction starts with `BEGIN IMMEDIATE`, so it holds SQLite's write lock before
//! it reads anything: a deferred transaction that reads and then writes can fail with
//! `SQLITE_BUSY` when another writer committed in between, and busy_timeout cannot help it.
//! Holding the lock also makes "read the stored status, then write" one atomic step.

use mai_core::store::{NewHistoryEntry, SaveOutcome, StoreError};
use mai_core::task::{StatusChange, TaskId, TaskRecord, TaskStatus};
use sqlx::{Sqlite, SqliteConnection, Transaction};

use crate::codec::{LogLine, TaskRow, id_key, parse_status, time_text};
use crate::error::{corrupt, db, is_unique_violation};
use crate::sqlite::SqliteStore;

/// The compare-and-set update; the expected status is bound last.
macro_rules! update_task {
    ($condition:literal) => {
        concat!(
            "UPDATE tasks SET title = ?, owner = ?, stream_id = ?, status = ?, level = ?, \
             created_at = ?, updated_at = ?, record = ? WHERE id = ?",
            $condition
        )
    };
}
const UPDATE_IF_STATUS: &str = update_task!(" AND status = ?");
const UPDATE_ANY_STATUS: &str = update_task!("");

impl SqliteStore {
    /// Takes this process's write turn, then SQLite's write lock.
    async fn begin_write(
        &self,
        doing: &'static str,
    ) -> Result<
        (
            tokio::sync::MutexGuard<'_, ()>,
            Transaction<'static, Sqlite>,
        ),
        StoreError,
    > {
        let turn = self.write_gate.lock().await;
        let tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db(doing))?;
        Ok((turn, tx))
    }

    pub(crate) async fn insert_task(&self, task: &TaskRecord) -> Result<(), StoreError> {
        const DOING: &str = "inserting a task";
        let row = TaskRow::encode(task)?;
        let (_turn, mut tx) = self.begin_write(DOING).await?;
        let inserted = sqlx::query(
            "INSERT INTO tasks (title, owner, stream_id, status, level, created_at, updated_at, \
             record, id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&row.title)
        .bind(&row.owner)
        .bind(&row.stream_id)
        .bind(row.status)
        .bind(row.level)
        .bind(&row.created_at)
        .bind(&row.updated_at)
        .bind(&row.record)
        .bind(&row.id)
        .execute(&mut *tx)
        .await;
        match inserted {
            Err(error) if is_unique_violation(&error) => {
                return Err(StoreError::Duplicate(task.id));
            }
            other => other.map_err(db(DOING))?,
        };
        insert_log_lines(&mut tx, &row.id, 0, &task.status_log, DOING).await?;
        tx.commit().await.map_err(db(DOING))
    }

    /// `save` and `checkpoint`: the compare-and-set update, the status-log lines the store lacks
    /// and `history`, in one transaction.
    pub(crate) async fn write_task(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
        doing: &'static str,
    ) -> Result<SaveOutcome, StoreError> {
        let row = TaskRow::encode(task)?;
        let history = encode_history(task.id, history)?;
        let (_turn, mut tx) = self.begin_write(doing).await?;
        let statement = if expected.is_some() {
            UPDATE_IF_STATUS
        } else {
            UPDATE_ANY_STATUS
        };
        let mut update = sqlx::query(statement)
            .bind(&row.title)
            .bind(&row.owner)
            .bind(&row.stream_id)
            .bind(row.status)
            .bind(row.level)
            .bind(&row.created_at)
            .bind(&row.updated_at)
            .bind(&row.record)
            .bind(&row.id);
        if let Some(expected) = expected {
            update = update.bind(expected.as_str());
        }
        let updated = update
            .execute(&mut *tx)
            .await
            .map_err(db(doing))?
            .rows_affected();
        if updated == 0 {
            let actual: Option<String> =
                sqlx::query_scalar("SELECT status FROM tasks WHERE id = ?")
                    .bind(&row.id)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db(doing))?;
            tx.rollback().await.map_err(db(doing))?;
            return match actual {
                None => Err(StoreError::NotFound(task.id)),
                Some(actual) => Ok(SaveOutcome::Conflict {
                    actual: parse_status(&row.id, &actual)?,
                }),
            };
        }
        append_new_log_lines(&mut tx, &row.id, &task.status_log, doing).await?;
        insert_history(&mut tx, &row.id, &history, doing).await?;
        tx.commit().await.map_err(db(doing))?;
        Ok(SaveOutcome::Saved)
    }

    pub(crate) async fn append_history_only(
        &self,
        id: TaskId,
        entries: &[NewHistoryEntry],
    ) -> Result<(), StoreError> {
        const DOING: &str = "appending task history";
        let key = id_key(id);
        let history = encode_history(id, entries)?;
        let (_turn, mut tx) = self.begin_write(DOING).await?;
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?)")
            .bind(&key)
            .fetch_one(&mut *tx)
            .await
            .map_err(db(DOING))?;
        if !exists {
            return Err(StoreError::NotFound(id));
        }
        insert_history(&mut tx, &key, &history, DOING).await?;
        tx.commit().await.map_err(db(DOING))
    }
}

/// Appends the lines of `log` the store does not have yet.
///
/// Normally `log` is the stored log plus new lines. A compare-and-set can also pass on a record
/// whose log diverged from the stored one (its status went A→B→A meanwhile): then the lines
/// from the first difference on are this writer's own and are appended after the stored ones,
/// so the stored log stays append-only and ends with the status just written.
async fn append_new_log_lines(
    tx: &mut SqliteConnection,
    key: &str,
    log: &[StatusChange],
    doing: &'static str,
) -> Result<(), StoreError> {
    let last: Option<(i64, String, String, String, String)> = sqlx::query_as(
        "SELECT seq, at, status, actor, reason FROM task_status_log \
         WHERE task_id = ? ORDER BY seq DESC LIMIT 1",
    )
    .bind(key)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db(doing))?;
    let Some((last_seq, at, status, actor, reason)) = last else {
        return insert_log_lines(tx, key, 0, log, doing).await;
    };
    let stored_len = usize::try_from(last_seq)
        .ok()
        .and_then(|seq| seq.checked_add(1))
        .ok_or_else(|| corrupt(key, format!("status log sequence number {last_seq}")))?;
    let stored_last = LogLine {
        at,
        status,
        actor,
        reason,
    };
    let extends_stored = log
        .get(stored_len - 1)
        .is_some_and(|line| LogLine::encode(line) == stored_last);
    let first_new = if extends_stored {
        stored_len
    } else {
        first_difference(tx, key, log, doing).await?
    };
    let new_lines = log.get(first_new..).unwrap_or_default();
    insert_log_lines(tx, key, stored_len, new_lines, doing).await
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

async fn insert_log_lines(
    tx: &mut SqliteConnection,
    key: &str,
    first_seq: usize,
    lines: &[StatusChange],
    doing: &'static str,
) -> Result<(), StoreError> {
    for (seq, line) in (first_seq..).zip(lines) {
        let line = LogLine::encode(line);
        sqlx::query(
            "INSERT INTO task_status_log (task_id, seq, at, status, actor, reason) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(key)
        .bind(i64::try_from(seq).map_err(|_| corrupt(key, "status log too long"))?)
        .bind(&line.at)
        .bind(&line.status)
        .bind(&line.actor)
        .bind(&line.reason)
        .execute(&mut *tx)
        .await
        .map_err(db(doing))?;
    }
    Ok(())
}

/// A history entry as columns, encoded before the write lock is taken.
struct HistoryRow {
    round: i64,
    kind: &'static str,
    payload: String,
    at: String,
}

fn encode_history(id: TaskId, entries: &[NewHistoryEntry]) -> Result<Vec<HistoryRow>, StoreError> {
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

/// Appends `rows` after the stored history, numbering them from the stored maximum on.
async fn insert_history(
    tx: &mut SqliteConnection,
    key: &str,
    rows: &[HistoryRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let next: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(seq) + 1, 0) FROM task_history WHERE task_id = ?")
            .bind(key)
            .fetch_one(&mut *tx)
            .await
            .map_err(db(doing))?;
    for (seq, row) in (next..).zip(rows) {
        sqlx::query(
            "INSERT INTO task_history (task_id, seq, round, kind, payload, at) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(key)
        .bind(seq)
        .bind(row.round)
        .bind(row.kind)
        .bind(&row.payload)
        .bind(&row.at)
        .execute(&mut *tx)
        .await
        .map_err(db(doing))?;
    }
    Ok(())
}
