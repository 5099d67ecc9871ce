//! Group commit: the one-trip writes (`one_trip`) of concurrent writers share one transaction.
//!
//! SQLite admits one writer at a time, so under load writers queue for the write turn. Instead
//! of each taking the turn for its own transaction, a writer queues its unit and then either
//! receives its outcome (someone else committed it) or gets the turn and becomes the *leader*:
//! it takes every unit queued so far, runs them as one batch (`one_trip`: one of a few
//! fixed programs, one round trip to the connection's thread, one commit) and tells each waiter
//! whether its unit wrote. A waiter is told only after the `COMMIT` returned: when it hears
//! "written", its write is durable (as durable as `synchronous = NORMAL` makes any commit).
//! Alone, a writer leads a batch of one: its unit's own statements, one round trip.
//!
//! A batch that fails (a statement error) rolls back as a whole; each of its units is then run
//! alone, so one bad write fails only its own caller.

use std::sync::Mutex;

use mai_core::store::StoreError;
use sqlx::pool::PoolConnection;
use sqlx::{QueryBuilder, Sqlite, SqlitePool};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::db;
use crate::one_trip::{self, Unit};
use crate::sqlite::SqliteStore;

/// At most this many units per batch (bounds the statement's parameters and its size).
const MAX_BATCH: usize = 32;

/// A unit waiting for a leader, and where its outcome goes.
struct Queued {
    unit: Unit,
    done: oneshot::Sender<Result<bool, StoreError>>,
}

/// Units waiting to be committed.
#[derive(Default)]
pub(crate) struct WriteQueue {
    queued: Mutex<Vec<Queued>>,
}

impl std::fmt::Debug for WriteQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteQueue").finish_non_exhaustive()
    }
}

impl WriteQueue {
    fn push(&self, queued: Queued) {
        self.queued
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(queued);
    }

    fn take(&self) -> Vec<Queued> {
        let mut queued = self
            .queued
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let len = queued.len();
        let rest = queued.split_off(len.min(MAX_BATCH));
        std::mem::replace(&mut *queued, rest)
    }
}

/// A pooled connection inside a batch. A batch stops at its first failing statement, and a
/// dropped future stops it wherever it is, so the connection may be left inside the
/// transaction: unless [`Batch::finish`] ran, it is taken out of the pool and closed, which
/// rolls the transaction back (and releases SQLite's write lock).
struct Batch(Option<PoolConnection<Sqlite>>);

impl Batch {
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
    /// Commits `unit` (with whatever else is queued). `Ok(true)`: written and committed.
    /// `Ok(false)`: its guess did not hold and nothing of it was written; run the general write.
    pub(crate) async fn commit_unit(
        &self,
        unit: Unit,
        doing: &'static str,
    ) -> Result<bool, StoreError> {
        let (done, mut outcome) = oneshot::channel();
        self.write_queue.push(Queued { unit, done });
        loop {
            tokio::select! {
                biased;
                result = &mut outcome => return result.unwrap_or_else(|_| Err(abandoned(doing))),
                turn = self.write_gate.lock() => {
                    // Committed by the leader that just handed over the turn?
                    match outcome.try_recv() {
                        Ok(result) => return result,
                        Err(oneshot::error::TryRecvError::Closed) => return Err(abandoned(doing)),
                        Err(oneshot::error::TryRecvError::Empty) => {}
                    }
                    let batch = self.write_queue.take();
                    if batch.len() <= 1 {
                        run_batch(self.writer.clone(), batch, doing).await;
                    } else {
                        // Other writers' units: run to the end even if this caller goes away.
                        let pool = self.writer.clone();
                        let handle = tokio::spawn(run_batch(pool, batch, doing));
                        if handle.await.is_err() {
                            tracing::error!("a group commit batch panicked");
                        }
                    }
                    drop(turn);
                }
            }
        }
    }
}

fn abandoned(doing: &'static str) -> StoreError {
    StoreError::Database {
        doing,
        source: "the write's batch was abandoned before it finished; its outcome is unknown".into(),
    }
}

/// Runs `batch` as one transaction and reports each unit's outcome; on failure, each unit alone.
async fn run_batch(pool: SqlitePool, batch: Vec<Queued>, doing: &'static str) {
    if batch.is_empty() {
        return;
    }
    let units: Vec<&Unit> = batch.iter().map(|queued| &queued.unit).collect();
    match execute(&pool, &units).await {
        Ok(matched) => {
            for (number, queued) in (0_i64..).zip(batch) {
                let _ = queued.done.send(Ok(matched.contains(&number)));
            }
        }
        Err(error) if batch.len() == 1 => {
            if let Some(queued) = batch.into_iter().next() {
                let _ = queued.done.send(Err(db(doing)(error)));
            }
        }
        Err(error) => {
            // Each write may still stand on its own (one bad write fails only itself), but a
            // batch failing at all is worth knowing: it costs every write a second trip.
            tracing::warn!(%error, writes = batch.len(), "a group-commit batch failed; its writes run one by one");
            #[cfg(test)]
            BATCH_FAILURES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            for queued in batch {
                let result = execute(&pool, &[&queued.unit])
                    .await
                    .map(|matched| matched.contains(&0))
                    .map_err(db(doing));
                let _ = queued.done.send(result);
            }
        }
    }
}

/// Batches that failed and fell back to one write at a time (tests check the batch programs
/// themselves never fail on valid writes).
#[cfg(test)]
pub(crate) static BATCH_FAILURES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// One transaction over `units`: the numbers (positions) of the units that wrote.
async fn execute(pool: &SqlitePool, units: &[&Unit]) -> Result<Vec<i64>, sqlx::Error> {
    let (mut sql, params) = match units {
        // Alone, a unit's own statements (one cached program per shape) are the fastest.
        [unit] => {
            let mut sql = QueryBuilder::<Sqlite>::new("BEGIN IMMEDIATE; ");
            unit.push_sql(0, &mut sql);
            sql.push("COMMIT");
            (sql, None)
        }
        _ => {
            let first_write_id = i64::from_ne_bytes(Uuid::new_v4().as_u64_pair().0.to_ne_bytes());
            let (sql, params) = one_trip::Batch::encode(units, first_write_id).into_query();
            (QueryBuilder::new(sql), Some(params))
        }
    };
    let mut batch = Batch(Some(pool.acquire().await?));
    let Some(connection) = batch.0.as_mut() else {
        return Ok(Vec::new());
    };
    // Every program here is one of a few shapes: prepared once per connection, then cached.
    let mut query = sql.build_query_scalar::<i64>();
    for param in params.into_iter().flatten() {
        query = query.bind(param);
    }
    // `fetch_all`, not `fetch_optional`: a row limit would stop the batch at the first row,
    // before the commit.
    let matched = query.fetch_all(&mut **connection).await?;
    batch.finish();
    Ok(matched)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::{TimeZone, Utc};
    use mai_core::ids::StreamId;
    use mai_core::store::{HistoryKind, NewHistoryEntry, SaveOutcome, TaskStore, TaskWrite};
    use mai_core::task::{NewTask, TaskLevel, TaskRecord, TaskStatus, Trigger};

    use crate::sqlite::SqliteStore;

    fn at(seconds: i64) -> chrono::DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + seconds, 0).unwrap()
    }

    fn task(title: &str) -> TaskRecord {
        TaskRecord::new(
            NewTask {
                title: title.into(),
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
        )
    }

    fn message(text: &str) -> NewHistoryEntry {
        NewHistoryEntry {
            round: 1,
            kind: HistoryKind::Message,
            payload: serde_json::json!({"role": "user", "content": text}),
            at: at(5),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_batches_and_each_gets_its_own_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(SqliteStore::open(dir.path().join("t.db")).await.unwrap());
        let mut tasks: Vec<TaskRecord> = (0..40).map(|i| task(&format!("t{i}"))).collect();
        for t in &tasks {
            store.insert(t).await.unwrap();
        }
        // Half claim correctly (pending → running, with history); half expect a status the
        // store does not hold (a stale snapshot): those must conflict and write nothing.
        for t in &mut tasks {
            t.transition(TaskStatus::Running, "scheduler", "dispatched", at(1))
                .unwrap();
        }
        let mut handles = Vec::new();
        for (i, t) in tasks.iter().cloned().enumerate() {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let expected = if i % 2 == 0 {
                    TaskStatus::Pending
                } else {
                    TaskStatus::Paused
                };
                store
                    .checkpoint(&t, Some(expected), &[message(&format!("m{i}"))])
                    .await
                    .unwrap()
            }));
        }
        for (i, handle) in handles.into_iter().enumerate() {
            let outcome = handle.await.unwrap();
            if i % 2 == 0 {
                assert_eq!(outcome, SaveOutcome::Saved);
            } else {
                assert_eq!(
                    outcome,
                    SaveOutcome::Conflict {
                        actual: TaskStatus::Pending
                    }
                );
            }
        }
        for (i, t) in tasks.iter().enumerate() {
            let stored = store.get(t.id).await.unwrap().unwrap();
            let history = store.history(t.id, 0).await.unwrap();
            if i % 2 == 0 {
                assert_eq!(stored.status, TaskStatus::Running);
                assert_eq!(stored.status_log, t.status_log);
                assert_eq!(history.len(), 1);
                assert_eq!(history[0].payload["content"], format!("m{i}"));
            } else {
                assert_eq!(stored.status, TaskStatus::Pending);
                assert_eq!(stored.status_log.len(), 1);
                assert!(history.is_empty());
            }
        }
    }

    /// Every unit in one batch (the write turn is held while they queue): completions that
    /// insert a reply task with them; half of them from a stale snapshot (the store never saw
    /// the claim).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_batch_writes_each_unit_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(SqliteStore::open(dir.path().join("t.db")).await.unwrap());
        let mut parents: Vec<TaskRecord> = (0..12).map(|i| task(&format!("p{i}"))).collect();
        for (i, t) in parents.iter_mut().enumerate() {
            store.insert(t).await.unwrap();
            t.transition(TaskStatus::Running, "scheduler", "dispatched", at(1))
                .unwrap();
            if i % 2 == 0 {
                store.save(t, Some(TaskStatus::Pending)).await.unwrap();
            }
            t.transition(TaskStatus::Completed, "scheduler", "answered", at(2))
                .unwrap();
        }
        let replies: Vec<TaskRecord> = (0..12).map(|i| task(&format!("r{i}"))).collect();
        let turn = store.write_gate.lock().await;
        let mut handles = Vec::new();
        for (i, (parent, reply)) in parents.iter().cloned().zip(replies.clone()).enumerate() {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let history = [message(&format!("answer {i}"))];
                let writes = [
                    TaskWrite::Save {
                        task: &parent,
                        expected: Some(TaskStatus::Running),
                        expected_question: None,
                        history: &history,
                    },
                    TaskWrite::InsertIfAbsent(&reply),
                ];
                store.write(&writes).await.unwrap()
            }));
        }
        while store.write_queue.queued.lock().unwrap().len() < parents.len() {
            tokio::task::yield_now().await;
        }
        drop(turn);
        for (i, handle) in handles.into_iter().enumerate() {
            let outcome = handle.await.unwrap();
            let stored = store.get(parents[i].id).await.unwrap().unwrap();
            let reply = store.get(replies[i].id).await.unwrap();
            let history = store.history(parents[i].id, 0).await.unwrap();
            if i % 2 == 0 {
                assert_eq!(outcome, SaveOutcome::Saved);
                assert_eq!(stored.status_log, parents[i].status_log);
                assert_eq!(reply.as_ref(), Some(&replies[i]), "the reply with its log");
                assert_eq!(history.len(), 1);
                assert_eq!(history[0].payload["content"], format!("answer {i}"));
            } else {
                assert_eq!(
                    outcome,
                    SaveOutcome::Conflict {
                        actual: TaskStatus::Pending
                    }
                );
                assert_eq!(stored.status, TaskStatus::Pending);
                assert_eq!(stored.status_log.len(), 1);
                assert!(reply.is_none(), "no reply without its parent's completion");
                assert!(history.is_empty());
            }
        }
    }

    #[tokio::test]
    async fn a_group_is_all_or_nothing_and_a_repeated_insert_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("t.db")).await.unwrap();
        let mut parent = task("parent");
        store.insert(&parent).await.unwrap();
        let reply = task("reply");
        // A due claim: two new log lines in one write.
        parent
            .transition(TaskStatus::Running, "scheduler", "dispatched", at(1))
            .unwrap();
        parent
            .transition(TaskStatus::Completed, "scheduler", "answered", at(2))
            .unwrap();
        let stale = [
            TaskWrite::Save {
                task: &parent,
                expected: Some(TaskStatus::Running),
                expected_question: None,
                history: &[],
            },
            TaskWrite::InsertIfAbsent(&reply),
        ];
        assert_eq!(
            store.write(&stale).await.unwrap(),
            SaveOutcome::Conflict {
                actual: TaskStatus::Pending
            }
        );
        assert!(
            store.get(reply.id).await.unwrap().is_none(),
            "nothing written"
        );
        let group = [
            TaskWrite::Save {
                task: &parent,
                expected: Some(TaskStatus::Pending),
                expected_question: None,
                history: &[message("answer")],
            },
            TaskWrite::InsertIfAbsent(&reply),
        ];
        assert_eq!(store.write(&group).await.unwrap(), SaveOutcome::Saved);
        let stored = store.get(parent.id).await.unwrap().unwrap();
        assert_eq!(stored.status_log, parent.status_log);
        assert_eq!(store.get(reply.id).await.unwrap().unwrap(), reply);
        // The insert alone again: already there, not an error, nothing changed.
        assert_eq!(
            store
                .write(&[TaskWrite::InsertIfAbsent(&reply)])
                .await
                .unwrap(),
            SaveOutcome::Saved
        );
        assert!(matches!(
            store.insert(&reply).await,
            Err(mai_core::store::StoreError::Duplicate(_))
        ));
    }

    /// What one test write does to its task.
    #[derive(Debug, Clone, Copy)]
    enum Move {
        /// A checkpoint within `running`, with history.
        Checkpoint,
        /// `running` → `paused` (a status change, one log line).
        Pause,
        /// `running` → `completed` with history and a reply task inserted with it.
        Complete,
        /// A status change from a snapshot the store never saw (a conflict).
        Stale,
        /// A save that also renames the task (an indexed column: the general path).
        Rename,
    }

    /// The writes of one round: every task gets one move, from a seeded sequence.
    fn moves(seed: u64, n: usize) -> Vec<Move> {
        let mut state = seed | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                match state % 5 {
                    0 => Move::Checkpoint,
                    1 => Move::Pause,
                    2 => Move::Complete,
                    3 => Move::Stale,
                    _ => Move::Rename,
                }
            })
            .collect()
    }

    /// The records and history one move writes, and what it expects the store to hold.
    fn planned(
        mut t: TaskRecord,
        mv: Move,
        i: usize,
    ) -> (
        TaskRecord,
        TaskStatus,
        Vec<NewHistoryEntry>,
        Option<TaskRecord>,
    ) {
        let history = vec![message(&format!("a{i}")), message(&format!("b{i}"))];
        match mv {
            Move::Checkpoint => {
                t.updated_at = at(10);
                t.metadata.rounds += 1;
                (t, TaskStatus::Running, history, None)
            }
            Move::Pause => {
                t.transition(TaskStatus::Paused, "test", "paused", at(11))
                    .unwrap();
                (t, TaskStatus::Running, Vec::new(), None)
            }
            Move::Complete => {
                t.transition(TaskStatus::Completed, "test", "answered", at(12))
                    .unwrap();
                let reply = task(&format!("reply {i}"));
                (t, TaskStatus::Running, history, Some(reply))
            }
            Move::Stale => {
                // The snapshot went running → paused → pending → running elsewhere: its log
                // is longer than the store's, so the guess fails and the save conflicts…
                t.transition(TaskStatus::Paused, "test", "p", at(13))
                    .unwrap();
                t.transition(TaskStatus::Pending, "test", "q", at(14))
                    .unwrap();
                t.transition(TaskStatus::Running, "test", "r", at(15))
                    .unwrap();
                t.transition(TaskStatus::Completed, "test", "s", at(16))
                    .unwrap();
                (t, TaskStatus::Running, history, None)
            }
            Move::Rename => {
                t.title = format!("renamed {i}");
                t.updated_at = at(17);
                (t, TaskStatus::Running, history, None)
            }
        }
    }

    /// The same writes, once concurrently (held until all are queued, so they share one batch
    /// and take the JSON program) and once one after another (each alone): the two stores must
    /// end up the same, task by task, log line by log line, history row by history row, and
    /// every write must get the same outcome.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_of_many_leaves_the_store_as_the_same_writes_one_by_one() {
        for seed in 1..=8_u64 {
            let dir = tempfile::tempdir().unwrap();
            let batched =
                std::sync::Arc::new(SqliteStore::open(dir.path().join("a.db")).await.unwrap());
            let alone = SqliteStore::open(dir.path().join("b.db")).await.unwrap();
            let moves = moves(seed, 12);
            let mut plans = Vec::new();
            for (i, mv) in moves.iter().enumerate() {
                let mut t = task(&format!("t{i}"));
                t.transition(TaskStatus::Running, "scheduler", "dispatched", at(1))
                    .unwrap();
                for store in [&*batched, &alone] {
                    let mut created = t.clone();
                    created.status_log.truncate(1);
                    created.status = TaskStatus::Pending;
                    store.insert(&created).await.unwrap();
                    assert_eq!(
                        store.save(&t, Some(TaskStatus::Pending)).await.unwrap(),
                        SaveOutcome::Saved
                    );
                }
                plans.push(planned(t, *mv, i));
            }

            let turn = batched.write_gate.lock().await;
            let mut handles = Vec::new();
            for (t, expected, history, reply) in plans.clone() {
                let store = batched.clone();
                handles.push(tokio::spawn(async move {
                    let mut writes = vec![TaskWrite::Save {
                        task: &t,
                        expected: Some(expected),
                        expected_question: None,
                        history: &history,
                    }];
                    if let Some(reply) = &reply {
                        writes.push(TaskWrite::InsertIfAbsent(reply));
                    }
                    store.write(&writes).await.unwrap()
                }));
            }
            // Every write fits a batch: all of them queue behind the held turn.
            let queued = tokio::time::timeout(std::time::Duration::from_secs(10), async {
                while batched.write_queue.queued.lock().unwrap().len() < moves.len() {
                    tokio::task::yield_now().await;
                }
            });
            assert!(queued.await.is_ok(), "not every write queued for the batch");
            drop(turn);
            let mut outcomes = Vec::new();
            for handle in handles {
                outcomes.push(handle.await.unwrap());
            }

            assert_eq!(
                super::BATCH_FAILURES.load(std::sync::atomic::Ordering::SeqCst),
                0,
                "seed {seed}: the batch program failed and its writes fell back"
            );
            for (i, (t, expected, history, reply)) in plans.iter().enumerate() {
                let mut writes = vec![TaskWrite::Save {
                    task: t,
                    expected: Some(*expected),
                    expected_question: None,
                    history,
                }];
                if let Some(reply) = reply {
                    writes.push(TaskWrite::InsertIfAbsent(reply));
                }
                let outcome = alone.write(&writes).await.unwrap();
                assert_eq!(
                    outcome, outcomes[i],
                    "seed {seed}, write {i} ({:?})",
                    moves[i]
                );
                let ids = std::iter::once(t.id).chain(reply.iter().map(|r| r.id));
                for id in ids {
                    assert_eq!(
                        batched.get(id).await.unwrap(),
                        alone.get(id).await.unwrap(),
                        "seed {seed}, write {i} ({:?})",
                        moves[i]
                    );
                    let history_of = |h: Vec<mai_core::store::HistoryEntry>| {
                        h.into_iter()
                            .map(|e| (e.seq, e.round, e.payload))
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(
                        history_of(batched.history(id, 0).await.unwrap()),
                        history_of(alone.history(id, 0).await.unwrap()),
                        "seed {seed}, write {i} ({:?})",
                        moves[i]
                    );
                }
            }
            // Row for row, every column (the write id aside).
            assert_eq!(rows(&batched).await, rows(&alone).await, "seed {seed}");
        }
    }

    /// Every row of the task tables as JSON text, in key order (`write_id` left out).
    async fn rows(store: &SqliteStore) -> Vec<String> {
        let mut all = Vec::new();
        for sql in [
            "SELECT json_array(id, title, owner, stream_id, status, level, created_at, \
             updated_at, record) FROM tasks ORDER BY id",
            "SELECT json_array(task_id, seq, at, status, actor, reason) FROM task_status_log \
             ORDER BY task_id, seq",
            "SELECT json_array(task_id, seq, round, kind, payload, at) FROM task_history \
             ORDER BY task_id, seq",
        ] {
            let rows: Vec<String> = sqlx::query_scalar(sql)
                .fetch_all(&store.pool)
                .await
                .unwrap();
            all.extend(rows);
        }
        all
    }
}
