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
use mai_engine::CreateTask;
use mai_engine::{Engine, EngineDeps};
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
    let host = Arc::new(host_with_weather_api());
    let engine =
        engine_with_every_tool(dir.path(), test_config(), model.clone(), host.clone()).await;
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
    wait_for(&mut events, "completion", |e| matches!(e, mai_engine::TaskEvent::Status { task_id, status: TaskStatus::Completed, .. } if *task_id == task.id)).await;

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

/// Regression: a reference was resolved over every task before the ownership check, so a user
/// whose reference also matched another person's task got "ambiguous: <their short ids>" — the
/// existence and ids of other people's tasks leaked, and the user's own task was unreachable.
#[tokio::test]
async fn an_ambiguous_reference_never_shows_or_counts_other_peoples_tasks() {
    let h = Harness::start(test_config(), Arc::new(mai_llm::ScriptedModel::default())).await;
    let later = |title: &str| {
        let mut request = CreateTask::agent(format!("{title} task"));
        request.trigger = mai_core::task::Trigger::Delay { seconds: 3600 };
        request.title = Some(title.into());
        request
    };
    let alice = caller("alice", Role::User, "s");
    let bob = caller("bob", Role::User, "s");
    let admin = caller("boss", Role::Admin, "s");
    let alices = h.engine.create(&alice, later("milk")).await.unwrap();
    let alices_second = h.engine.create(&alice, later("milk")).await.unwrap();
    // Only alice's tasks are called "milk": bob is told "not found", exactly as for a title no
    // task has — not "ambiguous" with alice's ids.
    let error = h
        .engine
        .resolve(&bob, "milk")
        .await
        .unwrap_err()
        .to_string();
    let nothing = h.engine.resolve(&bob, "tea").await.unwrap_err().to_string();
    assert_eq!(error.replace("milk", "tea"), nothing);
    assert!(
        !error.contains(&alices.id.short()) && !error.contains(&alices_second.id.short()),
        "{error}"
    );
    // Bob's own "milk" is found, whatever alice has.
    let bobs = h.engine.create(&bob, later("milk")).await.unwrap();
    assert_eq!(h.engine.resolve(&bob, "milk").await.unwrap().id, bobs.id);
    let cancelled = h.engine.cancel(&bob, "milk").await.unwrap();
    assert_eq!(cancelled.id, bobs.id);
    // Alice still sees her own ambiguity, listing her tasks only.
    let error = h
        .engine
        .resolve(&alice, "milk")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&alices.id.short())
            && error.contains(&alices_second.id.short())
            && !error.contains(&bobs.id.short()),
        "{error}"
    );
    // An admin sees every match.
    let error = h
        .engine
        .resolve(&admin, "milk")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains(&bobs.id.short()), "{error}");
    // A prefix of alice's id, given by bob, is "not found" too.
    let prefix = &alices.id.short()[..6];
    let error = h
        .engine
        .resolve(&bob, prefix)
        .await
        .unwrap_err()
        .to_string();
    assert!(!error.contains(&alices.id.short()), "{error}");
}

/// An engine with the dangerous tools registered (shell on, a plugin API allowlisted, a file
/// sandbox at `<dir>/files`), over `model`.
fn armed_config() -> Arc<mai_core::config::LiveConfig> {
    let mut config = test_config();
    config.shell.enabled = true;
    config.plugin_api.allowlist = vec!["weather.today".into()];
    Arc::new(mai_core::config::LiveConfig::new(config).unwrap())
}

async fn armed_engine(
    dir: &std::path::Path,
    model: Arc<RuleModel>,
    live: Arc<mai_core::config::LiveConfig>,
) -> (Arc<Engine>, Arc<RecordingHost>) {
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
            mai_store::SqliteStore::open(&dir.join("t.db"))
                .await
                .unwrap(),
        ),
        model,
        host: host.clone(),
        registry: Arc::new(ToolRegistry::new()),
        config: live.clone(),
        prompts: Arc::new(mai_engine::Prompts::embedded()),
        clock: Arc::new(SystemClock),
        files_root: Some(dir.join("files")),
    })
    .await
    .unwrap();
    assert!(engine.registry().get("run_command").is_some());
    (engine, host)
}

fn tool_results(req: &mai_core::model::ChatRequest) -> Vec<Value> {
    req.messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .map(|m| serde_json::from_str(&m.content).unwrap())
        .collect()
}

/// A user task's sub-agent (given no tool list, so it inherits what its parent may use) whose
/// own model calls the admin tools directly: each is refused, nothing happens outside.
#[tokio::test]
async fn a_user_tasks_subagent_cannot_escalate_either() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("subagent-command-ran");
    let outside = dir.path().join("subagent-outside.txt");
    let attacks: Vec<(&str, Value)> = vec![
        (
            "run_command",
            json!({"command": format!("touch {}", marker.display())}),
        ),
        ("call_weather_today", json!({"args": {}})),
        (
            "write",
            json!({"path": outside.display().to_string(), "content": "pwned"}),
        ),
        (
            "write",
            json!({"path": "../../subagent-outside.txt", "content": "x"}),
        ),
    ];
    let script = attacks.clone();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let record = seen.clone();
    let model = RuleModel::new(move |req| {
        let subagent = req.messages[0]
            .content
            .starts_with("You are a focused helper");
        let results = tool_results(req);
        Ok(if subagent {
            match script.get(results.len()) {
                Some((name, args)) => ChatResponse::tool_calls(
                    "",
                    vec![ToolCall::new(
                        format!("s{}", results.len()),
                        *name,
                        args.clone(),
                    )],
                ),
                None => {
                    *record.lock().unwrap() = results;
                    ChatResponse::text("could not")
                }
            }
        } else if results.is_empty() {
            ChatResponse::tool_calls(
                "",
                vec![ToolCall::new(
                    "p0",
                    "ask_subagent",
                    json!({"intent": "escalate"}),
                )],
            )
        } else {
            ChatResponse::text("done")
        })
    });
    let (engine, host) = armed_engine(dir.path(), model, armed_config()).await;
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    let task = engine
        .create(
            &caller("user", Role::User, "s"),
            CreateTask::agent("delegate"),
        )
        .await
        .unwrap();
    wait_for(&mut events, "completion", |e| matches!(e, mai_engine::TaskEvent::Status { task_id, status: TaskStatus::Completed, .. } if *task_id == task.id)).await;
    let results = seen.lock().unwrap().clone();
    assert_eq!(results.len(), attacks.len(), "{results:?}");
    for ((name, args), result) in attacks.iter().zip(&results) {
        assert_eq!(result["success"], false, "{name} {args}: {result}");
    }
    assert!(!marker.exists() && !outside.exists());
    assert!(!dir.path().join("subagent-outside.txt").exists());
    assert_eq!(host.api_calls.load(Ordering::SeqCst), 0);
}

/// The role of a running task is re-resolved at every tool call: an admin's task whose owner is
/// demoted by a `[permission]` reload mid-task cannot run the admin tool at its next call.
#[tokio::test]
async fn a_demoted_owner_loses_the_admin_tools_at_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran-after-demotion");
    let live = armed_config();
    let reload = live.clone();
    let command = format!("touch {}", marker.display());
    let model = RuleModel::new(move |req| {
        let results = tool_results(req);
        Ok(match results.len() {
            0 => ChatResponse::tool_calls(
                "",
                vec![ToolCall::new(
                    "c0",
                    "run_command",
                    json!({"command": "true"}),
                )],
            ),
            1 => {
                // The first call ran as admin; the owner is demoted before the next one.
                let mut config = (*reload.config()).clone();
                config.permission.admins.clear();
                reload.replace(config).unwrap();
                ChatResponse::tool_calls(
                    "",
                    vec![ToolCall::new(
                        "c1",
                        "run_command",
                        json!({"command": command}),
                    )],
                )
            }
            _ => ChatResponse::text(json!(results).to_string()),
        })
    });
    let (engine, _host) = armed_engine(dir.path(), model, live).await;
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    let task = engine
        .create(
            &caller("admin", Role::Admin, "s"),
            CreateTask::agent("run things"),
        )
        .await
        .unwrap();
    wait_for(&mut events, "completion", |e| matches!(e, mai_engine::TaskEvent::Status { task_id, status: TaskStatus::Completed, .. } if *task_id == task.id)).await;
    let done = engine
        .get(&caller("x", Role::Admin, "s"), task.id)
        .await
        .unwrap();
    let results: Vec<Value> =
        serde_json::from_str(done.metadata.answer.as_deref().unwrap()).unwrap();
    assert_eq!(
        results[0]["success"], true,
        "ran as admin first: {}",
        results[0]
    );
    assert_eq!(results[1]["success"], false, "{}", results[1]);
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{}",
        results[1]
    );
    assert!(!marker.exists(), "the command never ran after the demotion");
}
