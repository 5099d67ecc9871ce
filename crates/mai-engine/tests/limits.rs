//! The caps of `[limits]` on task creation: a model that calls `create_subtask` as often as it
//! can, sub-tasks that keep making sub-tasks, and people or chats piling up unfinished and
//! recurring tasks. Each refusal names the limit and its figure, writes nothing, and a raised
//! limit applies at once (hot reload). Reply tasks are never refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use mai_core::model::{ChatRequest, ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::store::TaskFilter;
use mai_core::task::{TaskRecord, TaskStatus, Trigger};
use mai_engine::CreateTask;
use mai_engine::Engine;
use mai_engine::EngineError;
use mai_engine::MAX_TOOL_CALLS_PER_ROUND;
use mai_engine::TaskEvent;
use serde_json::{Value, json};

fn tool_results(request: &ChatRequest) -> Vec<Value> {
    request
        .messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .map(|m| serde_json::from_str(&m.content).unwrap())
        .collect()
}

fn first_user_text(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .find(|m| m.role == MessageRole::User)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

/// Every task in the store except reply tasks.
async fn made_tasks(engine: &Engine) -> Vec<TaskRecord> {
    let admin = caller("admin", Role::Admin, "s");
    let mut tasks = engine.list(&admin, TaskFilter::default()).await.unwrap();
    tasks.retain(|task| !task.metadata.is_reply);
    tasks
}

/// Waits until `count` agent tasks have given their final answer.
async fn answers(h: &mut Harness, count: usize) {
    let seen = AtomicUsize::new(0);
    h.wait_for(&format!("{count} answers"), |event| {
        matches!(event, TaskEvent::Answer { .. })
            && seen.fetch_add(1, Ordering::SeqCst) + 1 == count
    })
    .await;
}

#[tokio::test]
async fn a_round_of_create_subtask_calls_makes_at_most_max_children() {
    let model = RuleModel::new(|req| {
        if first_user_text(req).contains("bomb") && tool_results(req).is_empty() {
            let calls = (0..MAX_TOOL_CALLS_PER_ROUND)
                .map(|i| {
                    ToolCall::new(
                        format!("c{i}"),
                        "create_subtask",
                        json!({"intent": format!("child {i}"), "level": "instant"}),
                    )
                })
                .collect();
            return Ok(ChatResponse::tool_calls("", calls));
        }
        Ok(ChatResponse::text("done"))
    });
    let mut h = Harness::start(test_config(), model.clone()).await;
    let user = caller("user", Role::User, "s");
    let bomb = h
        .engine
        .create(&user, CreateTask::agent("bomb the service"))
        .await
        .unwrap();
    h.wait_status(bomb.id, TaskStatus::Completed).await;

    let children: Vec<TaskRecord> = made_tasks(&h.engine)
        .await
        .into_iter()
        .filter(|task| task.metadata.parent_task_id == Some(bomb.id))
        .collect();
    assert_eq!(children.len(), 5, "[limits] max_children defaults to 5");
    for child in &children {
        assert_eq!(child.metadata.depth, 1);
        assert_eq!(
            child.requester(),
            bomb.requester(),
            "a child acts for the same person"
        );
    }
    let last = model
        .agent_requests()
        .into_iter()
        .rfind(|r| first_user_text(r).contains("bomb"))
        .unwrap();
    let results = tool_results(&last);
    assert_eq!(results.len(), MAX_TOOL_CALLS_PER_ROUND);
    let made = results.iter().filter(|r| r["success"] == true).count();
    assert_eq!(made, 5, "{results:?}");
    for refused in results.iter().filter(|r| r["success"] != true) {
        let error = refused["error"].as_str().unwrap_or_default();
        assert!(error.contains("[limits] max_children = 5"), "{error}");
    }
}

#[tokio::test]
async fn sub_tasks_nest_at_most_max_depth_deep() {
    // Every agent task first tries to hand its work to a sub-task: a chain that would not end.
    let model = RuleModel::new(|req| {
        if tool_results(req).is_empty() {
            return Ok(ChatResponse::tool_calls(
                "",
                vec![ToolCall::new(
                    "c",
                    "create_subtask",
                    json!({"intent": "hand the same job on"}),
                )],
            ));
        }
        Ok(ChatResponse::text("done"))
    });
    let mut h = Harness::start(test_config(), model.clone()).await;
    let user = caller("user", Role::User, "s");
    h.engine
        .create(&user, CreateTask::agent("start a chain"))
        .await
        .unwrap();
    // Depth 0, 1 and 2 run; the depth-2 task's sub-task is refused.
    answers(&mut h, 3).await;
    let mut depths: Vec<u32> = made_tasks(&h.engine)
        .await
        .iter()
        .map(|task| task.metadata.depth)
        .collect();
    depths.sort_unstable();
    assert_eq!(depths, [0, 1, 2]);
    let refused: Vec<Value> = model
        .agent_requests()
        .iter()
        .flat_map(tool_results)
        .filter(|r| r["success"] != true)
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    let error = refused[0]["error"].as_str().unwrap();
    assert!(error.contains("[limits] max_depth = 2"), "{error}");
}

fn later(intent: &str) -> CreateTask {
    CreateTask {
        trigger: Trigger::Delay { seconds: 3600 },
        title: Some(intent.into()),
        ..CreateTask::agent(intent)
    }
}

fn cron(intent: &str) -> CreateTask {
    CreateTask {
        trigger: Trigger::Cron {
            expr: "0 18 * * *".into(),
            timezone: None,
        },
        title: Some(intent.into()),
        ..CreateTask::agent(intent)
    }
}

fn refusal(result: Result<TaskRecord, EngineError>) -> String {
    match result {
        Err(error @ EngineError::LimitReached(_)) => error.to_string(),
        other => panic!("expected a limit refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn people_and_chats_have_caps_on_unfinished_and_recurring_tasks() {
    let mut config = test_config();
    config.permission.users.push("qq:other".into());
    config.limits.max_active_per_requester = 4;
    config.limits.max_cron_per_requester = 2;
    config.limits.max_active_per_stream = 5;
    config.limits.max_cron_per_stream = 3;
    let h = Harness::start(
        config.clone(),
        RuleModel::new(|_| Ok(ChatResponse::text("ok"))),
    )
    .await;
    let user = caller("user", Role::User, "s1");
    let other = caller("other", Role::User, "s1");
    let admin = caller("admin", Role::Admin, "s1");
    let e = &h.engine;

    e.create(&user, cron("c1")).await.unwrap();
    e.create(&user, cron("c2")).await.unwrap();
    let text = refusal(e.create(&user, cron("c3")).await);
    assert!(
        text.contains("[limits] max_cron_per_requester = 2"),
        "{text}"
    );
    assert!(text.contains("qq:user"), "{text}");
    e.create(&user, later("d1")).await.unwrap();
    e.create(&user, later("d2")).await.unwrap();
    let text = refusal(e.create(&user, later("d3")).await);
    assert!(
        text.contains("[limits] max_active_per_requester = 4"),
        "{text}"
    );
    // Another person in the same chat, then the chat is full — for admins too.
    e.create(&other, cron("c4")).await.unwrap();
    let text = refusal(e.create(&other, later("d4")).await);
    assert!(
        text.contains("[limits] max_active_per_stream = 5"),
        "{text}"
    );
    let text = refusal(e.create(&admin, cron("c5")).await);
    assert!(text.contains("max_cron_per_stream = 3") || text.contains("max_active_per_stream"));
    // Refusals wrote nothing.
    assert_eq!(made_tasks(e).await.len(), 5);

    // A finished task frees its place; a raised limit applies at once.
    e.cancel(&user, "d1").await.unwrap();
    e.create(&user, later("d5")).await.unwrap();
    refusal(e.create(&other, later("d6")).await);
    config.limits.max_active_per_stream = 50;
    e.reload_config(config).await.unwrap();
    e.create(&other, later("d6")).await.unwrap();
}

#[tokio::test]
async fn a_reply_is_delivered_even_when_its_requester_is_at_the_cap() {
    let mut config = test_config();
    config.limits.max_active_per_requester = 1;
    let mut h = Harness::start(config, RuleModel::new(|_| Ok(ChatResponse::text("42")))).await;
    let user = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&user, CreateTask::agent("the answer"))
        .await
        .unwrap();
    h.wait_for("the reply sent", |event| {
        matches!(event, TaskEvent::Sent { .. })
    })
    .await;
    assert_eq!(h.host.sent_to("s"), ["42"]);
    let reply = made_tasks(&h.engine).await;
    assert_eq!(reply.len(), 1, "only the task itself counts as made");
    assert_eq!(reply[0].id, task.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creations_at_the_same_time_cannot_pass_a_cap_together() {
    let mut config = test_config();
    config.limits.max_active_per_requester = 3;
    let h = Harness::start(config, RuleModel::new(|_| Ok(ChatResponse::text("ok")))).await;
    let user = caller("user", Role::User, "s");
    // Twelve at once: each counts 0 before any is written, unless the admission lock holds.
    let attempts = (0..12).map(|i| h.engine.create(&user, later(&format!("t{i}"))));
    let results = futures::future::join_all(attempts).await;
    let made = results.iter().filter(|result| result.is_ok()).count();
    assert_eq!(made, 3, "all but three refused by the cap");
    for refused in results.iter().filter_map(|result| result.as_ref().err()) {
        assert!(
            refused
                .to_string()
                .contains("[limits] max_active_per_requester = 3"),
            "{refused}"
        );
    }
    assert_eq!(made_tasks(&h.engine).await.len(), 3);
}

#[tokio::test]
async fn a_chat_has_its_own_cap_on_recurring_tasks() {
    let mut config = test_config();
    config.permission.users.push("qq:other".into());
    config.limits.max_cron_per_stream = 2;
    let h = Harness::start(config, RuleModel::new(|_| Ok(ChatResponse::text("ok")))).await;
    let e = &h.engine;
    e.create(&caller("user", Role::User, "s1"), cron("c1"))
        .await
        .unwrap();
    e.create(&caller("other", Role::User, "s1"), cron("c2"))
        .await
        .unwrap();
    // Each person is far from their own cap, and the chat far from its cap on unfinished tasks.
    let admin = caller("admin", Role::Admin, "s1");
    let text = refusal(e.create(&admin, cron("c3")).await);
    assert!(text.contains("[limits] max_cron_per_stream = 2"), "{text}");
    e.create(&admin, later("once")).await.unwrap();
    e.create(&caller("admin", Role::Admin, "s2"), cron("elsewhere"))
        .await
        .unwrap();
}
