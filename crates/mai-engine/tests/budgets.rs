//! The daily budgets of `[limits.budgets]` and the loop guard: a budget refuses new work at every
//! door (a chat command, a planner tool, the facade the HTTP API calls, `create_subtask`,
//! `ask_subagent`) with a message naming the budget, the figure and when it resets, and
//! creates nothing; a task that crosses its budget stops at a round boundary with its
//! checkpoint written, says so in its chat, and resumes when the budget resets or is raised
//! (hot reload). The loop guard warns, then fails, a model that repeats one call exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::*;
use mai_core::config::{Budget, Config};
use mai_core::model::{ChatRequest, ChatResponse, MessageRole, ToolCall, Usage};
use mai_core::role::Role;
use mai_core::store::TaskFilter;
use mai_core::task::{PauseCause, TaskRecord, TaskStatus};
use mai_core::tool::{
    ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use mai_engine::{
    CreateTask, Engine, EngineError, call_planner_tool, handle_command, planner_registry,
};
use serde_json::{Value, json};

fn tool_results(req: &ChatRequest) -> Vec<String> {
    req.messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .map(|m| m.content.clone())
        .collect()
}

/// A reply that reports `tokens` prompt tokens and 10 completion tokens.
fn costing(mut response: ChatResponse, tokens: u64) -> ChatResponse {
    response.usage = Some(Usage {
        prompt_tokens: tokens,
        completion_tokens: 10,
        total_tokens: tokens + 10,
        cached_tokens: 0,
    });
    response
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

struct Counter(Arc<AtomicUsize>);

#[async_trait]
impl ToolHandler for Counter {
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(json!({"success": true, "count": n}))
    }
}

fn counter_registry() -> (Arc<ToolRegistry>, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "count",
            "Count one.",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
            Visibility::Discoverable,
            Role::User,
            Arc::new(Counter(count.clone())),
        )
        .unwrap(),
    );
    (registry, count)
}

fn budget_config(user: Budget) -> Config {
    let mut config = test_config();
    config.task.timezone = Some("UTC".into());
    config.limits.budgets.user = user;
    config
}

async fn made_tasks(engine: &Engine) -> Vec<TaskRecord> {
    let admin = caller("admin", Role::Admin, "s");
    let mut tasks = engine.list(&admin, TaskFilter::default()).await.unwrap();
    tasks.retain(|task| !task.metadata.is_reply);
    tasks
}

#[tokio::test]
async fn a_task_budget_refuses_the_next_task_at_every_door_and_creates_nothing() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("done")));
    let config = budget_config(Budget {
        tasks_per_day: Some(1),
        ..Budget::default()
    });
    let h = Harness::start(config, model).await;
    let user = caller("user", Role::User, "s");
    let mut first = CreateTask::agent("the one task of today");
    first.title = Some("first".into());
    h.engine.create(&user, first).await.unwrap();

    // The facade (what the HTTP API and the CLI call).
    let refused = h
        .engine
        .create(&user, CreateTask::agent("a second one"))
        .await
        .unwrap_err();
    let EngineError::LimitReached(message) = &refused else {
        panic!("not a limit: {refused}");
    };
    assert!(
        message.contains("[limits.budgets] user.tasks_per_day = 1")
            && message.contains("qq:user created 1 task(s) today")
            && message.contains("resets at")
            && message.contains("(UTC)")
            && message.contains("an operator can raise it under [limits.budgets]"),
        "{message}"
    );
    // A chat command.
    let reply = handle_command(&h.engine, &user, "/mt create a third one")
        .await
        .unwrap();
    assert!(reply.contains("user.tasks_per_day = 1"), "{reply}");
    // A planner tool for the same speaker: the planner is no exemption.
    let registry = planner_registry(&h.engine, None).unwrap();
    let outcome = call_planner_tool(
        &h.engine,
        &registry,
        "subagent_create",
        json!({"intent": "a fourth", "stream_id": "s", "chat_id": "s",
               "platform": "qq", "user_id": "user"}),
    )
    .await;
    let error = outcome.error_message().unwrap_or_default().to_owned();
    assert!(error.contains("user.tasks_per_day = 1"), "{error}");
    assert_eq!(made_tasks(&h.engine).await.len(), 1, "nothing else created");

    // Someone else is not counted against this person's budget; a hot reload that raises it
    // applies at once.
    let carol = caller("carol", Role::User, "s");
    let mut raised = budget_config(Budget {
        tasks_per_day: Some(2),
        ..Budget::default()
    });
    raised.permission.users.push("qq:carol".into());
    h.engine
        .create(&carol, CreateTask::agent("carol's"))
        .await
        .unwrap();
    h.engine.reload_config(raised).await.unwrap();
    h.engine
        .create(&user, CreateTask::agent("allowed now"))
        .await
        .unwrap();
}

#[tokio::test]
async fn create_subtask_and_ask_subagent_are_refused_once_the_tokens_are_spent() {
    let model = RuleModel::new(|req| {
        Ok(match tool_results(req).len() {
            0 => costing(
                calls(&[
                    ("c1", "create_subtask", json!({"intent": "more work"})),
                    ("c2", "ask_subagent", json!({"intent": "help me"})),
                ]),
                2000,
            ),
            _ => costing(ChatResponse::text("done"), 1),
        })
    });
    let mut config = budget_config(Budget {
        tokens_per_day: Some(1000),
        ..Budget::default()
    });
    config.limits.budgets.on_exceeded = mai_core::config::BudgetAction::Fail;
    let mut h = Harness::start(config, model.clone()).await;
    let mut request = CreateTask::agent("spend it all");
    request.title = Some("spender".into());
    let task = h
        .engine
        .create(&caller("user", Role::User, "s"), request)
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Failed).await;
    // The round that crossed the budget: both doors refused, saying which budget.
    let results: Vec<String> = model
        .requests
        .lock()
        .unwrap()
        .iter()
        .flat_map(tool_results)
        .collect();
    assert_eq!(
        results.len(),
        0,
        "no later model call: the task stopped first"
    );
    let history = h
        .engine
        .history(&caller("user", Role::User, "s"), &task.id.to_string())
        .await
        .unwrap();
    let texts: Vec<String> = history
        .entries
        .iter()
        .filter(|e| e.payload["role"] == "tool")
        .map(|e| e.payload["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(texts.len(), 2, "both results are checkpointed: {texts:?}");
    for text in &texts {
        assert!(
            text.contains("[limits.budgets] user.tokens_per_day = 1000")
                && text.contains("used 2010 tokens today"),
            "{text}"
        );
    }
    assert_eq!(made_tasks(&h.engine).await.len(), 1, "no sub-task");
    let failed = record(&h.engine, task.id).await;
    assert!(
        failed
            .metadata
            .error
            .unwrap()
            .contains("user.tokens_per_day = 1000"),
        "on_exceeded = fail fails the task with the budget as its error"
    );
}

/// A task that counts (a new argument each round) until it has 3 results, each call costing
/// 600 tokens.
fn counting_model() -> Arc<RuleModel> {
    RuleModel::new(|req| {
        let done = tool_results(req).len();
        Ok(if done < 3 {
            costing(
                calls(&[(&format!("c{done}"), "count", json!({"n": done}))]),
                590,
            )
        } else {
            costing(ChatResponse::text("counted to 3"), 590)
        })
    })
}

/// Starts the counting task and waits until its budget pauses it.
async fn paused_by_budget(h: &mut Harness) -> TaskRecord {
    let mut request = CreateTask::agent("count to three");
    request.title = Some("counter".into());
    let task = h
        .engine
        .create(&caller("user", Role::User, "s"), request)
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Paused).await;
    record(&h.engine, task.id).await
}

#[tokio::test]
async fn a_task_crossing_its_budget_pauses_at_a_round_boundary_and_resumes_when_it_resets() {
    let (registry, count) = counter_registry();
    let clock = ManualClock::at("2026-12-04T10:00:00Z");
    let config = budget_config(Budget {
        tokens_per_day: Some(1000),
        ..Budget::default()
    });
    let mut h = Harness::start_with(config, counting_model(), registry, clock.clone()).await;
    let paused = paused_by_budget(&mut h).await;

    // Two rounds ran (600 + 600 tokens); the third stopped before its model call, with the
    // second round's result checkpointed.
    assert_eq!(count.load(Ordering::SeqCst), 2);
    assert_eq!(paused.metadata.pause_cause, Some(PauseCause::Budget));
    assert_eq!(paused.metadata.rounds, 2);
    let history = h
        .engine
        .history(&caller("user", Role::User, "s"), &paused.id.to_string())
        .await
        .unwrap();
    let results = history
        .entries
        .iter()
        .filter(|e| e.payload["role"] == "tool")
        .count();
    assert_eq!(results, 2, "the checkpoint is intact");
    let reason = &paused.status_log.last().unwrap().reason;
    assert!(reason.contains("user.tokens_per_day = 1000"), "{reason}");
    let notice = h.host.sent_to("s").join("\n");
    assert!(
        notice.contains(
            "is paused: [limits.budgets] user.tokens_per_day = 1000: qq:user used 1200 tokens today"
        ) && notice.contains("resets at 2026-12-05 00:00 (UTC)"),
        "{notice}"
    );
    let usage = h.engine.task_usage(paused.id).await.unwrap();
    assert_eq!((usage.prompt_tokens, usage.calls), (1180, 2));

    // Midnight in [task] timezone: the budget resets and the task continues where it stopped.
    clock.advance(chrono::Duration::hours(14));
    h.engine.clock_changed();
    h.wait_status(paused.id, TaskStatus::Completed).await;
    assert_eq!(count.load(Ordering::SeqCst), 3, "no call ran twice");
    let done = record(&h.engine, paused.id).await;
    assert_eq!(done.metadata.answer.as_deref(), Some("counted to 3"));
}

#[tokio::test]
async fn a_paused_task_resumes_at_once_when_an_admin_raises_the_budget() {
    let (registry, _count) = counter_registry();
    let clock = ManualClock::at("2026-12-04T10:00:00Z");
    let config = budget_config(Budget {
        tokens_per_day: Some(1000),
        ..Budget::default()
    });
    let mut h = Harness::start_with(config, counting_model(), registry, clock.clone()).await;
    let paused = paused_by_budget(&mut h).await;
    let raised = budget_config(Budget {
        tokens_per_day: Some(100_000),
        ..Budget::default()
    });
    h.engine.reload_config(raised).await.unwrap();
    h.wait_status(paused.id, TaskStatus::Completed).await;
}

#[tokio::test]
async fn usage_in_chat_shows_the_speakers_figures_and_limits_and_admins_may_name_someone() {
    let model = RuleModel::new(|_| Ok(costing(ChatResponse::text("done"), 90)));
    let config = budget_config(Budget {
        tokens_per_day: Some(5000),
        ..Budget::default()
    });
    let mut h = Harness::start(config, model).await;
    let user = caller("user", Role::User, "s");
    let mut request = CreateTask::agent("hello");
    request.title = Some("hello".into());
    let task = h.engine.create(&user, request).await.unwrap();
    h.wait_status(task.id, TaskStatus::Completed).await;
    let mine = handle_command(&h.engine, &user, "/mt usage").await.unwrap();
    assert!(
        mine.contains("qq:user (user) today: 1 task(s), 100 tokens")
            && mine.contains("5000 tokens"),
        "{mine}"
    );
    let status = handle_command(&h.engine, &user, &format!("/mt status {}", task.id.short()))
        .await
        .unwrap();
    assert!(status.contains("usage: 100 tokens"), "{status}");
    let nosy = handle_command(&h.engine, &user, "/mt usage admin")
        .await
        .unwrap();
    assert!(nosy.contains("only admins"), "{nosy}");
    let admin = caller("admin", Role::Admin, "s");
    let named = handle_command(&h.engine, &admin, "/mt usage user")
        .await
        .unwrap();
    assert!(named.contains("qq:user (user) today: 1 task(s)"), "{named}");
}

#[tokio::test]
async fn the_same_call_with_the_same_arguments_is_warned_then_fails_the_task() {
    let (registry, count) = counter_registry();
    // The same arguments every time (key order and spacing are the loop guard's unit test).
    let model = RuleModel::new(|req| {
        let n = tool_results(req).len();
        Ok(calls(&[(
            &format!("c{n}"),
            "count",
            json!({"n": 7, "m": 1}),
        )]))
    });
    let mut h = Harness::start_with(
        test_config(),
        model.clone(),
        registry,
        Arc::new(mai_core::clock::SystemClock),
    )
    .await;
    let task = h
        .engine
        .create(&caller("user", Role::User, "s"), CreateTask::agent("loop"))
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Failed).await;
    assert_eq!(
        count.load(Ordering::SeqCst),
        2,
        "the third and fourth did not run"
    );
    let last = model.agent_requests().pop().unwrap();
    let warnings = tool_results(&last);
    assert!(
        warnings[2].contains("call number 3 of `count` with exactly these arguments"),
        "{warnings:?}"
    );
    let failed = record(&h.engine, task.id).await;
    let error = failed.metadata.error.unwrap();
    assert!(
        error.contains("called `count` 5 times with identical arguments")
            && error.contains("repeat_fail_after = 5"),
        "{error}"
    );
}

#[tokio::test]
async fn calls_with_different_arguments_are_no_repeats() {
    let (registry, count) = counter_registry();
    let model = RuleModel::new(|req| {
        let n = tool_results(req).len();
        Ok(if n < 7 {
            calls(&[(&format!("c{n}"), "count", json!({"n": n}))])
        } else {
            ChatResponse::text("counted")
        })
    });
    let mut h = Harness::start_with(
        test_config(),
        model,
        registry,
        Arc::new(mai_core::clock::SystemClock),
    )
    .await;
    let task = h
        .engine
        .create(&caller("user", Role::User, "s"), CreateTask::agent("count"))
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Completed).await;
    assert_eq!(count.load(Ordering::SeqCst), 7);
}
