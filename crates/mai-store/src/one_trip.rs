//! The common writes in one round trip to the connection's thread: inserting a task, and the
//! compare-and-set save or checkpoint.
//!
//! sqlx runs each SQLite connection on its own thread and every statement (and `BEGIN`,
//! `COMMIT`, the pool's release ping) is a message to that thread and back: two or more thread
//! wake-ups each. On a small VM a wake-up costs tens of microseconds, far more than the SQL, so
//! a checkpoint of five exchanges spent most of its time switching threads. Here the usual
//! writes — an insert, a checkpoint within a status, a status change that adds one log line —
//! are each one multi-statement batch, e.g. `BEGIN IMMEDIATE; UPDATE … RETURNING 1; INSERT …
//! WHERE changes() > 0; COMMIT`. The update carries the compare-and-set and also checks that the
//! stored status log ends exactly where the record says, so the inserts that follow need no
//! answer from it.
//!
//! When the guess does not hold (a conflict, a changed indexed column, a log that diverged) the
//! batch changes nothing and commits an empty transaction; the caller then runs the general
//! write in `write`, which reports conflicts and repairs logs. This module must not change what
//! a write means: same rows, same numbering, both-or-neither.

use mai_core::store::StoreError;
use mai_core::task::{TaskRecord, TaskStatus};
use sqlx::pool::PoolConnection;
use sqlx::{QueryBuilder, Sqlite};

use crate::agent_history::HistoryRow;
use crate::codec::{LogLine, TaskRow};
use crate::error::{db, is_unique_violation};
use crate::sqlite::SqliteStore;
use crate::status_log::ROWS_PER_INSERT;

/// A pooled connection inside a batch. A batch stops at its first failing statement, and a
/// dropped future stops it wherever it is, so the connection may be left inside the
/// transaction: unless [`Batch::finish`] ran, it is taken out of the pool and closed, which
/// rolls the transaction back (and releases SQLite's write lock).
struct Batch(Option<PoolConnection<Sqlite>>);

impl Batch {
    fn connection(&mut self) -> Option<&mut PoolConnection<Sqlite>> {
        self.0.as_mut()
    }

    /// The batch ended with its `COMMIT`: the connection goes back to the pool.
    fn finish(mut self) {
        self.0.take();
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(connection) = self.0.take() {
            drop(connection.detach());
        }
    }
}

impl SqliteStore {
    /// Tries `task`'s compare-and-set write (expecting stored status `expected`) plus `history`
    /// in one batch. `Ok(true)`: written. `Ok(false)`: nothing was written; run the general
    /// write. The caller holds the write turn.
    pub(crate) async fn write_in_one_trip(
        &self,
        task: &TaskRecord,
        row: &TaskRow,
        expected: TaskStatus,
        history: &[HistoryRow],
        doing: &'static str,
    ) -> Result<bool, StoreError> {
        let log = &task.status_log;
        let status_changes = expected != task.status;
        // How much of the log the store should already hold: all of it within a status; all
        // but the new last line when the status changes.
        let stored_len = if status_changes {
            log.len().saturating_sub(1)
        } else {
            log.len()
        };
        let (Some(tail), Ok(tail_seq)) = (
            stored_len.checked_sub(1).and_then(|last| log.get(last)),
            i64::try_from(stored_len.saturating_sub(1)),
        ) else {
            return Ok(false);
        };
        if history.len() > ROWS_PER_INSERT {
            return Ok(false);
        }
        let tail = LogLine::encode(tail);

        let mut sql = QueryBuilder::<Sqlite>::new("BEGIN IMMEDIATE; UPDATE tasks SET ");
        if status_changes {
            sql.push("title = ")
                .push_bind(&row.title)
                .push(", owner = ")
                .push_bind(&row.owner)
                .push(", stream_id = ")
                .push_bind(&row.stream_id)
                .push(", status = ")
                .push_bind(row.status)
                .push(", level = ")
                .push_bind(row.level)
                .push(", created_at = ")
                .push_bind(&row.created_at)
                .push(", updated_at = ")
                .push_bind(&row.updated_at)
                .push(", record = ")
                .push_bind(&row.record)
                .push(" WHERE id = ")
                .push_bind(&row.id)
                .push(" AND status = ")
                .push_bind(expected.as_str());
        } else {
            // Only columns no index covers change, as in `write`'s unindexed update.
            sql.push("updated_at = ")
                .push_bind(&row.updated_at)
                .push(", record = ")
                .push_bind(&row.record)
                .push(" WHERE id = ")
                .push_bind(&row.id)
                .push(" AND status = ")
                .push_bind(row.status)
                .push(" AND title = ")
                .push_bind(&row.title)
                .push(" AND owner = ")
                .push_bind(&row.owner)
                .push(" AND stream_id = ")
                .push_bind(&row.stream_id)
                .push(" AND level = ")
                .push_bind(row.level)
                .push(" AND created_at = ")
                .push_bind(&row.created_at);
        }
        sql.push(
            " AND EXISTS (SELECT 1 FROM task_status_log l WHERE l.task_id = tasks.id AND l.seq = ",
        )
        .push_bind(tail_seq)
        .push(" AND l.at = ")
        .push_bind(tail.at)
        .push(" AND l.status = ")
        .push_bind(tail.status)
        .push(" AND l.actor = ")
        .push_bind(tail.actor)
        .push(" AND l.reason = ")
        .push_bind(tail.reason)
        .push(
            ") AND NOT EXISTS (SELECT 1 FROM task_status_log l WHERE l.task_id = tasks.id \
             AND l.seq > ",
        )
        .push_bind(tail_seq)
        .push(") RETURNING 1; ");
        // `changes()` is the row count of the previous statement: each insert runs only if the
        // statement before it wrote, so all of them hang on the update's match.
        if status_changes && let Some(line) = log.last() {
            let line = LogLine::encode(line);
            sql.push(
                "INSERT INTO task_status_log (task_id, seq, at, status, actor, reason) SELECT ",
            )
            .push_bind(&row.id)
            .push(", ")
            .push_bind(tail_seq + 1)
            .push(", ")
            .push_bind(line.at)
            .push(", ")
            .push_bind(line.status)
            .push(", ")
            .push_bind(line.actor)
            .push(", ")
            .push_bind(line.reason)
            .push(" WHERE changes() > 0; ");
        }
        if !history.is_empty() {
            // Numbered on from the stored maximum, like `agent_history::insert_history`.
            sql.push("INSERT INTO task_history (task_id, seq, round, kind, payload, at) SELECT ")
                .push_bind(&row.id)
                .push(
                    ", base.n + v.column1, v.column2, v.column3, v.column4, v.column5 \
                     FROM (SELECT COALESCE(MAX(seq) + 1, 0) AS n FROM task_history \
                     WHERE task_id = ",
                )
                .push_bind(&row.id)
                .push(") AS base, (VALUES ");
            for (offset, entry) in (0_i64..).zip(history) {
                if offset > 0 {
                    sql.push(", ");
                }
                sql.push("(")
                    .push_bind(offset)
                    .push(", ")
                    .push_bind(entry.round)
                    .push(", ")
                    .push_bind(entry.kind)
                    .push(", ")
                    .push_bind(entry.payload.as_str())
                    .push(", ")
                    .push_bind(entry.at.as_str())
                    .push(")");
            }
            sql.push(") AS v WHERE changes() > 0; ");
        }
        sql.push("COMMIT");

        let mut batch = Batch(Some(self.pool.acquire().await.map_err(db(doing))?));
        let Some(connection) = batch.connection() else {
            return Ok(false);
        };
        // `fetch_all`, not `fetch_optional`: a row limit would stop the batch at the update's
        // row, before the inserts and the commit.
        let matched = sql
            .build()
            .fetch_all(&mut **connection)
            .await
            .map_err(db(doing))?
            .len()
            == 1;
        batch.finish();
        Ok(matched)
    }
}

impl SqliteStore {
    /// Inserts `task` and its whole status log in one batch, when the log fits one insert.
    /// `Ok(false)`: too long for one batch, nothing written; run the general insert. The
    /// caller holds the write turn.
    pub(crate) async fn insert_in_one_trip(
        &self,
        task: &TaskRecord,
        row: &TaskRow,
        doing: &'static str,
    ) -> Result<bool, StoreError> {
        if task.status_log.len() > ROWS_PER_INSERT {
            return Ok(false);
        }
        let mut sql = QueryBuilder::<Sqlite>::new(
            "BEGIN IMMEDIATE; INSERT INTO tasks (title, owner, stream_id, status, level, \
             created_at, updated_at, record, id) VALUES (",
        );
        sql.push_bind(&row.title)
            .push(", ")
            .push_bind(&row.owner)
            .push(", ")
            .push_bind(&row.stream_id)
            .push(", ")
            .push_bind(row.status)
            .push(", ")
            .push_bind(row.level)
            .push(", ")
            .push_bind(&row.created_at)
            .push(", ")
            .push_bind(&row.updated_at)
            .push(", ")
            .push_bind(&row.record)
            .push(", ")
            .push_bind(&row.id)
            .push("); ");
        if !task.status_log.is_empty() {
            sql.push("INSERT INTO task_status_log (task_id, seq, at, status, actor, reason) ");
            let lines = (0_i64..).zip(task.status_log.iter().map(LogLine::encode));
            sql.push_values(lines, |mut values, (seq, line)| {
                values
                    .push_bind(&row.id)
                    .push_bind(seq)
                    .push_bind(line.at)
                    .push_bind(line.status)
                    .push_bind(line.actor)
                    .push_bind(line.reason);
            });
            sql.push("; ");
        }
        sql.push("COMMIT");
        let mut batch = Batch(Some(self.pool.acquire().await.map_err(db(doing))?));
        let Some(connection) = batch.connection() else {
            return Ok(false);
        };
        match sql.build().execute(&mut **connection).await {
            Ok(_) => {
                batch.finish();
                Ok(true)
            }
            Err(error) if is_unique_violation(&error) => Err(StoreError::Duplicate(task.id)),
            Err(error) => Err(db(doing)(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::{TimeZone, Utc};
    use mai_core::ids::StreamId;
    use mai_core::store::{HistoryKind, NewHistoryEntry, TaskStore};
    use mai_core::task::{NewTask, TaskLevel, TaskRecord, TaskStatus, Trigger};

    use super::*;
    use crate::agent_history::encode_history;

    fn at(seconds: i64) -> chrono::DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + seconds, 0).unwrap()
    }

    fn message(text: &str) -> NewHistoryEntry {
        NewHistoryEntry {
            round: 1,
            kind: HistoryKind::Message,
            payload: serde_json::json!({"role": "user", "content": text}),
            at: at(5),
        }
    }

    async fn one_trip(
        store: &SqliteStore,
        task: &TaskRecord,
        expected: TaskStatus,
        history: &[NewHistoryEntry],
    ) -> bool {
        let row = TaskRow::encode(task).unwrap();
        let history = encode_history(task.id, history).unwrap();
        store
            .write_in_one_trip(task, &row, expected, &history, "testing")
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_usual_writes_take_one_trip_and_everything_else_declines_without_writing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("t.db")).await.unwrap();
        let mut task = TaskRecord::new(
            NewTask {
                title: "t".into(),
                intent: "i".into(),
                level: TaskLevel::Agent,
                owner: "qq:1".parse().unwrap(),
                stream_id: StreamId::new("qq:group:1").unwrap(),
                platform: "qq".into(),
                reply_stream_id: None,
                trigger: Trigger::Now,
                priority: 0,
                max_runtime_min: 0,
            },
            TaskStatus::Pending,
            "qq:1",
            at(0),
        );
        store.insert(&task).await.unwrap();

        // A status change with one new log line and history.
        task.transition(TaskStatus::Running, "scheduler", "go", at(1))
            .unwrap();
        let first = [message("a"), message("b")];
        assert!(one_trip(&store, &task, TaskStatus::Pending, &first).await);
        // A checkpoint within the status.
        assert!(one_trip(&store, &task, TaskStatus::Running, &[message("c")]).await);

        // A stale expectation (conflict) and a log the store lacks two lines of: declined.
        let stale = task.clone();
        assert!(!one_trip(&store, &stale, TaskStatus::Pending, &[message("x")]).await);
        let mut ahead = task.clone();
        ahead
            .transition(TaskStatus::Paused, "someone", "pause", at(2))
            .unwrap();
        ahead
            .transition(TaskStatus::Pending, "someone", "resume", at(3))
            .unwrap();
        assert!(!one_trip(&store, &ahead, TaskStatus::Running, &[message("y")]).await);

        let stored = store.get(task.id).await.unwrap().unwrap();
        assert_eq!(stored.status, TaskStatus::Running);
        assert_eq!(stored.status_log, task.status_log);
        let history: Vec<(u64, String)> = store
            .history(task.id, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.seq, e.payload["content"].as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            history,
            [
                (0, "a".to_owned()),
                (1, "b".to_owned()),
                (2, "c".to_owned())
            ]
        );
        // The connection went back clean: a general write still works.
        store.save(&ahead, Some(TaskStatus::Running)).await.unwrap();
        assert_eq!(
            store.get(task.id).await.unwrap().unwrap().status,
            TaskStatus::Pending
        );
    }
}
