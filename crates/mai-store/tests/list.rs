//! Listing: filters by owner, stream, statuses and level, the limit, newest first; and the
//! active tasks for recovery, oldest first.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;

use common::{at, file_store, owner, stream, task};
use mai_core::store::{TaskFilter, TaskStore};
use mai_core::task::{TaskLevel, TaskRecord, TaskStatus};

use TaskStatus::*;

fn titles(tasks: &[TaskRecord]) -> Vec<&str> {
    tasks.iter().map(|task| task.title.as_str()).collect()
}

/// Nine tasks created a second apart (t0 oldest), one per status and then some.
async fn seeded() -> common::FileStore {
    let fs = file_store().await;
    let plan: [(&str, &str, &str, TaskLevel, TaskStatus); 9] = [
        ("t0", "qq:1", "s1", TaskLevel::Agent, Pending),
        ("t1", "qq:2", "s1", TaskLevel::Instant, Scheduled),
        ("t2", "qq:1", "s2", TaskLevel::Agent, Running),
        ("t3", "planner:s1", "s1", TaskLevel::Agent, WaitingInput),
        ("t4", "qq:1", "s1", TaskLevel::Instant, Paused),
        ("t5", "qq:2", "s2", TaskLevel::Agent, Completed),
        ("t6", "qq:1", "s1", TaskLevel::Agent, Failed),
        ("t7", "qq:1", "s2", TaskLevel::Instant, Cancelled),
        ("t8", "qq:1", "s1", TaskLevel::Agent, Running),
    ];
    // Insert out of creation order: the order must come from created_at, not insertion.
    for index in [4, 0, 8, 2, 6, 1, 5, 3, 7] {
        let (title, who, chat, level, status) = plan[index];
        let mut record = task(title, index as i64);
        record.owner = owner(who);
        record.stream_id = stream(chat);
        record.level = level;
        if status != Pending {
            record.force(status, "setup", "seed", at(100));
        }
        fs.store.insert(&record).await.unwrap();
    }
    fs
}

async fn list(fs: &common::FileStore, filter: TaskFilter) -> Vec<TaskRecord> {
    fs.store.list(&filter).await.unwrap()
}

#[tokio::test]
async fn an_empty_filter_lists_everything_newest_first() {
    let fs = seeded().await;
    assert_eq!(
        titles(&list(&fs, TaskFilter::default()).await),
        ["t8", "t7", "t6", "t5", "t4", "t3", "t2", "t1", "t0"]
    );
}

#[tokio::test]
async fn each_filter_narrows_and_they_combine() {
    let fs = seeded().await;
    let by_owner = TaskFilter {
        owner: Some(owner("qq:1")),
        ..Default::default()
    };
    assert_eq!(
        titles(&list(&fs, by_owner.clone()).await),
        ["t8", "t7", "t6", "t4", "t2", "t0"]
    );
    let planner = TaskFilter {
        owner: Some(owner("planner:s1")),
        ..Default::default()
    };
    assert_eq!(titles(&list(&fs, planner).await), ["t3"]);
    let by_stream = TaskFilter {
        stream_id: Some(stream("s2")),
        ..Default::default()
    };
    assert_eq!(titles(&list(&fs, by_stream).await), ["t7", "t5", "t2"]);
    let by_statuses = TaskFilter {
        statuses: vec![Running, Paused],
        ..Default::default()
    };
    assert_eq!(titles(&list(&fs, by_statuses).await), ["t8", "t4", "t2"]);
    let by_level = TaskFilter {
        level: Some(TaskLevel::Instant),
        ..Default::default()
    };
    assert_eq!(titles(&list(&fs, by_level).await), ["t7", "t4", "t1"]);
    let combined = TaskFilter {
        owner: Some(owner("qq:1")),
        stream_id: Some(stream("s1")),
        statuses: vec![Running, Failed, Pending],
        level: Some(TaskLevel::Agent),
        limit: None,
        requester: None,
        ..TaskFilter::default()
    };
    assert_eq!(titles(&list(&fs, combined).await), ["t8", "t6", "t0"]);
    let nobody = TaskFilter {
        owner: Some(owner("telegram:9")),
        ..Default::default()
    };
    assert!(list(&fs, nobody).await.is_empty());
}

#[tokio::test]
async fn the_limit_keeps_the_newest() {
    let fs = seeded().await;
    let newest = TaskFilter {
        limit: Some(3),
        ..Default::default()
    };
    assert_eq!(titles(&list(&fs, newest).await), ["t8", "t7", "t6"]);
    let mine = TaskFilter {
        owner: Some(owner("qq:1")),
        limit: Some(2),
        ..Default::default()
    };
    assert_eq!(titles(&list(&fs, mine).await), ["t8", "t7"]);
    let none = TaskFilter {
        limit: Some(0),
        ..Default::default()
    };
    assert!(list(&fs, none).await.is_empty());
}

#[tokio::test]
async fn listed_records_are_whole() {
    let fs = seeded().await;
    let listed = list(&fs, TaskFilter::default()).await;
    for record in &listed {
        assert_eq!(
            fs.store.get(record.id).await.unwrap().as_ref(),
            Some(record)
        );
    }
    let t8 = &listed[0];
    assert_eq!(t8.status_log.len(), 2, "the status log comes with the list");
    assert_eq!(t8.status_log[1].status, Running);
}

#[tokio::test]
async fn list_active_returns_the_active_statuses_oldest_first() {
    let fs = seeded().await;
    let active = fs.store.list_active().await.unwrap();
    assert_eq!(titles(&active), ["t0", "t1", "t2", "t3", "t4", "t8"]);
    assert!(active.iter().all(|task| !task.status.is_terminal()));
}

#[tokio::test]
async fn a_save_that_changes_indexed_fields_is_what_lists_and_resolve_see() {
    let fs = file_store().await;
    let mut moved = task("old title", 0);
    fs.store.insert(&moved).await.unwrap();
    moved.transition(Running, "scheduler", "go", at(1)).unwrap();
    fs.store.save(&moved, Some(Pending)).await.unwrap();

    // Same status, other indexed values: the compare-and-set still applies.
    moved.title = "new title".into();
    moved.owner = owner("qq:9");
    moved.stream_id = stream("s9");
    moved.level = TaskLevel::Instant;
    moved.metadata.rounds = 4;
    let stale = fs.store.save(&moved, Some(Pending)).await.unwrap();
    assert_eq!(
        stale,
        mai_core::store::SaveOutcome::Conflict { actual: Running }
    );
    assert_eq!(
        fs.store.get(moved.id).await.unwrap().unwrap().title,
        "old title"
    );
    let saved = fs.store.save(&moved, Some(Running)).await.unwrap();
    assert_eq!(saved, mai_core::store::SaveOutcome::Saved);

    assert_eq!(fs.store.get(moved.id).await.unwrap(), Some(moved.clone()));
    let filter = TaskFilter {
        owner: Some(owner("qq:9")),
        stream_id: Some(stream("s9")),
        statuses: vec![Running],
        level: Some(TaskLevel::Instant),
        limit: None,
        requester: None,
        ..TaskFilter::default()
    };
    assert_eq!(titles(&list(&fs, filter).await), ["new title"]);
    let old_owner = TaskFilter {
        owner: Some(owner("qq:1")),
        ..Default::default()
    };
    assert!(list(&fs, old_owner).await.is_empty());
    let resolved = fs.store.resolve("new title").await.unwrap();
    assert!(matches!(resolved, mai_core::store::Resolved::Found(task) if task.id == moved.id));
    assert_eq!(
        fs.store.resolve("old title").await.unwrap(),
        mai_core::store::Resolved::NotFound
    );
}
