//! One agent-round checkpoint on a SQLite file: the compare-and-set task save plus two history
//! messages, in one transaction. Target: ≤ 0.2 ms median.
#![allow(clippy::unwrap_used, clippy::expect_used)] // benchmark setup panics on failure

use std::hint::black_box;

use chrono::Utc;
use criterion::{Criterion, criterion_group, criterion_main};
use mai_core::ids::StreamId;
use mai_core::store::{HistoryKind, NewHistoryEntry, SaveOutcome, TaskStore};
use mai_core::task::{NewTask, TaskLevel, TaskRecord, TaskStatus, Trigger};
use mai_store::SqliteStore;

fn running_task() -> TaskRecord {
    let now = Utc::now();
    let mut task = TaskRecord::new(
        NewTask {
            title: "check the disk usage".into(),
            intent: "check the disk usage of every mounted volume and report the fullest".into(),
            level: TaskLevel::Agent,
            owner: "qq:10001".parse().unwrap(),
            stream_id: StreamId::new("qq:group:42").unwrap(),
            platform: "qq".into(),
            reply_stream_id: None,
            trigger: Trigger::Now,
            priority: 0,
            max_runtime_min: 30,
        },
        TaskStatus::Pending,
        "qq:10001",
        now,
    );
    task.transition(TaskStatus::Running, "scheduler", "dispatched", now)
        .unwrap();
    task
}

fn round_messages() -> [NewHistoryEntry; 2] {
    let now = Utc::now();
    [
        NewHistoryEntry {
            round: 3,
            kind: HistoryKind::Message,
            payload: serde_json::json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "run_command", "arguments": "{\"command\":\"df -h\"}"}}]
            }),
            at: now,
        },
        NewHistoryEntry {
            round: 3,
            kind: HistoryKind::Message,
            payload: serde_json::json!({
                "role": "tool",
                "tool_call_id": "call_1",
                "content": "Filesystem Size Used Avail Use% Mounted on\n/dev/sda1 100G 42G 58G 42% /"
            }),
            at: now,
        },
    ]
}

fn checkpoint(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = runtime
        .block_on(SqliteStore::open(dir.path().join("bench.db")))
        .unwrap();
    let task = running_task();
    runtime.block_on(store.insert(&task)).unwrap();
    let history = round_messages();

    c.bench_function("checkpoint: save + 2 history messages (file, WAL)", |b| {
        b.to_async(&runtime).iter(|| async {
            let outcome = store
                .checkpoint(
                    black_box(&task),
                    Some(TaskStatus::Running),
                    black_box(&history),
                )
                .await
                .unwrap();
            assert_eq!(outcome, SaveOutcome::Saved);
        });
    });
}

criterion_group!(benches, checkpoint);
criterion_main!(benches);
