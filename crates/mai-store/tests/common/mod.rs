//! Shared fixtures for the store's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, TimeZone, Utc};
use mai_core::ids::{Owner, StreamId};
use mai_core::store::{HistoryKind, NewHistoryEntry};
use mai_core::task::{NewTask, PauseCause, TaskId, TaskLevel, TaskRecord, TaskStatus, Trigger};
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

/// A record with every field set: a cron instant task, paused, with all the metadata.
pub fn full_record() -> mai_core::task::TaskRecord {
    let mut task = task("disk \"usage\" — 磁盘 🚀", 0);
    task.intent = "check the disk\nand report".into();
    task.level = TaskLevel::Instant;
    task.owner = owner("planner:qq:group:42");
    task.stream_id = stream("qq:group:42");
    task.platform = "qq".into();
    task.reply_stream_id = Some(stream("qq:private:7"));
    task.trigger = Trigger::Cron {
        expr: "0 18 * * *".into(),
        timezone: None,
    };
    task.scheduled_at = Some(at(3600));
    task.priority = -3;
    task.max_runtime_min = 15;
    task.transition(TaskStatus::Running, "scheduler", "dispatched", at(5))
        .unwrap();
    task.transition(TaskStatus::Paused, "qq:1", "asked to pause", at(9))
        .unwrap();
    task.metadata.pause_cause = Some(PauseCause::User);
    task.metadata.answer = Some("42 %".into());
    task.metadata.error = Some("none yet".into());
    task.metadata.parent_task_id = Some(TaskId::new());
    task.metadata.rounds = 7;
    task.metadata.history_len = 19;
    task.metadata.group_id = Some("900".into());
    task.metadata.raw = true;
    task.metadata.waiting = Some(mai_core::task::WaitingQuestion {
        call_id: "call_1".into(),
        question: "which disk?".into(),
        asked_at: at(8),
        unsent: true,
    });
    task.metadata.delivery = Some(mai_core::task::DeliveryProgress {
        parts: vec!["a".into(), "b".into()],
        sent: 1,
    });
    task.metadata.cron_runs = 3;
    task.metadata.runtime_secs = 4242;
    task
}
