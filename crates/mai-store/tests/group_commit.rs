//! Group commit: writes queued together share one transaction (a savepoint each), and each
//! still gets its own outcome and leaves the store as it would alone.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;

use chrono::{TimeZone, Utc};
use mai_core::store::{HistoryKind, NewHistoryEntry, SaveOutcome, TaskStore, TaskWrite};
use mai_core::task::{TaskRecord, TaskStatus};

use mai_store::SqliteStore;

/// The writer's thread held busy by a write that waits, so the writes sent meanwhile queue up
/// and run as one batch when it is released.
struct Held {
    release: std::sync::mpsc::Sender<()>,
    done: tokio::task::JoinHandle<()>,
}

impl Held {
    async fn release(self) {
        self.release.send(()).unwrap();
        self.done.await.unwrap();
    }
}

async fn hold_the_writer(store: &SqliteStore) -> Held {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel();
    let db = store.database().clone();
    let done = tokio::spawn(async move {
        db.write(move |_| {
            let _ = started.send(());
            released.recv().map_err(|_| "released")
        })
        .await
        .unwrap()
        .unwrap();
    });
    running.await.unwrap();
    Held { release, done }
}

fn at(seconds: i64) -> chrono::DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + seconds, 0).unwrap()
}

fn task(title: &str) -> TaskRecord {
    common::task(title, 0)
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
    let turn = hold_the_writer(&store).await;
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
    while store.database().writer().queued() < parents.len() {
        tokio::task::yield_now().await;
    }
    turn.release().await;
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

/// The same writes, once concurrently (held until all are queued, so they share one batch:
/// one transaction, a savepoint each) and once one after another (each alone): the two stores must
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

        let turn = hold_the_writer(&batched).await;
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
            while batched.database().writer().queued() < moves.len() {
                tokio::task::yield_now().await;
            }
        });
        assert!(queued.await.is_ok(), "not every write queued for the batch");
        turn.release().await;
        let mut outcomes = Vec::new();
        for handle in handles {
            outcomes.push(handle.await.unwrap());
        }

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
    store.database().read(all_rows).await.unwrap()
}

fn all_rows(connection: &rusqlite::Connection) -> Vec<String> {
    let mut all = Vec::new();
    for sql in [
        "SELECT json_array(id, title, owner, stream_id, status, level, created_at, \
         updated_at, record) FROM tasks ORDER BY id",
        "SELECT json_array(task_id, seq, at, status, actor, reason) FROM task_status_log \
         ORDER BY task_id, seq",
        "SELECT json_array(task_id, seq, round, kind, payload, at) FROM task_history \
         ORDER BY task_id, seq",
    ] {
        let mut select = connection.prepare(sql).unwrap();
        let rows = select.query_map([], |row| row.get::<_, String>(0)).unwrap();
        all.extend(rows.map(Result::unwrap));
    }
    all
}

/// A write that panics on the writer's thread is undone like a failed one: its caller hears an
/// error, the writes batched with it still commit, and later writes still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_panics_fails_only_its_caller_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(dir.path().join("t.db")).await.unwrap());
    let tasks: Vec<TaskRecord> = (0..4).map(|i| task(&format!("t{i}"))).collect();
    let turn = hold_the_writer(&store).await;
    let db = store.database().clone();
    let panicking = tokio::spawn(async move {
        db.write(|connection| -> Result<(), String> {
            connection
                .execute_batch("DELETE FROM tasks")
                .map_err(|e| e.to_string())?;
            panic!("a bug in a write");
        })
        .await
    });
    let mut inserts = Vec::new();
    for t in tasks.clone() {
        let store = store.clone();
        inserts.push(tokio::spawn(async move { store.insert(&t).await }));
    }
    while store.database().writer().queued() < tasks.len() + 1 {
        tokio::task::yield_now().await;
    }
    turn.release().await;
    assert!(
        panicking.await.unwrap().is_err(),
        "the panicking write reports a failure"
    );
    for insert in inserts {
        insert.await.unwrap().unwrap();
    }
    for t in &tasks {
        assert_eq!(store.get(t.id).await.unwrap().as_ref(), Some(t));
    }
    let later = task("later");
    store.insert(&later).await.unwrap();
    assert_eq!(store.get(later.id).await.unwrap(), Some(later));
}

#[tokio::test]
async fn a_store_opened_with_full_sync_syncs_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let options = mai_store::SqliteOptions {
        synchronous: mai_store::Synchronous::Full,
        ..mai_store::SqliteOptions::default()
    };
    let store = SqliteStore::open_with(dir.path().join("t.db"), &options)
        .await
        .unwrap();
    assert_eq!(
        store.connection_settings().await.unwrap().synchronous,
        2,
        "FULL"
    );
    let written = store
        .database()
        .writer()
        .read(|connection| {
            connection.query_row("PRAGMA synchronous", [], |row| row.get::<_, i64>(0))
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written, 2, "the writer's connection too");
}
