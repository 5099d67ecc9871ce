//! Checkpoints: the task and its agent history in one transaction, history order, `from_seq`
//! and the watermark (`TaskMetadata::history_len`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;

use common::{at, file_store, message, task};
use mai_core::store::{HistoryKind, NewHistoryEntry, SaveOutcome, StoreError, TaskStore};
use mai_core::task::{TaskId, TaskStatus};

use TaskStatus::*;

fn contents(entries: &[mai_core::store::HistoryEntry]) -> Vec<(u64, u32, HistoryKind, String)> {
    entries
        .iter()
        .map(|entry| {
            (
                entry.seq,
                entry.round,
                entry.kind,
                entry.payload["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_checkpoint_saves_the_task_and_appends_its_history_in_order() {
    let fs = file_store().await;
    let mut agent = task("agent", 0);
    fs.store.insert(&agent).await.unwrap();
    agent.transition(Running, "scheduler", "go", at(1)).unwrap();
    agent.metadata.rounds = 1;
    agent.metadata.history_len = 3;
    let first_round = [
        message(1, "system"),
        message(1, "user"),
        message(1, "reply"),
    ];
    let outcome = fs
        .store
        .checkpoint(&agent, Some(Pending), &first_round)
        .await
        .unwrap();
    assert_eq!(outcome, SaveOutcome::Saved);

    agent.metadata.rounds = 2;
    agent.metadata.history_len = 5;
    let second_round = [message(2, "call"), message(2, "result")];
    let outcome = fs
        .store
        .checkpoint(&agent, Some(Running), &second_round)
        .await
        .unwrap();
    assert_eq!(outcome, SaveOutcome::Saved);

    assert_eq!(fs.store.get(agent.id).await.unwrap(), Some(agent.clone()));
    let history = fs.store.history(agent.id, 0).await.unwrap();
    assert_eq!(
        contents(&history),
        [
            (0, 1, HistoryKind::Message, "system".to_owned()),
            (1, 1, HistoryKind::Message, "user".to_owned()),
            (2, 1, HistoryKind::Message, "reply".to_owned()),
            (3, 2, HistoryKind::Message, "call".to_owned()),
            (4, 2, HistoryKind::Message, "result".to_owned()),
        ]
    );
    assert_eq!(history[0].payload, first_round[0].payload);
    assert_eq!(history[4].at, second_round[1].at);
    assert_eq!(
        contents(&fs.store.history(agent.id, 3).await.unwrap())[0].0,
        3
    );
    assert!(fs.store.history(agent.id, 5).await.unwrap().is_empty());
    assert!(
        fs.store
            .history(agent.id, u64::MAX)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_conflicting_checkpoint_writes_neither_the_task_nor_the_history() {
    let fs = file_store().await;
    let mut agent = task("agent", 0);
    fs.store.insert(&agent).await.unwrap();
    agent.transition(Running, "scheduler", "go", at(1)).unwrap();
    agent.metadata.history_len = 1;
    fs.store
        .checkpoint(&agent, Some(Pending), &[message(1, "kept")])
        .await
        .unwrap();
    let before = fs.store.get(agent.id).await.unwrap().unwrap();

    let mut stale = agent.clone();
    stale.metadata.rounds = 9;
    stale.metadata.history_len = 3;
    stale.transition(Paused, "qq:1", "pause", at(2)).unwrap();
    let outcome = fs
        .store
        .checkpoint(
            &stale,
            Some(Pending),
            &[message(2, "lost"), message(2, "lost")],
        )
        .await
        .unwrap();
    assert_eq!(outcome, SaveOutcome::Conflict { actual: Running });
    assert_eq!(fs.store.get(agent.id).await.unwrap(), Some(before));
    let history = fs.store.history(agent.id, 0).await.unwrap();
    assert_eq!(
        contents(&history),
        [(0, 1, HistoryKind::Message, "kept".to_owned())]
    );
}

#[tokio::test]
async fn a_checkpoint_of_a_missing_task_is_not_found_and_appends_nothing() {
    let fs = file_store().await;
    let ghost = task("ghost", 0);
    let error = fs
        .store
        .checkpoint(&ghost, None, &[message(1, "lost")])
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::NotFound(id) if id == ghost.id),
        "{error}"
    );
    assert!(fs.store.history(ghost.id, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn injections_after_the_watermark_are_what_history_from_the_watermark_returns() {
    let fs = file_store().await;
    let mut agent = task("agent", 0);
    fs.store.insert(&agent).await.unwrap();
    agent.transition(Running, "scheduler", "go", at(1)).unwrap();
    agent.metadata.history_len = 2;
    fs.store
        .checkpoint(
            &agent,
            Some(Pending),
            &[message(1, "user"), message(1, "reply")],
        )
        .await
        .unwrap();

    let injection = NewHistoryEntry {
        round: 1,
        kind: HistoryKind::Injection,
        payload: serde_json::json!({"content": "also check /var"}),
        at: at(5),
    };
    let note = NewHistoryEntry {
        kind: HistoryKind::Note,
        payload: serde_json::json!({"content": "paused by owner"}),
        ..injection.clone()
    };
    fs.store
        .append_history(agent.id, &[injection, note])
        .await
        .unwrap();

    let stored = fs.store.get(agent.id).await.unwrap().unwrap();
    assert_eq!(stored, agent, "appending history leaves the task alone");
    let watermark = stored.metadata.history_len;
    let unseen = fs.store.history(agent.id, watermark).await.unwrap();
    assert_eq!(
        contents(&unseen),
        [
            (2, 1, HistoryKind::Injection, "also check /var".to_owned()),
            (3, 1, HistoryKind::Note, "paused by owner".to_owned()),
        ]
    );

    // The next checkpoint numbers its entries after the injections and moves the watermark.
    agent.metadata.history_len = 5;
    fs.store
        .checkpoint(&agent, Some(Running), &[message(2, "next")])
        .await
        .unwrap();
    let stored = fs.store.get(agent.id).await.unwrap().unwrap();
    assert_eq!(stored.metadata.history_len, 5);
    assert_eq!(
        contents(&fs.store.history(agent.id, 4).await.unwrap()),
        [(4, 2, HistoryKind::Message, "next".to_owned())]
    );
    assert!(
        fs.store
            .history(agent.id, stored.metadata.history_len)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn appending_history_to_a_missing_task_is_not_found() {
    let fs = file_store().await;
    let missing = TaskId::new();
    let error = fs
        .store
        .append_history(missing, &[message(1, "x")])
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::NotFound(id) if id == missing),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains(&missing.to_string()), "{message}");
}
