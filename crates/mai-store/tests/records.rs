//! Records on a real SQLite file: round trips, reopening, pragmas, schema version, corruption.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;

use chrono::Duration;
use common::{at, file_store, full_record, task};
use mai_core::store::{SaveOutcome, StoreError, TaskStore};
use mai_core::task::{TaskId, TaskStatus};
use mai_store::SqliteStore;

#[tokio::test]
async fn a_full_record_round_trips_through_a_sqlite_file() {
    let fs = file_store().await;
    let task = full_record();
    assert_eq!(task.started_at, Some(at(5)));
    assert_eq!(task.status_log.len(), 3);
    fs.store.insert(&task).await.unwrap();

    let back = fs.store.get(task.id).await.unwrap().expect("stored");
    assert_eq!(
        back, task,
        "every field, the metadata and the status log survive"
    );
    assert_eq!(
        back.created_at.timestamp_subsec_nanos(),
        task.created_at.timestamp_subsec_nanos()
    );
    assert_eq!(fs.store.get(TaskId::new()).await.unwrap(), None);
}

#[tokio::test]
async fn inserting_an_existing_id_is_a_duplicate() {
    let fs = file_store().await;
    let task = task("once", 0);
    fs.store.insert(&task).await.unwrap();
    let error = fs.store.insert(&task).await.unwrap_err();
    assert!(
        matches!(error, StoreError::Duplicate(id) if id == task.id),
        "{error}"
    );
}

#[tokio::test]
async fn saving_a_task_that_was_never_inserted_is_not_found() {
    let fs = file_store().await;
    let task = task("ghost", 0);
    for expected in [None, Some(TaskStatus::Pending)] {
        let error = fs.store.save(&task, expected).await.unwrap_err();
        assert!(
            matches!(error, StoreError::NotFound(id) if id == task.id),
            "{error}"
        );
    }
    assert_eq!(fs.store.get(task.id).await.unwrap(), None);
}

/// A new file gets 1 KiB pages (a commit writes each changed page whole to the log); a file
/// made with SQLite's default 4 KiB pages keeps them and its data.
#[tokio::test]
async fn a_new_file_has_small_pages_and_an_older_file_keeps_its_own() {
    let page_size = |path: &std::path::Path| -> i64 {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.query_row("PRAGMA page_size", [], |row| row.get(0))
            .unwrap()
    };
    let fs = file_store().await;
    let task = full_record();
    fs.store.insert(&task).await.unwrap();
    let path = fs.path();
    fs.store.close().await;
    drop(fs.store);
    assert_eq!(page_size(&path), 1024);

    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.db");
    rusqlite::Connection::open(&old)
        .unwrap()
        .execute_batch("PRAGMA page_size = 4096; CREATE TABLE before_us (x INTEGER);")
        .unwrap();
    let store = SqliteStore::open(&old).await.unwrap();
    store.insert(&task).await.unwrap();
    assert_eq!(store.get(task.id).await.unwrap(), Some(task));
    store.close().await;
    drop(store);
    assert_eq!(page_size(&old), 4096);
}

#[tokio::test]
async fn reopening_the_file_finds_the_data_again() {
    let fs = file_store().await;
    let mut task = full_record();
    fs.store.insert(&task).await.unwrap();
    task.transition(TaskStatus::Pending, "qq:1", "resumed", at(20))
        .unwrap();
    task.metadata.history_len = 2;
    let history = [common::message(1, "a"), common::message(2, "b")];
    let outcome = fs
        .store
        .checkpoint(&task, Some(TaskStatus::Paused), &history)
        .await
        .unwrap();
    assert_eq!(outcome, SaveOutcome::Saved);
    let path = fs.path();
    fs.store.close().await;
    drop(fs.store);

    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(reopened.get(task.id).await.unwrap(), Some(task.clone()));
    let stored: Vec<_> = reopened
        .history(task.id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.payload["content"].clone())
        .collect();
    assert_eq!(stored, ["a", "b"]);
    assert_eq!(reopened.schema_version().await.unwrap(), 8);
}

#[tokio::test]
async fn open_creates_missing_directories_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/tasks.db");
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(path.is_file());
    store.insert(&task("first", 0)).await.unwrap();
}

#[tokio::test]
async fn the_pool_runs_with_wal_normal_sync_foreign_keys_and_a_busy_timeout() {
    let fs = file_store().await;
    let settings = fs.store.connection_settings().await.unwrap();
    assert_eq!(settings.journal_mode, "wal");
    assert_eq!(settings.synchronous, 1, "NORMAL");
    assert!(settings.foreign_keys);
    assert!(settings.busy_timeout_ms >= 1000, "{settings:?}");
}

#[tokio::test]
async fn the_schema_version_is_the_newest_migration() {
    let fs = file_store().await;
    assert_eq!(SqliteStore::latest_schema_version(), 8);
    assert_eq!(fs.store.schema_version().await.unwrap(), 8);
    let memory = SqliteStore::open_in_memory().await.unwrap();
    assert_eq!(memory.schema_version().await.unwrap(), 8);
}

#[tokio::test]
async fn a_database_with_a_newer_schema_is_refused_with_a_clear_message() {
    let fs = file_store().await;
    let task = task("kept", 0);
    fs.store.insert(&task).await.unwrap();
    fs.store.close().await;
    let conn = rusqlite::Connection::open(fs.path()).unwrap();
    conn.execute_batch(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9, 'from the future', 1, x'00', 0)",
    )
    .unwrap();
    drop(conn);

    let error = SqliteStore::open(fs.path()).await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("schema version 9")
            && message.contains("newer")
            && message.contains("(8)"),
        "{message}"
    );
    assert!(
        message.contains("upgrade mai-agent"),
        "says what to do: {message}"
    );
}

#[tokio::test]
async fn a_corrupt_row_is_reported_naming_the_task() {
    let fs = file_store().await;
    let good = task("good", 0);
    let bad = task("bad", 1);
    fs.store.insert(&good).await.unwrap();
    fs.store.insert(&bad).await.unwrap();
    let conn = rusqlite::Connection::open(fs.path()).unwrap();
    conn.execute_batch("UPDATE tasks SET record = '{\"not\": \"a task\"}' WHERE title = 'bad'")
        .unwrap();
    drop(conn);

    assert_eq!(fs.store.get(good.id).await.unwrap(), Some(good.clone()));
    for error in [
        fs.store.get(bad.id).await.unwrap_err(),
        fs.store.list(&Default::default()).await.unwrap_err(),
    ] {
        match &error {
            StoreError::Corrupt { what, .. } => {
                assert!(what.contains(&bad.id.to_string()), "{error}")
            }
            other => panic!("expected Corrupt, got {other}"),
        }
    }
}

#[tokio::test]
async fn the_status_log_cannot_be_rewritten_even_by_hand() {
    let fs = file_store().await;
    let task = task("logged", 0);
    fs.store.insert(&task).await.unwrap();
    let conn = rusqlite::Connection::open(fs.path()).unwrap();
    let error = conn
        .execute_batch("UPDATE task_status_log SET reason = 'rewritten'")
        .unwrap_err();
    assert!(error.to_string().contains("append-only"), "{error}");
    drop(conn);
    assert_eq!(fs.store.get(task.id).await.unwrap(), Some(task));
}

#[tokio::test]
async fn an_in_memory_store_keeps_its_data_while_open() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    let mut task = task("memory", 0);
    store.insert(&task).await.unwrap();
    task.transition(
        TaskStatus::Running,
        "scheduler",
        "go",
        at(1) + Duration::nanoseconds(1),
    )
    .unwrap();
    assert_eq!(
        store.save(&task, Some(TaskStatus::Pending)).await.unwrap(),
        SaveOutcome::Saved
    );
    assert_eq!(store.get(task.id).await.unwrap(), Some(task));
    assert_eq!(
        store.connection_settings().await.unwrap().journal_mode,
        "memory"
    );
}

#[tokio::test]
async fn long_logs_and_histories_are_stored_whole() {
    let fs = file_store().await;
    let mut long = task("cron veteran", 0);
    for run in 0..700 {
        long.force(TaskStatus::Running, "cron", "fire", at(2 * run + 1));
        long.force(TaskStatus::Scheduled, "cron", "re-arm", at(2 * run + 2));
    }
    fs.store.insert(&long).await.unwrap();
    assert_eq!(fs.store.get(long.id).await.unwrap(), Some(long.clone()));

    let history: Vec<_> = (0..1200)
        .map(|n| common::message(n / 10, &format!("m{n}")))
        .collect();
    let outcome = fs
        .store
        .checkpoint(&long, Some(TaskStatus::Scheduled), &history)
        .await
        .unwrap();
    assert_eq!(outcome, SaveOutcome::Saved);
    let stored = fs.store.history(long.id, 0).await.unwrap();
    assert_eq!(stored.len(), 1200);
    assert!(
        stored
            .iter()
            .enumerate()
            .all(|(n, entry)| entry.seq == n as u64 && entry.payload["content"] == format!("m{n}"))
    );
}

/// The status log as schema versions 1–7 kept it: keyed by (task_id, seq).
const OLD_STATUS_LOG: &str = "DROP TRIGGER task_status_log_goes_with_its_task;
     CREATE TABLE old_log (task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
         seq INTEGER NOT NULL, at TEXT NOT NULL, status TEXT NOT NULL, actor TEXT NOT NULL,
         reason TEXT NOT NULL, PRIMARY KEY (task_id, seq)) STRICT, WITHOUT ROWID;
     INSERT INTO old_log SELECT task_id, seq, at, status, actor, reason FROM task_status_log;
     DROP TABLE task_status_log;
     ALTER TABLE old_log RENAME TO task_status_log;";

#[tokio::test]
async fn an_upgraded_store_keys_each_task_history_by_its_task_and_deletes_it_with_the_task() {
    let fs = file_store().await;
    let (a, b) = (task("a", 0), task("b", 1));
    for record in [&a, &b] {
        fs.store.insert(record).await.unwrap();
    }
    // Interleaved appends, as two running tasks make them.
    for (record, text) in [(&a, "a0"), (&b, "b0"), (&a, "a1"), (&b, "b1")] {
        fs.store
            .append_history(record.id, &[common::message(1, text)])
            .await
            .unwrap();
    }
    fs.store.close().await;
    // Back to schema version 6: the history and status log keyed by (task_id, seq), no task
    // numbers.
    let conn = rusqlite::Connection::open(fs.path()).unwrap();
    conn.execute_batch(OLD_STATUS_LOG).unwrap();
    conn.execute_batch(
        "DROP TRIGGER task_history_goes_with_its_task;
         CREATE TABLE old_history (task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
             seq INTEGER NOT NULL, round INTEGER NOT NULL, kind TEXT NOT NULL,
             payload TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY (task_id, seq)) STRICT;
         INSERT INTO old_history SELECT task_id, seq, round, kind, payload, at FROM task_history;
         DROP TABLE task_history;
         ALTER TABLE old_history RENAME TO task_history;
         DROP INDEX tasks_by_num;
         ALTER TABLE tasks DROP COLUMN num;
         DELETE FROM _sqlx_migrations WHERE version >= 7;",
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(fs.path()).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 8);
    store
        .append_history(a.id, &[common::message(2, "a2")])
        .await
        .unwrap();
    let texts = |entries: Vec<mai_core::store::HistoryEntry>| -> Vec<(u64, String)> {
        entries
            .into_iter()
            .map(|e| (e.seq, e.payload["content"].as_str().unwrap().to_owned()))
            .collect()
    };
    assert_eq!(
        texts(store.history(a.id, 0).await.unwrap()),
        [(0, "a0".into()), (1, "a1".into()), (2, "a2".into())]
    );
    assert_eq!(
        texts(store.history(b.id, 1).await.unwrap()),
        [(1, "b1".into())]
    );
    // A task inserted after the upgrade numbers on from the others.
    let c = task("c", 2);
    store.insert(&c).await.unwrap();
    store
        .append_history(c.id, &[common::message(1, "c0")])
        .await
        .unwrap();
    assert_eq!(
        texts(store.history(c.id, 0).await.unwrap()),
        [(0, "c0".into())]
    );
    store.close().await;

    // Deleting a task deletes its history and nobody else's.
    let conn = rusqlite::Connection::open(fs.path()).unwrap();
    let key = a.id.0.simple().to_string();
    conn.execute("DELETE FROM tasks WHERE id = ?", [&key])
        .unwrap();
    let left: Vec<String> = conn
        .prepare("SELECT json_extract(payload, '$.content') FROM task_history ORDER BY key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(left, ["b0", "b1", "c0"]);
}

#[tokio::test]
async fn an_upgraded_store_keys_each_task_status_log_by_its_task_and_deletes_it_with_the_task() {
    let fs = file_store().await;
    let (mut a, mut b) = (task("a", 0), task("b", 1));
    for record in [&a, &b] {
        fs.store.insert(record).await.unwrap();
    }
    // Interleaved status changes, as two running tasks make them.
    for (which, to, when) in [
        ('a', TaskStatus::Running, 2),
        ('b', TaskStatus::Running, 3),
        ('a', TaskStatus::Paused, 4),
        ('b', TaskStatus::Completed, 5),
    ] {
        let record = if which == 'a' { &mut a } else { &mut b };
        let from = record.status;
        record.transition(to, "qq:1", "step", at(when)).unwrap();
        let saved = fs.store.save(record, Some(from)).await.unwrap();
        assert_eq!(saved, SaveOutcome::Saved);
    }
    fs.store.close().await;
    // Back to schema version 7: the status log keyed by (task_id, seq).
    let conn = rusqlite::Connection::open(fs.path()).unwrap();
    conn.execute_batch(OLD_STATUS_LOG).unwrap();
    conn.execute_batch("DELETE FROM _sqlx_migrations WHERE version >= 8;")
        .unwrap();
    drop(conn);

    let store = SqliteStore::open(fs.path()).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 8);
    assert_eq!(store.get(a.id).await.unwrap().as_ref(), Some(&a));
    assert_eq!(store.get(b.id).await.unwrap().as_ref(), Some(&b));
    // The log goes on where it was.
    a.transition(TaskStatus::Pending, "qq:1", "resumed", at(6))
        .unwrap();
    let saved = store.save(&a, Some(TaskStatus::Paused)).await.unwrap();
    assert_eq!(saved, SaveOutcome::Saved);
    let stored = store.get(a.id).await.unwrap().unwrap();
    let statuses: Vec<_> = stored.status_log.iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [
            TaskStatus::Pending,
            TaskStatus::Running,
            TaskStatus::Paused,
            TaskStatus::Pending
        ]
    );
    store.close().await;

    // Deleting a task deletes its log and nobody else's.
    let conn = rusqlite::Connection::open(fs.path()).unwrap();
    let key = a.id.0.simple().to_string();
    conn.execute("DELETE FROM tasks WHERE id = ?", [&key])
        .unwrap();
    let left: Vec<(String, String)> = conn
        .prepare("SELECT task_id, status FROM task_status_log ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let b_key = b.id.0.simple().to_string();
    assert_eq!(
        left,
        [
            (b_key.clone(), "pending".to_owned()),
            (b_key.clone(), "running".to_owned()),
            (b_key, "completed".to_owned())
        ]
    );
}
