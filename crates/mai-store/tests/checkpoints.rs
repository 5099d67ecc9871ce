//! The write-ahead log is copied back into the database file by a thread of its own: the
//! writer's commits never run a checkpoint, yet the file receives what was committed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

use std::time::{Duration, Instant};

use mai_store::{Database, SqliteOptions};

/// Waits (bounded) until `done` holds, checking after each short pause.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn committed_pages_reach_the_database_file_while_it_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    let db = Database::open(&path, &SqliteOptions::default())
        .await
        .unwrap();
    db.write(|c| c.execute_batch("CREATE TABLE blobs (b BLOB NOT NULL)"))
        .await
        .unwrap()
        .unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    // One write at a time: each is its own commit (a few more than a checkpoint's turn).
    for _ in 0..300 {
        db.write(|c| c.execute("INSERT INTO blobs (b) VALUES (zeroblob(4096))", []))
            .await
            .unwrap()
            .unwrap();
    }
    // 300 × 4 KiB committed: only a checkpoint moves them from the log into the file.
    wait_until("the checkpoint thread copied the log into the file", || {
        std::fs::metadata(&path).unwrap().len() > before + 900 * 1024
    })
    .await;
    let rows: i64 = db
        .read(|c| c.query_row("SELECT count(*) FROM blobs", [], |r| r.get(0)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows, 300);
    db.close().await;
}

#[tokio::test]
async fn the_writer_connection_never_checkpoints_inside_its_commits() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("auto.db"), &SqliteOptions::default())
        .await
        .unwrap();
    let pages: i64 = db
        .write(|c| c.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        pages, 0,
        "the writer must leave checkpoints to their own thread"
    );
    db.close().await;
}
