//! Attacks through the agent loop: a user-role task whose model tries every way to run a tool it
//! may not run, reach outside its file sandbox or forge its identity. Every attempt comes back as
//! a refusal, and nothing happens outside.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::*;
use mai_core::clock::SystemClock;
use mai_core::host::PluginApi;
use mai_core::model::{ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::task::TaskStatus;
use mai_core::tool::ToolRegistry;
use mai_engine::engine::{Engine, EngineDeps};
use mai_engine::manager::CreateTask;
use serde_json::{Value, json};

#[tokio::test]
async fn a_user_task_cannot_escalate_through_any_tool() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.txt");
    let marker = dir.path().join("command-ran");
    let attacks: Vec<(&str, Value)> = vec![
        (
            "run_command",
            json!({"command": format!("touch {}", marker.display())}),
        ),
        ("call_weather_today", json!({"args": {"city": "x"}})),
        (
            "write",
            json!({"path": "../outside.txt", "content": "pwned"}),
        ),
        (
            "write",
            json!({"path": outside.display().to_string(), "content": "pwned"}),
        ),
        ("read", json!({"path": "/etc/passwd"})),
        ("read", json!({"path": "../../../../etc/passwd"})),
        (
            "create_subtask",
            json!({"intent": "x", "owner": "qq:admin"}),
        ),
        ("cancel_task", json!({"task_id": "x", "role": "admin"})),
        (
            "ask_subagent",
            json!({"intent": "x", "tools": ["run_command"]}),
        ),
        ("get_tool_schema", json!({"name": "run_command"})),
    ];
    let script = attacks.clone();
    let model = RuleModel::new(move |req| {
        let done = req
            .messages
            .iter()
            .filter(|m| m.role == MessageRole::Tool)
            .count();
        Ok(match script.get(done) {
            Some((name, args)) => ChatResponse::tool_calls(
                "",
                vec![ToolCall::new(format!("a{done}"), *name, args.clone())],
            ),
            None => ChatResponse::text("gave up"),
        })
    });
    let mut config = test_config();
    config.shell.enabled = true;
    config.plugin_api.allowlist = vec!["weather.today".into()];
    let host = Arc::new(RecordingHost {
        apis: vec![PluginApi {
            name: "weather.today".into(),
            description: "weather".into(),
            plugin: "weather".into(),
        }],
        ..RecordingHost::default()
    });
    let engine = Engine::new(EngineDeps {
        store: Arc::new(
            mai_store::SqliteStore::open(&dir.path().join("t.db"))
                .await
                .unwrap(),
        ),
        model: model.clone(),
        host: host.clone(),
        registry: Arc::new(ToolRegistry::new()),
        config: Arc::new(mai_core::config::LiveConfig::new(config).unwrap()),
        prompts: Arc::new(mai_engine::prompts::Prompts::embedded()),
        clock: Arc::new(SystemClock),
        files_root: Some(dir.path().join("files")),
    })
    .await
    .unwrap();
    assert!(
        engine.registry().get("run_command").is_some()
            && engine.registry().get("call_weather_today").is_some()
    );
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    let task = engine
        .create(
            &caller("user", Role::User, "s"),
            CreateTask::agent("escalate"),
        )
        .await
        .unwrap();
    wait_for(&mut events, "completion", |e| matches!(e, mai_engine::events::TaskEvent::Status { task_id, status: TaskStatus::Completed, .. } if *task_id == task.id)).await;

    // What the user-role task was offered never included the admin tools.
    let offered: Vec<String> = model.agent_requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(
        !offered.contains(&"run_command".to_owned())
            && !offered.iter().any(|n| n.starts_with("call_")),
        "{offered:?}"
    );

    let last = model.agent_requests().last().unwrap().clone();
    let results: Vec<Value> = last
        .messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .map(|m| serde_json::from_str(&m.content).unwrap())
        .collect();
    assert_eq!(results.len(), attacks.len());
    for ((name, args), result) in attacks.iter().zip(&results) {
        assert_eq!(
            result["success"], false,
            "{name} {args} was not refused: {result}"
        );
    }
    let text = |i: usize| results[i]["error"].as_str().unwrap().to_owned();
    assert!(text(0).contains("permission denied") && text(1).contains("permission denied"));
    assert!(
        text(6).contains("unknown field") && text(7).contains("unknown field"),
        "{} / {}",
        text(6),
        text(7)
    );
    assert!(text(8).contains("cannot use run_command"), "{}", text(8));
    // Nothing happened outside the sandbox.
    assert!(!marker.exists(), "the command never ran");
    assert!(!outside.exists(), "nothing was written outside the sandbox");
    assert_eq!(
        host.api_calls.load(Ordering::SeqCst),
        0,
        "the plugin API was never called"
    );
}
