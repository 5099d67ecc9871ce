//! Review findings on the waiting path: concurrent answers from two processes, and the running
//! time saved together with the waiting state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::*;
use mai_core::clock::Clock;
use mai_core::model::{ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::task::{TaskRecord, TaskStatus};
use mai_core::tool::{
    ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use mai_engine::CreateTask;
use mai_engine::EngineError;
use serde_json::{Value, json};

/// Asks first; answers with whatever the question's result was.
fn asking_model() -> Arc<RuleModel> {
    RuleModel::new(|req| {
        let asked = req
            .messages
            .iter()
            .any(|m| m.tool_calls.iter().any(|c| c.name == "ask_user"));
        if !asked {
            return Ok(ChatResponse::tool_calls(
                "",
                vec![ToolCall::new(
                    "q1",
                    "ask_user",
                    json!({"question": "Which disk?"}),
                )],
            ));
        }
        Ok(ChatResponse::text("checked"))
    })
}

fn answers_recorded(entries: &[mai_core::store::HistoryEntry]) -> usize {
    entries
        .iter()
        .filter(|e| {
            e.payload["role"] == json!(MessageRole::Tool) && e.payload["tool_call_id"] == "q1"
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_answering_one_question_at_once_record_exactly_one_answer() {
    let mut config = test_config();
    config.task.max_concurrent_tasks = 20;
    let mut h = Harness::start(config.clone(), asking_model()).await;
    let alice = caller("user", Role::User, "s1");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut request = CreateTask::agent(format!("check disk {i}"));
        request.title = Some(format!("disk {i}"));
        tasks.push(h.engine.create(&alice, request).await.unwrap());
    }
    wait_all(&mut h, &tasks, TaskStatus::WaitingInput).await;
    h.engine.stop().await;
    // Two other processes on the same database (like two `mai-agent task ask` at once): not
    // started, they answer from the store alone.
    let db = h.db();
    let mut processes = Vec::new();
    for _ in 0..2 {
        processes.push(
            engine_at(
                &db,
                config.clone(),
                asking_model(),
                Arc::new(RecordingHost::default()),
                Arc::new(ToolRegistry::new()),
                Arc::new(mai_core::clock::SystemClock),
            )
            .await,
        );
    }
    let (one, other) = (&processes[0], &processes[1]);
    for task in &tasks {
        let reference = task.id.to_string();
        let (here, there) = tokio::join!(
            one.answer(&alice, &reference, "sda"),
            other.answer(&alice, &reference, "sdb"),
        );
        let won = [&here, &there].iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "exactly one answer wins: {here:?} / {there:?}");
        let lost = if here.is_err() { here } else { there };
        match lost {
            Err(EngineError::WrongState { what, .. }) => {
                assert!(what.contains("already answered"), "{what}")
            }
            other => panic!("the loser must be told it was already answered: {other:?}"),
        }
        let history = one.history(&alice, &reference).await.unwrap();
        assert_eq!(
            answers_recorded(&history.entries),
            1,
            "one answer in the history of {}",
            task.id
        );
        assert!(
            history.task.metadata.waiting.is_none(),
            "the winning answer cleared the question"
        );
    }
}

/// Waits until every task of `tasks` reached `status` (events as wake-ups, in any order).
async fn wait_all(h: &mut Harness, tasks: &[TaskRecord], status: TaskStatus) {
    let mut left: std::collections::HashSet<_> = tasks.iter().map(|t| t.id).collect();
    while !left.is_empty() {
        let event = h
            .wait_for(
                "the tasks' status",
                |e| matches!(e, mai_engine::TaskEvent::Status { status: s, .. } if *s == status),
            )
            .await;
        if let mai_engine::TaskEvent::Status { task_id, .. } = event {
            left.remove(&task_id);
        }
    }
}

/// Moves the test clock while it runs: running time the task accumulates.
struct Slow(Arc<ManualClock>);

#[async_trait]
impl ToolHandler for Slow {
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        self.0.advance(chrono::Duration::seconds(90));
        Ok(json!({"success": true}))
    }
}

#[tokio::test]
async fn the_runtime_before_a_question_is_saved_with_the_waiting_state() {
    let clock = ManualClock::new();
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "slow",
            "takes 90 s of test time",
            json!({"type": "object"}),
            Visibility::Essential,
            Role::User,
            Arc::new(Slow(clock.clone())),
        )
        .unwrap(),
    );
    let model = RuleModel::new(|req| {
        let results = req
            .messages
            .iter()
            .filter(|m| m.role == MessageRole::Tool)
            .count();
        Ok(match results {
            0 => ChatResponse::tool_calls("", vec![ToolCall::new("s1", "slow", json!({}))]),
            1 => ChatResponse::tool_calls(
                "",
                vec![ToolCall::new(
                    "q1",
                    "ask_user",
                    json!({"question": "Which disk?"}),
                )],
            ),
            _ => ChatResponse::text("checked"),
        })
    });
    let mut h = Harness::start_with(test_config(), model, registry, clock.clone()).await;
    let alice = caller("user", Role::User, "s1");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("check disk"))
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::WaitingInput).await;
    // What a restart would read: the stored record.
    let store = mai_store::SqliteStore::open(h.db()).await.unwrap();
    let stored: TaskRecord = mai_core::store::TaskStore::get(&store, task.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, TaskStatus::WaitingInput);
    assert!(
        stored.metadata.runtime_secs >= 90,
        "the 90 s run before the question are saved with the waiting state, got {} s",
        stored.metadata.runtime_secs
    );
    let _ = clock.now();
}

/// An engine whose only slot runs a task asking a question that cannot be sent: every send
/// fails and the next retry is an hour away. Returns once the first attempt has failed.
async fn asking_into_a_failing_channel() -> (Harness, TaskRecord) {
    let mut config = test_config();
    config.task.max_concurrent_tasks = 1;
    config.send.max_retries = 100;
    config.send.retry_base_ms = 3_600_000;
    let h = Harness::start(config, asking_model()).await;
    h.host
        .failing_sends
        .store(1_000_000, std::sync::atomic::Ordering::SeqCst);
    let task = h
        .engine
        .create(
            &caller("user", Role::User, "s1"),
            CreateTask::agent("check disk"),
        )
        .await
        .unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        h.host.send_failed.notified(),
    )
    .await
    .expect("the question's first send attempt");
    (h, task)
}

#[tokio::test]
async fn a_failing_question_send_stops_retrying_as_soon_as_its_task_is_cancelled() {
    let (mut h, asking) = asking_into_a_failing_channel().await;
    let alice = caller("user", Role::User, "s1");
    h.engine
        .cancel(&alice, &asking.id.to_string())
        .await
        .unwrap();
    h.wait_status(asking.id, TaskStatus::Cancelled).await;
    // The only slot frees up at once: the run did not sit out its hour-long retry wait.
    let next = h
        .engine
        .create(&caller("user", Role::User, "s2"), CreateTask::agent("next"))
        .await
        .unwrap();
    h.wait_status(next.id, TaskStatus::Running).await;
    let attempts = h.host.failed_sends.lock().unwrap().clone();
    assert_eq!(
        attempts.iter().filter(|s| *s == "s1").count(),
        1,
        "one attempt, no retry after the cancel: {attempts:?}"
    );
    assert_eq!(
        record(&h.engine, asking.id).await.status,
        TaskStatus::Cancelled
    );
}

#[tokio::test]
async fn a_failing_question_send_stops_retrying_when_the_service_stops() {
    let (h, _asking) = asking_into_a_failing_channel().await;
    tokio::time::timeout(std::time::Duration::from_secs(20), h.engine.stop())
        .await
        .expect("stop does not wait out the send's retries");
    assert_eq!(*h.host.failed_sends.lock().unwrap(), ["s1"]);
}
