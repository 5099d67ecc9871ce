//! Retention: finished tasks that ended before the cutoff go, with their status log and
//! history; unfinished tasks, recent ones, and parents of unfinished subtasks stay.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use mai_core::store::TaskStore;
use mai_core::task::{TaskRecord, TaskStatus};

/// A task that ran and ended in `end` at `at(ended)`.
fn finished(title: &str, end: TaskStatus, ended: i64) -> TaskRecord {
    let mut task = task(title, 0);
    task.transition(TaskStatus::Running, "scheduler", "dispatched", at(1))
        .unwrap();
    task.transition(end, "scheduler", "done", at(ended))
        .unwrap();
    task
}

#[tokio::test]
async fn finished_tasks_older_than_the_cutoff_are_deleted_with_their_history() {
    let store = file_store().await.store;
    let old = [
        finished("old completed", TaskStatus::Completed, 100),
        finished("old failed", TaskStatus::Failed, 100),
        finished("old cancelled", TaskStatus::Cancelled, 100),
    ];
    for task in &old {
        store.insert(task).await.unwrap();
        store
            .append_history(task.id, &[message(1, "private words")])
            .await
            .unwrap();
    }
    let recent = finished("recent", TaskStatus::Completed, 10_000);
    store.insert(&recent).await.unwrap();
    let unfinished = task("still pending", 0);
    store.insert(&unfinished).await.unwrap();
    // A finished parent whose subtask still runs is kept for it.
    let parent = finished("parent", TaskStatus::Completed, 100);
    store.insert(&parent).await.unwrap();
    let mut child = task("child", 50);
    child.metadata.parent_task_id = Some(parent.id);
    store.insert(&child).await.unwrap();

    assert_eq!(store.prune_finished(at(5_000)).await.unwrap(), 3);

    for task in &old {
        assert!(
            store.get(task.id).await.unwrap().is_none(),
            "{}",
            task.title
        );
        assert!(store.history(task.id, 0).await.unwrap().is_empty());
    }
    for kept in [&recent, &unfinished, &parent, &child] {
        assert!(
            store.get(kept.id).await.unwrap().is_some(),
            "{} was deleted",
            kept.title
        );
    }
    // Nothing left to delete: a second run deletes nothing.
    assert_eq!(store.prune_finished(at(5_000)).await.unwrap(), 0);
}

fn usage_of(task: &TaskRecord, prompt: u64) -> mai_core::usage::UsageRecord {
    mai_core::usage::UsageRecord {
        id: uuid::Uuid::new_v4(),
        at: at(50),
        day: at(50).date_naive(),
        task_id: Some(task.id),
        round: 1,
        purpose: mai_core::usage::UsagePurpose::Agent,
        model: "m".into(),
        prompt_tokens: prompt,
        completion_tokens: 1,
        cached_tokens: 0,
        estimated: false,
        latency_ms: 3,
        owner: task.owner.to_string(),
        requester: task.requester().map(ToString::to_string),
        stream_id: task.stream_id.to_string(),
        cost: Some(0.5),
    }
}

#[tokio::test]
async fn pruning_a_finished_task_never_deletes_the_usage_it_caused() {
    let store = file_store().await.store;
    let old = finished("old", TaskStatus::Completed, 100);
    store.insert(&old).await.unwrap();
    store
        .checkpoint_with_usage(
            &old,
            Some(TaskStatus::Completed),
            &[],
            &[usage_of(&old, 40)],
        )
        .await
        .unwrap();
    store.record_usage(&[usage_of(&old, 2)]).await.unwrap();

    assert_eq!(store.prune_finished(at(5_000)).await.unwrap(), 1);

    assert!(store.get(old.id).await.unwrap().is_none());
    let query = mai_core::usage::UsageQuery {
        task: Some(old.id),
        ..Default::default()
    };
    let totals = store.usage(&query).await.unwrap();
    assert_eq!(totals.len(), 1);
    assert_eq!((totals[0].prompt_tokens, totals[0].calls), (42, 2));
    assert!((totals[0].cost - 1.0).abs() < 1e-12);
}
