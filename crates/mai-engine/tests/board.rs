//! The planner board: the introduction once per session, the waiting list whenever it changed,
//! only this stream's waiting tasks, oldest first, at most `max_waiting`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use mai_core::ids::StreamId;
use mai_core::model::{ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::task::TaskStatus;
use mai_engine::CreateTask;
use serde_json::json;

#[tokio::test]
async fn the_board_introduces_once_and_lists_waiting_tasks_when_they_change() {
    let model = RuleModel::new(|req| {
        if req.messages.iter().any(|m| m.role == MessageRole::Tool) {
            return Ok(ChatResponse::text("done"));
        }
        let question = format!("question about {}", req.messages[1].content);
        Ok(ChatResponse::tool_calls(
            "",
            vec![ToolCall::new(
                "q",
                "ask_user",
                json!({"question": question}),
            )],
        ))
    });
    let mut config = test_config();
    config.planner_board.max_waiting = 2;
    let mut h = Harness::start(config, model).await;
    let s1 = StreamId::new("s1").unwrap();

    let first = h
        .engine
        .planner_board(&s1, "session-a")
        .await
        .unwrap()
        .unwrap();
    assert!(
        first.contains("background sub-agents"),
        "introduction first: {first}"
    );
    assert!(first.contains("No background task is waiting"), "{first}");
    assert_eq!(
        h.engine.planner_board(&s1, "session-a").await.unwrap(),
        None,
        "nothing changed"
    );

    let mut ids = Vec::new();
    for intent in ["alpha", "beta", "gamma"] {
        let request = CreateTask {
            title: Some(intent.into()),
            ..CreateTask::agent(intent)
        };
        let task = h
            .engine
            .create(&caller("user", Role::User, "s1"), request)
            .await
            .unwrap();
        h.wait_status(task.id, TaskStatus::WaitingInput).await;
        ids.push(task.id);
    }
    // Another stream's waiting task never shows here.
    let other = h
        .engine
        .create(
            &caller("user", Role::User, "s2"),
            CreateTask {
                title: Some("other".into()),
                ..CreateTask::agent("other")
            },
        )
        .await
        .unwrap();
    h.wait_status(other.id, TaskStatus::WaitingInput).await;

    let board = h
        .engine
        .planner_board(&s1, "session-a")
        .await
        .unwrap()
        .unwrap();
    assert!(
        !board.contains("background sub-agents can"),
        "no second introduction: {board}"
    );
    assert!(
        board.contains(&ids[0].short()) && board.contains("question about alpha"),
        "{board}"
    );
    assert!(board.contains(&ids[1].short()), "{board}");
    assert!(
        !board.contains(&ids[2].short()),
        "at most max_waiting (2): {board}"
    );
    assert!(
        board.find(&ids[0].short()) < board.find(&ids[1].short()),
        "oldest first"
    );
    assert!(!board.contains("other"), "{board}");
    assert_eq!(
        h.engine.planner_board(&s1, "session-a").await.unwrap(),
        None
    );

    // A new session gets the introduction again; an answered task leaves the list.
    assert!(
        h.engine
            .planner_board(&s1, "session-b")
            .await
            .unwrap()
            .unwrap()
            .contains("background sub-agents")
    );
    let owner = mai_core::ids::PersonId::new("qq", "user").unwrap();
    h.engine
        .handle_user_reply(&owner, &s1, "yes")
        .await
        .unwrap();
    h.wait_status(ids[0], TaskStatus::Completed).await;
    let board = h
        .engine
        .planner_board(&s1, "session-a")
        .await
        .unwrap()
        .unwrap();
    assert!(
        !board.contains(&ids[0].short()) && board.contains(&ids[2].short()),
        "{board}"
    );

    let mut off = test_config();
    off.planner_board.enabled = false;
    let h2 = Harness::start(off, RuleModel::new(|_| Ok(ChatResponse::text("x")))).await;
    assert_eq!(h2.engine.planner_board(&s1, "s").await.unwrap(), None);
}
