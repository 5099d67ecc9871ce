//! Shared fixtures for the store's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, TimeZone, Utc};
use mai_core::ids::{Owner, StreamId};
use mai_core::store::{HistoryKind, NewHistoryEntry};
use mai_core::task::{NewTask, TaskLevel, TaskRecord, TaskStatus, Trigger};
use mai_store::SqliteStore;
use tempfile::TempDir;

/// A fixed instant with a sub-microsecond part, so timestamp precision is exercised.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 14, 15, 9, 26).unwrap() + Duration::nanoseconds(535_897_932)
}

pub fn at(seconds: i64) -> DateTime<Utc> {
    t0() + Duration::seconds(seconds)
}

pub fn owner(text: &str) -> Owner {
    text.parse().unwrap()
}

pub fn stream(text: &str) -> StreamId {
    StreamId::new(text).unwrap()
}

/// A pending agent task created at `at(created)`.
pub fn task(title: &str, created: i64) -> TaskRecord {
    TaskRecord::new(
        NewTask {
            title: title.into(),
            intent: format!("do {title}"),
            level: TaskLevel::Agent,
            owner: owner("qq:1"),
            stream_id: stream("s1"),
            platform: "qq".into(),
            reply_stream_id: None,
            trigger: Trigger::Now,
            priority: 0,
            max_runtime_min: 0,
        },
        TaskStatus::Pending,
        "qq:1",
        at(created),
    )
}

pub fn message(round: u32, text: &str) -> NewHistoryEntry {
    NewHistoryEntry {
        round,
        kind: HistoryKind::Message,
        payload: serde_json::json!({"role": "assistant", "content": text}),
        at: at(i64::from(round)),
    }
}

pub struct FileStore {
    pub dir: TempDir,
    pub store: SqliteStore,
}

impl FileStore {
    pub fn path(&self) -> PathBuf {
        db_path(self.dir.path())
    }
}

pub fn db_path(dir: &Path) -> PathBuf {
    dir.join("tasks.db")
}

/// A store on a fresh SQLite file in a temporary directory.
pub async fn file_store() -> FileStore {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db_path(dir.path())).await.unwrap();
    FileStore { dir, store }
}
