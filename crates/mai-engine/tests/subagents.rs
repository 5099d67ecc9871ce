//! Sub-agents (docs/design.md, "Sub-agents"): the allowed tool set, the subset check, the
//! execution-time guard, concurrent calls in call order, limits, truncation, cancellation, no
//! nesting and no persistence.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::*;
use mai_core::clock::SystemClock;
use mai_core::model::{ChatRequest, ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::task::TaskStatus;
use mai_core::tool::{
    Effect, Effects, ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use mai_engine::CreateTask;
use serde_json::{Value, json};

fn is_subagent(req: &ChatRequest) -> bool {
    req.messages[0]
        .content
        .starts_with("You are a focused helper")
}

fn last_tool_result(req: &ChatRequest) -> Option<Value> {
    req.messages
        .iter()
        .rev()
        .find(|m| m.role == MessageRole::Tool)
        .map(|m| serde_json::from_str(&m.content).unwrap())
}

fn calls(calls: &[(&str, &str, Value)]) -> ChatResponse {
    ChatResponse::tool_calls(
        "",
        calls
            .iter()
            .map(|(id, name, args)| ToolCall::new(*id, *name, args.clone()))
            .collect(),
    )
}

struct Counting(Arc<AtomicUsize>);

#[async_trait]
impl ToolHandler for Counting {
    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"success": true, "echo": args}))
    }
}

/// Tools: `lookup` (user), `send_message` (user, contacts people: excluded from sub-agents),
/// `call_weather` (admin, calls a plugin API: excluded), all counting their runs.
fn tools() -> (Arc<ToolRegistry>, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let registry = Arc::new(ToolRegistry::new());
    for (name, role, effects) in [
        ("lookup", Role::User, Effects::NONE),
        ("send_message", Role::User, Effect::ContactsPeople.into()),
        ("call_weather", Role::Admin, Effect::CallsPluginApis.into()),
    ] {
        registry.register(counting_tool(name, role, effects, &runs));
    }
    (registry, runs)
}

/// A tool that counts its runs in `runs`.
fn counting_tool(
    name: &str,
    role: Role,
    effects: Effects,
    runs: &Arc<AtomicUsize>,
) -> ToolDefinition {
    ToolDefinition::new(
        name,
        "test",
        json!({"type": "object"}),
        Visibility::Discoverable,
        role,
        Arc::new(Counting(runs.clone())),
    )
    .unwrap()
    .with_effects(effects)
}

async fn run_parent(
    model: Arc<RuleModel>,
    registry: Arc<ToolRegistry>,
    role: Role,
    config: mai_core::config::Config,
) -> (Harness, mai_core::task::TaskRecord) {
    let user = if role == Role::Admin { "admin" } else { "user" };
    let mut h = Harness::start_with(config, model, registry, Arc::new(SystemClock)).await;
    let task = h
        .engine
        .create(&caller(user, role, "s"), CreateTask::agent("parent"))
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Completed).await;
    let done = record(&h.engine, task.id).await;
    (h, done)
}

#[tokio::test]
async fn a_subagent_answers_with_its_own_tool_loop_and_nothing_of_it_is_persisted() {
    let (registry, runs) = tools();
    let model = RuleModel::new(|req| {
        if is_subagent(req) {
            let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "lookup",
                    "search_memory",
                    "fetch_history",
                    "query_person",
                    "search_users",
                    "get_frequency"
                ],
                "no ask_user, task tools, send_message, nesting or tools above the role"
            );
            return Ok(match last_tool_result(req) {
                None => calls(&[("l1", "lookup", json!({"q": "x"}))]),
                Some(_) => ChatResponse::text("found 7"),
            });
        }
        Ok(match last_tool_result(req) {
            None => calls(&[("s1", "ask_subagent", json!({"intent": "find x"}))]),
            Some(result) => ChatResponse::text(format!("sub said {}", result["answer"])),
        })
    });
    let (h, done) = run_parent(model, registry, Role::User, test_config()).await;
    assert_eq!(
        done.metadata.answer.as_deref(),
        Some("sub said \"found 7\"")
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let history = h
        .engine
        .history(&caller("user", Role::User, "s"), &done.id.to_string())
        .await
        .unwrap();
    let messages: Vec<&Value> = history.entries.iter().map(|e| &e.payload).collect();
    assert_eq!(
        messages.len(),
        5,
        "system, intent, call, result, answer — no sub-agent messages: {messages:?}"
    );
}

#[tokio::test]
async fn requested_tools_must_be_a_subset_and_disallowed_calls_never_reach_the_registry() {
    let (registry, runs) = tools();
    let model = RuleModel::new(|req| {
        if is_subagent(req) {
            // A sub-agent that tries tools it was not given.
            return Ok(match last_tool_result(req) {
                None => calls(&[
                    ("a", "send_message", json!({"text": "hi"})),
                    ("b", "ask_user", json!({"question": "?"})),
                    ("c", "ask_subagent", json!({"intent": "nest"})),
                ]),
                Some(_) => {
                    let results: Vec<String> = req
                        .messages
                        .iter()
                        .filter(|m| m.role == MessageRole::Tool)
                        .map(|m| m.content.clone())
                        .collect();
                    assert!(
                        results
                            .iter()
                            .all(|r| r.contains("not available to sub-agents")),
                        "{results:?}"
                    );
                    ChatResponse::text("could not")
                }
            });
        }
        let results: Vec<Value> = req
            .messages
            .iter()
            .filter(|m| m.role == MessageRole::Tool)
            .map(|m| serde_json::from_str(&m.content).unwrap())
            .collect();
        Ok(match results.len() {
            0 => calls(&[(
                "s1",
                "ask_subagent",
                json!({"intent": "x", "tools": ["lookup", "send_message"]}),
            )]),
            1 => {
                assert_eq!(results[0]["success"], false);
                assert!(
                    results[0]["error"]
                        .as_str()
                        .unwrap()
                        .contains("sub-agents cannot use send_message"),
                    "{}",
                    results[0]
                );
                calls(&[("s2", "ask_subagent", json!({"intent": "y"}))])
            }
            _ => ChatResponse::text(format!("second: {}", results[1]["answer"])),
        })
    });
    let (_h, done) = run_parent(model, registry, Role::User, test_config()).await;
    assert_eq!(
        done.metadata.answer.as_deref(),
        Some("second: \"could not\"")
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no disallowed tool ran");
}

#[tokio::test]
async fn calls_in_one_round_run_concurrently_and_results_keep_call_order() {
    let gate = Arc::new(tokio::sync::Notify::new());
    struct Slow(Arc<tokio::sync::Notify>);
    #[async_trait]
    impl ToolHandler for Slow {
        async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
            // Finishes only after `fast` ran: sequential execution would never get there.
            self.0.notified().await;
            Ok(json!({"success": true, "who": "slow"}))
        }
    }
    struct Fast(Arc<tokio::sync::Notify>);
    #[async_trait]
    impl ToolHandler for Fast {
        async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
            self.0.notify_one();
            Ok(json!({"success": true, "who": "fast"}))
        }
    }
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "slow",
            "t",
            json!({"type": "object"}),
            Visibility::Discoverable,
            Role::User,
            Arc::new(Slow(gate.clone())),
        )
        .unwrap(),
    );
    registry.register(
        ToolDefinition::new(
            "fast",
            "t",
            json!({"type": "object"}),
            Visibility::Discoverable,
            Role::User,
            Arc::new(Fast(gate)),
        )
        .unwrap(),
    );
    let model = RuleModel::new(|req| {
        if is_subagent(req) {
            return Ok(match last_tool_result(req) {
                None => calls(&[("1", "slow", json!({})), ("2", "fast", json!({}))]),
                Some(_) => {
                    let order: Vec<String> = req
                        .messages
                        .iter()
                        .filter(|m| m.role == MessageRole::Tool)
                        .map(|m| m.tool_call_id.clone().unwrap())
                        .collect();
                    ChatResponse::text(order.join(","))
                }
            });
        }
        Ok(match last_tool_result(req) {
            None => calls(&[("s", "ask_subagent", json!({"intent": "both"}))]),
            Some(result) => ChatResponse::text(result["answer"].as_str().unwrap()),
        })
    });
    let (_h, done) = run_parent(model, registry, Role::User, test_config()).await;
    assert_eq!(done.metadata.answer.as_deref(), Some("1,2"));
}

#[tokio::test]
async fn parallel_limit_rounds_limit_and_truncation() {
    let (registry, _runs) = tools();
    let model = RuleModel::new(|req| {
        if is_subagent(req) {
            let intent = req.messages[1].content.as_str();
            return Ok(match intent {
                // A new question each round: the loop guard (its own tests) stays quiet.
                "loop" => {
                    let round = req.messages.len();
                    calls(&[(&format!("l{round}"), "lookup", json!({"q": round}))])
                }
                "long" => ChatResponse::text("x".repeat(5000)),
                other => ChatResponse::text(format!("answer to {other}")),
            });
        }
        let results: Vec<Value> = req
            .messages
            .iter()
            .filter(|m| m.role == MessageRole::Tool)
            .map(|m| serde_json::from_str(&m.content).unwrap())
            .collect();
        Ok(match results.len() {
            0 => calls(&[(
                "p1",
                "ask_subagents",
                json!({"intents": ["a", "b", "c", "d"]}),
            )]),
            1 => {
                assert!(
                    results[0]["error"]
                        .as_str()
                        .unwrap()
                        .contains("at most 3 sub-agents"),
                    "{}",
                    results[0]
                );
                calls(&[(
                    "p2",
                    "ask_subagents",
                    json!({"intents": ["a", "loop", "long"]}),
                )])
            }
            _ => {
                let list = results[1]["results"].as_array().unwrap();
                assert_eq!(list[0]["intent"], "a");
                assert_eq!(list[0]["answer"], "answer to a");
                assert!(
                    list[1]["answer"]
                        .as_str()
                        .unwrap()
                        .contains("used all 10 rounds"),
                    "{}",
                    list[1]
                );
                let long = list[2]["answer"].as_str().unwrap();
                assert!(
                    long.contains("characters cut") && long.chars().count() < 4200,
                    "cut at max_result_chars"
                );
                ChatResponse::text("checked")
            }
        })
    });
    let (_h, done) = run_parent(model.clone(), registry, Role::User, test_config()).await;
    assert_eq!(done.metadata.answer.as_deref(), Some("checked"));
    let loop_calls = model
        .agent_requests()
        .iter()
        .filter(|r| is_subagent(r) && r.messages[1].content == "loop")
        .count();
    assert_eq!(loop_calls, 10, "max_rounds of the sub-agent");
}

#[tokio::test]
async fn cancelling_the_parent_stops_its_subagents() {
    let reached = Arc::new(tokio::sync::Notify::new());
    struct Wait(Arc<tokio::sync::Notify>);
    #[async_trait]
    impl ToolHandler for Wait {
        async fn call(&self, ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
            self.0.notify_one();
            ctx.cancel_token().cancelled().await;
            Ok(json!({"success": true}))
        }
    }
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "wait",
            "t",
            json!({"type": "object"}),
            Visibility::Discoverable,
            Role::User,
            Arc::new(Wait(reached.clone())),
        )
        .unwrap(),
    );
    let model = RuleModel::new(|req| {
        if is_subagent(req) {
            return Ok(calls(&[("w", "wait", json!({}))]));
        }
        Ok(calls(&[("s", "ask_subagent", json!({"intent": "wait"}))]))
    });
    let mut h = Harness::start_with(
        test_config(),
        model.clone(),
        registry,
        Arc::new(SystemClock),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("parent"))
        .await
        .unwrap();
    reached.notified().await;
    let before = model.agent_calls.load(Ordering::SeqCst);
    h.engine.cancel(&alice, &task.id.short()).await.unwrap();
    h.wait_status(task.id, TaskStatus::Cancelled).await;
    assert_eq!(
        model.agent_calls.load(Ordering::SeqCst),
        before,
        "no sub-agent round after the cancel"
    );
}

/// The names sub-agents were refused by before tools carried effects: the tag filter must refuse
/// exactly these (and every `call_*` plugin API tool), no more and no fewer.
const REFUSED_BY_NAME_BEFORE: [&str; 9] = [
    "ask_user",
    "send_message",
    "list_my_tasks",
    "create_subtask",
    "inject_task",
    "cancel_task",
    "ask_subagent",
    "ask_subagents",
    "run_command",
];

#[tokio::test]
async fn over_the_real_registry_the_effect_filter_refuses_exactly_what_the_name_list_did() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with_every_tool(
        dir.path(),
        test_config(),
        RuleModel::new(|_| Ok(ChatResponse::text("unused"))),
        Arc::new(host_with_weather_api()),
    )
    .await;
    let registry = engine.registry();
    let names: Vec<String> = registry.all().iter().map(|t| t.name().to_owned()).collect();
    for expected in REFUSED_BY_NAME_BEFORE.iter().chain(&[
        "call_weather_today",
        "read",
        "write",
        "search_memory",
    ]) {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing: {names:?}"
        );
    }
    for tool in registry.all() {
        let name = tool.name();
        let refused_before = REFUSED_BY_NAME_BEFORE.contains(&name) || name.starts_with("call_");
        assert_eq!(
            mai_engine::open_to_subagents(&tool),
            !refused_before,
            "{name} ({:?})",
            tool.effects()
        );
    }
}

#[test]
fn an_external_tool_is_filtered_by_its_effects_not_its_name() {
    let runs = Arc::default();
    let tool = |name: &str, effects: Effects| counting_tool(name, Role::User, effects, &runs);
    let open = mai_engine::open_to_subagents;
    // An MCP tool that messages people is refused although no list names it…
    let notify = Effects::of(&[Effect::CallsMcp, Effect::ContactsPeople]);
    assert!(!open(&tool("mcp_chat_notify", notify)));
    // …one that only calls its server is open, whatever it is called.
    assert!(open(&tool("mcp_search_query", Effect::CallsMcp.into())));
    assert!(open(&tool("call_lookalike", Effect::CallsMcp.into())));
    assert!(!open(&tool("plain_name", Effect::CallsPluginApis.into())));
}
