//! The write transactions: insert, compare-and-set save/checkpoint, history append.
//!
//! Every write transaction starts with `BEGIN IMMEDIATE`, so it holds SQLite's write lock before
//! it reads anything: a deferred transaction that reads and then writes can fail with
//! `SQLITE_BUSY` when another writer committed in between, and busy_timeout cannot help it.
//! Holding the lock also makes "read the stored status, then write" one atomic step.

use mai_core::store::{NewHistoryEntry, SaveOutcome, StoreError, TaskWrite};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use sqlx::{Sqlite, SqliteConnection, Transaction};
use tokio::sync::MutexGuard;

use crate::agent_history::{HistoryRow, encode_history, insert_history};
use crate::codec::{TaskRow, id_key, parse_status};
use crate::error::{db, is_unique_violation};
use crate::one_trip::{Head, NewRow, SaveRows, Unit};
use crate::sqlite::SqliteStore;
use crate::status_log::{StoredTail, append_new_log_lines, insert_log_lines};

/// What every update returns, saving round trips to the connection: the stored status-log
/// tail as JSON `[seq, at, status, actor, reason]` (NULL when empty) and the next history number.
macro_rules! returning_tails {
    () => {
        " RETURNING \
         (SELECT json_array(l.seq, l.at, l.status, l.actor, l.reason) \
          FROM task_status_log l WHERE l.task_id = tasks.id ORDER BY l.seq DESC LIMIT 1), \
         (SELECT COALESCE(MAX(h.seq) + 1, 0) FROM task_history h WHERE h.task_id = tasks.id)"
    };
}

/// The common write (a checkpoint within one status): only columns no index covers change, so
/// SQLite rewrites no index entry. It matches only if every indexed column, the status
/// included, already holds the record's value; otherwise the full update runs.
const UPDATE_UNINDEXED: &str = concat!(
    "UPDATE tasks SET updated_at = ?, record = ? WHERE id = ? AND status = ? AND title = ? \
     AND owner = ? AND stream_id = ? AND level = ? AND created_at = ?",
    returning_tails!()
);

/// The full update; with the expected status bound last when there is one.
macro_rules! update_all {
    ($condition:literal) => {
        concat!(
            "UPDATE tasks SET title = ?, owner = ?, stream_id = ?, status = ?, level = ?, \
             created_at = ?, updated_at = ?, record = ? WHERE id = ?",
            $condition,
            returning_tails!()
        )
    };
}
const UPDATE_ALL_IF_STATUS: &str = update_all!(" AND status = ?");
const UPDATE_ALL: &str = update_all!("");

/// The row returned by an update: see [`returning_tails`].
type Tails = (Option<String>, i64);

/// This process's write turn and the open `BEGIN IMMEDIATE` transaction; the turn is released
/// when the pair is dropped, after the transaction ends.
type WriteTurn<'a> = (MutexGuard<'a, ()>, Transaction<'static, Sqlite>);

impl SqliteStore {
    /// Takes this process's write turn, then SQLite's write lock.
    async fn begin_write(&self, doing: &'static str) -> Result<WriteTurn<'_>, StoreError> {
        let turn = self.write_gate.lock().await;
        let tx = self.begin_immediate(doing).await?;
        Ok((turn, tx))
    }

    /// SQLite's write lock, for a caller that holds the write turn.
    async fn begin_immediate(
        &self,
        doing: &'static str,
    ) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db(doing))
    }

    pub(crate) async fn insert_task(&self, task: &TaskRecord) -> Result<(), StoreError> {
        const DOING: &str = "inserting a task";
        let unit = Unit {
            head: Head::Insert(NewRow::encode(task)?),
            inserts: Vec::new(),
        };
        if unit.fits() && self.commit_unit(unit, DOING).await? {
            return Ok(());
        }
        let (_turn, mut tx) = self.begin_write(DOING).await?;
        if !insert_in(&mut tx, task, DOING).await? {
            return Err(StoreError::Duplicate(task.id));
        }
        tx.commit().await.map_err(db(DOING))
    }

    /// `save`, `checkpoint` and `write`: the writes in one transaction, all or nothing.
    pub(crate) async fn write_all(
        &self,
        writes: &[TaskWrite<'_>],
        doing: &'static str,
    ) -> Result<SaveOutcome, StoreError> {
        // The usual case goes through the group commit; anything else (conflicts included)
        // below.
        if let Some(unit) = one_trip_unit(writes)?
            && unit.fits()
            && self.commit_unit(unit, doing).await?
        {
            return Ok(SaveOutcome::Saved);
        }
        let (_turn, mut tx) = self.begin_write(doing).await?;
        for write in writes {
            match *write {
                TaskWrite::InsertIfAbsent(task) => {
                    insert_in(&mut tx, task, doing).await?;
                }
                TaskWrite::Save {
                    task,
                    expected,
                    expected_question,
                    history,
                } => {
                    let history = encode_history(task.id, history)?;
                    if let Some(conflict) =
                        save_in(&mut tx, task, expected, expected_question, &history, doing).await?
                    {
                        tx.rollback().await.map_err(db(doing))?;
                        return Ok(conflict);
                    }
                }
            }
        }
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
        let next_seq: Option<i64> = sqlx::query_scalar(
            "SELECT (SELECT COALESCE(MAX(h.seq) + 1, 0) FROM task_history h \
             WHERE h.task_id = tasks.id) FROM tasks WHERE id = ?",
        )
        .bind(&key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(DOING))?;
        let Some(next_seq) = next_seq else {
            return Err(StoreError::NotFound(id));
        };
        insert_history(&mut tx, &key, next_seq, &history, DOING).await?;
        tx.commit().await.map_err(db(DOING))
    }
}

/// The writes as one group-commit unit, when they have its shape: a compare-and-set save or an
/// insert first, then only inserts. `None`: take the general path.
fn one_trip_unit(writes: &[TaskWrite<'_>]) -> Result<Option<Unit>, StoreError> {
    let Some((first, rest)) = writes.split_first() else {
        return Ok(None);
    };
    let head = match *first {
        TaskWrite::InsertIfAbsent(task) => Head::Insert(NewRow::encode(task)?),
        TaskWrite::Save {
            task,
            expected,
            expected_question,
            history,
        } => {
            let row = TaskRow::encode(task)?;
            let history = encode_history(task.id, history)?;
            match SaveRows::encode(task, row, expected, expected_question, history) {
                Some(save) => Head::Save(save),
                None => return Ok(None),
            }
        }
    };
    let mut inserts = Vec::with_capacity(rest.len());
    for write in rest {
        match *write {
            TaskWrite::InsertIfAbsent(task) => inserts.push(NewRow::encode(task)?),
            TaskWrite::Save { .. } => return Ok(None),
        }
    }
    Ok(Some(Unit { head, inserts }))
}

/// Inserts `task` and its log inside `tx`; `false` if a task with its id exists (nothing
/// written).
async fn insert_in(
    tx: &mut SqliteConnection,
    task: &TaskRecord,
    doing: &'static str,
) -> Result<bool, StoreError> {
    let row = TaskRow::encode(task)?;
    let inserted = sqlx::query(
        "INSERT INTO tasks (title, owner, stream_id, status, level, created_at, updated_at, \
         record, requester, created_by, id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&row.title)
    .bind(&row.owner)
    .bind(&row.stream_id)
    .bind(row.status)
    .bind(row.level)
    .bind(&row.created_at)
    .bind(&row.updated_at)
    .bind(&row.record)
    .bind(&row.requester)
    .bind(&row.created_by)
    .bind(&row.id)
    .execute(&mut *tx)
    .await;
    match inserted {
        Err(error) if is_unique_violation(&error) => return Ok(false),
        other => other.map_err(db(doing))?,
    };
    insert_log_lines(tx, &row.id, 0, &task.status_log, doing).await?;
    Ok(true)
}

/// The general compare-and-set save inside `tx` (which holds the write lock): the update, the
/// status-log lines the store lacks and `history`. `Some(conflict)` when an expectation did not
/// hold; the caller rolls back.
async fn save_in(
    tx: &mut SqliteConnection,
    task: &TaskRecord,
    expected: Option<TaskStatus>,
    expected_question: Option<&str>,
    history: &[HistoryRow],
    doing: &'static str,
) -> Result<Option<SaveOutcome>, StoreError> {
    let row = TaskRow::encode(task)?;
    let conflict = |actual: String| -> Result<Option<SaveOutcome>, StoreError> {
        Ok(Some(SaveOutcome::Conflict {
            actual: parse_status(&row.id, &actual)?,
        }))
    };
    if let Some(question) = expected_question {
        // The write lock is held, so this check and the update below are one atomic step.
        let stored: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT status, json_extract(record, '$.metadata.waiting.call_id') FROM tasks \
             WHERE id = ?",
        )
        .bind(&row.id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(doing))?;
        match stored {
            None => return Err(StoreError::NotFound(task.id)),
            Some((actual, call)) if call.as_deref() != Some(question) => return conflict(actual),
            Some(_) => {}
        }
    }
    let mut updated = None;
    if expected.is_none_or(|expected| expected == task.status) {
        updated = update_unindexed(tx, &row, doing).await?;
    }
    if updated.is_none() {
        updated = update_all(tx, &row, expected, doing).await?;
    }
    let Some((log_tail, next_history_seq)) = updated else {
        let actual: Option<String> = sqlx::query_scalar("SELECT status FROM tasks WHERE id = ?")
            .bind(&row.id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db(doing))?;
        return match actual {
            None => Err(StoreError::NotFound(task.id)),
            Some(actual) => conflict(actual),
        };
    };
    let tail = StoredTail::decode(&row.id, log_tail.as_deref())?;
    append_new_log_lines(tx, &row.id, tail, &task.status_log, doing).await?;
    insert_history(tx, &row.id, next_history_seq, history, doing).await?;
    Ok(None)
}

/// [`UPDATE_UNINDEXED`]: `None` when the row does not match (another status, another indexed
/// value, or no such task).
async fn update_unindexed(
    tx: &mut SqliteConnection,
    row: &TaskRow,
    doing: &'static str,
) -> Result<Option<Tails>, StoreError> {
    sqlx::query_as(UPDATE_UNINDEXED)
        .bind(&row.updated_at)
        .bind(&row.record)
        .bind(&row.id)
        .bind(row.status)
        .bind(&row.title)
        .bind(&row.owner)
        .bind(&row.stream_id)
        .bind(row.level)
        .bind(&row.created_at)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(doing))
}

/// The full compare-and-set update: `None` when the stored status is not `expected` or there
/// is no such task.
async fn update_all(
    tx: &mut SqliteConnection,
    row: &TaskRow,
    expected: Option<TaskStatus>,
    doing: &'static str,
) -> Result<Option<Tails>, StoreError> {
    let statement = if expected.is_some() {
        UPDATE_ALL_IF_STATUS
    } else {
        UPDATE_ALL
    };
    let mut update = sqlx::query_as(statement)
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
    update.fetch_optional(&mut *tx).await.map_err(db(doing))
}
