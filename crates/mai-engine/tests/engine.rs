//! The engine end to end over a real SQLite file: the agent loop with scripted tool calls, the
//! reply path, ask_user, cancellation, limits and recovery.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::*;
use mai_core::ids::StreamId;
use mai_core::model::{ChatRequest, ChatResponse, MessageRole, ModelError, ToolCall};
use mai_core::role::Role;
use mai_core::task::{TaskLevel, TaskRecord, TaskStatus, Trigger};
use mai_core::tool::{
    ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use mai_engine::TaskEvent;
use mai_engine::{Caller, CreateTask};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The number of tool results already in the conversation.
fn tool_results(req: &ChatRequest) -> usize {
    req.messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .count()
}

fn call(id: &str, name: &str, args: Value) -> ChatResponse {
    ChatResponse::tool_calls("", vec![ToolCall::new(id, name, args)])
}

/// A tool that counts its runs.
struct Counter(Arc<AtomicUsize>);

#[async_trait]
impl ToolHandler for Counter {
    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(json!({"success": true, "count": n, "echo": args}))
    }
}

fn counter_registry(min_role: Role) -> (Arc<ToolRegistry>, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "count",
            "Count one.",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
            Visibility::Discoverable,
            min_role,
            Arc::new(Counter(count.clone())),
        )
        .unwrap(),
    );
    (registry, count)
}

#[tokio::test]
async fn scripted_tool_rounds_complete_and_the_answer_is_delivered() {
    let (registry, count) = counter_registry(Role::User);
    let model = RuleModel::new(|req| {
        Ok(match tool_results(req) {
            0 => call("c1", "count", json!({"n": 1})),
            1 => call("c2", "nope_tool", json!({})),
            2 => call("c3", "count", json!({"n": "bad"})),
            _ => ChatResponse::text("counted once; 42"),
        })
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
        .create(
            &caller("user", Role::User, "s1"),
            CreateTask::agent("count things"),
        )
        .await
        .unwrap();
    assert_eq!(task.title, "A generated title");
    h.wait_status(task.id, TaskStatus::Completed).await;
    let done = record(&h.engine, task.id).await;
    assert_eq!(done.metadata.answer.as_deref(), Some("counted once; 42"));
    assert_eq!(done.metadata.rounds, 4);
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "bad args and unknown tools never run a handler"
    );

    // The model saw the refusals as tool results and went on.
    let last = model.agent_requests().last().unwrap().clone();
    let results: Vec<&str> = last
        .messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert!(
        results[1].contains("unknown tool `nope_tool`"),
        "{}",
        results[1]
    );
    assert!(
        results[2].contains("field `n`: expected integer"),
        "{}",
        results[2]
    );
    // Every round presented the role's tools (ask_user essential first).
    let names: Vec<&str> = last.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names[0], "ask_user");
    assert!(names.contains(&"count"));

    // History: system + intent, then per round the reply and its results, in order.
    let roles = message_roles(&h.engine, task.id).await;
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );

    // The answer reaches the stream through an instant reply task.
    h.wait_for("reply sent", |e| matches!(e, TaskEvent::Sent { .. }))
        .await;
    assert_eq!(h.host.sent_to("s1"), ["counted once; 42"]);
}

#[tokio::test]
async fn a_refused_guest_hears_who_they_are_and_the_permission_entry_that_would_admit_them() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("ok")));
    let h = Harness::start(test_config(), model).await;
    let err = h
        .engine
        .create(&caller("123", Role::Guest, "s"), CreateTask::agent("x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "qq:123 is a guest here; guests cannot create tasks — add \"qq:123\" to \
             [permission] users to allow it"
        ),
        "{err}"
    );
    let in_group = Caller::person(
        mai_core::ids::PersonId::new("qq", "123").unwrap(),
        Role::Guest,
        StreamId::new("qq:group:456").unwrap(),
        Some("456".into()),
    );
    let err = h
        .engine
        .create(&in_group, CreateTask::agent("x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"qq:group:456\" to user_groups"), "{err}");
}

#[tokio::test]
async fn not_found_speaks_to_the_caller_and_a_short_prefix_asks_for_four_characters() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("ok")));
    let h = Harness::start(test_config(), model).await;
    let admin = caller("admin", Role::Admin, "s");
    let user = caller("alice", Role::User, "s");
    let err = h
        .engine
        .resolve(&admin, "deadbeef")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("no task matches `deadbeef`"), "{err}");
    let err = h
        .engine
        .resolve(&user, "deadbeef")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("no task of yours matches `deadbeef`"),
        "{err}"
    );
    for who in [&admin, &user] {
        let err = h.engine.resolve(who, "ab").await.unwrap_err().to_string();
        assert!(err.contains("give at least 4 characters"), "{err}");
    }
}

#[tokio::test]
async fn guests_cannot_create_and_users_cannot_touch_others_tasks() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("ok")));
    let h = Harness::start(test_config(), model).await;
    let err = h
        .engine
        .create(&caller("guest", Role::Guest, "s"), CreateTask::agent("x"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("guests cannot create tasks"),
        "{err}"
    );
    let mut request = CreateTask::agent("later");
    request.trigger = Trigger::Delay { seconds: 3600 };
    request.title = Some("later".into());
    let task = h
        .engine
        .create(&caller("alice", Role::User, "s"), request)
        .await
        .unwrap();
    let bob = caller("bob", Role::User, "s");
    let err = h.engine.cancel(&bob, &task.id.short()).await.unwrap_err();
    assert!(
        err.to_string().contains("no task of yours matches"),
        "{err}"
    );
    let err = h
        .engine
        .resolve(&caller("guest", Role::Guest, "s"), &task.id.to_string())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no task of yours"), "{err}");
    // The owner and an admin can.
    let cancelled = h
        .engine
        .cancel(&caller("alice", Role::User, "s"), "later")
        .await
        .unwrap();
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    let err = h
        .engine
        .create(
            &caller("alice", Role::User, "s"),
            CreateTask {
                trigger: Trigger::Cron {
                    expr: "61 * * * *".into(),
                    timezone: None,
                },
                ..CreateTask::agent("bad cron")
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("invalid cron expression `61 * * * *`"),
        "{err}"
    );
    let never = CreateTask {
        trigger: Trigger::Delay { seconds: u64::MAX },
        ..CreateTask::agent("never")
    };
    let err = h
        .engine
        .create(&caller("alice", Role::User, "s"), never)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("too far in the future"), "{err}");
}

#[tokio::test]
async fn ask_user_waits_without_a_slot_and_the_owners_reply_resumes_it() {
    let model = RuleModel::new(|req| {
        let asked = req
            .messages
            .iter()
            .any(|m| m.tool_calls.iter().any(|c| c.name == "ask_user"));
        if req.messages[1].content == "quick" {
            return Ok(ChatResponse::text("quick done"));
        }
        if !asked {
            return Ok(call("q1", "ask_user", json!({"question": "Which disk?"})));
        }
        let answer = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role == MessageRole::Tool)
            .unwrap();
        Ok(ChatResponse::text(format!("checked {}", answer.content)))
    });
    let mut config = test_config();
    config.task.max_concurrent_tasks = 1;
    let mut h = Harness::start(config, model).await;
    let alice = caller("user", Role::User, "s1");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("check disk"))
        .await
        .unwrap();
    // The question is announced (event, planner note) once it is sent and marked sent.
    h.wait_for("the question", |e| matches!(e, TaskEvent::Question { .. }))
        .await;
    assert_eq!(
        record(&h.engine, task.id).await.status,
        TaskStatus::WaitingInput
    );
    assert_eq!(h.host.sent_to("s1"), ["Which disk?"]);
    let notes = h.host.notes.lock().unwrap().clone();
    assert!(
        notes
            .iter()
            .any(|(s, n)| s == "s1" && n.contains(&task.id.short()) && n.contains("Which disk?")),
        "{notes:?}"
    );

    // The waiting task holds no slot: another task runs with max_concurrent_tasks = 1.
    let quick = h
        .engine
        .create(&alice, CreateTask::agent("quick"))
        .await
        .unwrap();
    h.wait_status(quick.id, TaskStatus::Completed).await;

    // Replies from another person or another stream are ignored.
    let owner = alice.requester.clone().unwrap();
    let stranger = mai_core::ids::PersonId::new("qq", "bob").unwrap();
    let s1 = mai_core::ids::StreamId::new("s1").unwrap();
    let s2 = mai_core::ids::StreamId::new("s2").unwrap();
    assert_eq!(
        h.engine
            .handle_user_reply(&stranger, &s1, "sda")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        h.engine
            .handle_user_reply(&owner, &s2, "sda")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        record(&h.engine, task.id).await.status,
        TaskStatus::WaitingInput
    );

    assert_eq!(
        h.engine
            .handle_user_reply(&owner, &s1, "/dev/sdb")
            .await
            .unwrap(),
        Some(task.id)
    );
    assert_eq!(
        h.engine
            .handle_user_reply(&owner, &s1, "again")
            .await
            .unwrap(),
        None,
        "one reply wakes one task"
    );
    h.wait_status(task.id, TaskStatus::Completed).await;
    let done = record(&h.engine, task.id).await;
    assert!(done.metadata.answer.unwrap().contains("/dev/sdb"));
}

#[tokio::test]
async fn an_unanswered_question_times_out_on_the_test_clock() {
    let model = RuleModel::new(|req| {
        let last = req.messages.last().unwrap();
        if last.role == MessageRole::Tool {
            return Ok(ChatResponse::text(format!("gave up: {}", last.content)));
        }
        Ok(call("q1", "ask_user", json!({"question": "Proceed?"})))
    });
    let clock = ManualClock::new();
    let mut h = Harness::start_with(
        test_config(),
        model,
        Arc::new(ToolRegistry::new()),
        clock.clone(),
    )
    .await;
    let task = h
        .engine
        .create(
            &caller("user", Role::User, "s1"),
            CreateTask::agent("needs ok"),
        )
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::WaitingInput).await;
    clock.advance(chrono::Duration::minutes(9));
    h.engine.clock_changed();
    clock.advance(chrono::Duration::minutes(2));
    h.engine.clock_changed();
    h.wait_status(task.id, TaskStatus::Completed).await;
    let answer = record(&h.engine, task.id).await.metadata.answer.unwrap();
    assert!(answer.contains("timed_out"), "{answer}");
}

#[tokio::test]
async fn max_rounds_ends_with_an_honest_answer_without_tools() {
    let (registry, count) = counter_registry(Role::User);
    let model = RuleModel::new(|req| {
        if req.tools.is_empty() {
            return Ok(ChatResponse::text("stopped: ran out of rounds"));
        }
        Ok(call(&format!("c{}", tool_results(req)), "count", json!({})))
    });
    let mut config = test_config();
    config.task.max_rounds = 3;
    // The same call every round on purpose: the loop guard has its own tests.
    config.task.repeat_warn_after = 0;
    config.task.repeat_fail_after = 0;
    let mut h = Harness::start_with(
        config,
        model.clone(),
        registry,
        Arc::new(mai_core::clock::SystemClock),
    )
    .await;
    let task = h
        .engine
        .create(
            &caller("user", Role::User, "s"),
            CreateTask::agent("loop forever"),
        )
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Completed).await;
    assert_eq!(count.load(Ordering::SeqCst), 3);
    let done = record(&h.engine, task.id).await;
    assert_eq!(
        done.metadata.answer.as_deref(),
        Some("stopped: ran out of rounds")
    );
    let last = model.agent_requests().last().unwrap().clone();
    assert!(last.tools.is_empty(), "the last round offers no tools");
}

#[tokio::test]
async fn a_burst_of_1000_tasks_runs_each_exactly_once() {
    let runs = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        String,
        usize,
    >::new()));
    let seen = runs.clone();
    let model = RuleModel::new(move |req| {
        *seen
            .lock()
            .unwrap()
            .entry(req.messages[1].content.clone())
            .or_default() += 1;
        Ok(ChatResponse::text("done"))
    });
    let mut config = test_config();
    config.task.max_concurrent_tasks = 2000;
    // A burst, not a flood to refuse: the caps of [limits] have their own tests, and whether
    // the first tasks finish before the tenth is created is a race this test is not about.
    config.limits.max_active_per_requester = u32::MAX;
    config.limits.max_active_per_stream = u32::MAX;
    let mut h = Harness::start(config, model).await;
    let alice = caller("user", Role::User, "s");
    let mut ids = Vec::new();
    for i in 0..1000 {
        let mut request = CreateTask::agent(format!("job {i}"));
        request.title = Some(format!("job {i}"));
        ids.push(h.engine.create(&alice, request).await.unwrap().id);
    }
    // Events are only a wake-up here (a burst may overflow the event buffer); the store and the
    // engine's own figures are the truth.
    loop {
        let idle = {
            let figures = h.engine.load_figures();
            figures.running == 0 && figures.queued == 0
        };
        if idle && runs.lock().unwrap().len() == 1000 {
            break;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(20), h.events.recv())
            .await
            .expect("the burst stalled");
    }
    let done = h
        .engine
        .list(
            &alice,
            mai_core::store::TaskFilter {
                statuses: vec![TaskStatus::Completed],
                level: Some(TaskLevel::Agent),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(done.len(), 1000);
    assert!(ids.iter().all(|id| done.iter().any(|t| t.id == *id)));
    let runs = runs.lock().unwrap();
    assert_eq!(runs.len(), 1000);
    assert!(
        runs.values().all(|&n| n == 1),
        "some task ran twice: {:?}",
        runs.iter().filter(|(_, n)| **n != 1).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn cancelling_a_running_task_stops_it_cooperatively() {
    let gate = Arc::new(tokio::sync::Notify::new());
    struct Blocking(Arc<tokio::sync::Notify>);
    #[async_trait]
    impl ToolHandler for Blocking {
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
            "Wait.",
            json!({"type": "object"}),
            Visibility::Discoverable,
            Role::User,
            Arc::new(Blocking(gate.clone())),
        )
        .unwrap(),
    );
    let model = RuleModel::new(|_| Ok(call("w", "wait", json!({}))));
    let mut h = Harness::start_with(
        test_config(),
        model,
        registry,
        Arc::new(mai_core::clock::SystemClock),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("block"))
        .await
        .unwrap();
    gate.notified().await;
    h.engine.cancel(&alice, &task.id.short()).await.unwrap();
    h.wait_status(task.id, TaskStatus::Cancelled).await;
    let log = record(&h.engine, task.id).await.status_log;
    assert_eq!(log.last().unwrap().actor, "qq:user");
}

#[tokio::test]
async fn send_failures_are_retried_and_exhausted_retries_fail_the_reply() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("the answer")));
    let mut h = Harness::start(test_config(), model).await;
    h.host.failing_sends.store(2, Ordering::SeqCst);
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("a"))
        .await
        .unwrap();
    h.wait_for("sent", |e| matches!(e, TaskEvent::Sent { .. }))
        .await;
    assert_eq!(h.host.sent_to("s"), ["the answer"]);
    let reply = mai_engine::reply_task_id(&record(&h.engine, task.id).await);
    h.wait_status(reply, TaskStatus::Completed).await;

    h.host.rejecting_sends.store(10, Ordering::SeqCst);
    let task = h
        .engine
        .create(&alice, CreateTask::agent("b"))
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Completed).await;
    let reply = mai_engine::reply_task_id(&record(&h.engine, task.id).await);
    h.wait_status(reply, TaskStatus::Failed).await;
    let failed = record(&h.engine, reply).await;
    assert!(
        failed
            .metadata
            .error
            .unwrap()
            .contains("did not deliver it: muted"),
        "reported failure without error counts"
    );
}

/// `[send] max_retries` is the number of retries: one send plus that many, then the reply task
/// fails naming the attempts and the channel's error, and nothing else is sent for it.
#[tokio::test]
async fn a_failing_channel_gets_exactly_max_retries_retries_then_an_honest_failure() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("the answer")));
    let mut config = test_config();
    config.send.max_retries = 2;
    let mut h = Harness::start(config, model).await;
    h.host.failing_sends.store(100, Ordering::SeqCst);
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("a"))
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Completed).await;
    let reply = mai_engine::reply_task_id(&record(&h.engine, task.id).await);
    h.wait_status(reply, TaskStatus::Failed).await;
    assert_eq!(
        100 - h.host.failing_sends.load(Ordering::SeqCst),
        3,
        "one send and two retries"
    );
    let error = record(&h.engine, reply).await.metadata.error.unwrap();
    assert!(
        error.contains("after 3 attempts") && error.contains("connection reset"),
        "{error}"
    );
    assert!(h.host.sent_to("s").is_empty());
}

#[tokio::test]
async fn polish_failure_sends_the_original_and_success_sends_the_polished_text() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("raw machine output")));
    let mut config = test_config();
    config.polish.enabled = true;
    let mut h = Harness::start(config, model.clone()).await;
    let alice = caller("user", Role::User, "s");
    h.engine
        .create(&alice, CreateTask::agent("one"))
        .await
        .unwrap();
    h.wait_for("sent", |e| matches!(e, TaskEvent::Sent { .. }))
        .await;
    model.polish_fails.store(true, Ordering::SeqCst);
    h.engine
        .create(&alice, CreateTask::agent("two"))
        .await
        .unwrap();
    h.wait_for("sent", |e| matches!(e, TaskEvent::Sent { .. }))
        .await;
    assert_eq!(h.host.sent_to("s"), ["✨ polished", "raw machine output"]);
}

/// Answers agent calls with a text and holds every polish until released.
struct HeldPolish {
    polishing: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl mai_core::model::ChatModel for HeldPolish {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        if req.purpose == mai_core::model::ModelPurpose::Replyer {
            self.polishing.notify_one();
            self.release.notified().await;
            return Ok(ChatResponse::text("✨ polished"));
        }
        Ok(ChatResponse::text("the answer"))
    }
}

#[tokio::test]
async fn an_answer_is_polished_before_its_task_completes_and_a_cancel_meanwhile_sends_nothing() {
    let polishing = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let model = Arc::new(HeldPolish {
        polishing: polishing.clone(),
        release: release.clone(),
    });
    let mut config = test_config();
    config.polish.enabled = true;
    let mut h = Harness::start(config, model).await;
    let alice = caller("user", Role::User, "s");
    let request = CreateTask {
        title: Some("held".into()),
        ..CreateTask::agent("a")
    };

    // Released: the reply is written with its polished parts, and they are what is sent.
    let first = h.engine.create(&alice, request.clone()).await.unwrap();
    polishing.notified().await;
    let running = record(&h.engine, first.id).await;
    assert_eq!(
        running.status,
        TaskStatus::Running,
        "still running while polished"
    );
    let reply = mai_engine::reply_task_id(&running);
    let admin = caller("admin", Role::Admin, "s");
    assert!(h.engine.get(&admin, reply).await.is_err(), "no reply yet");
    release.notify_one();
    h.wait_status(reply, TaskStatus::Completed).await;
    assert_eq!(h.host.sent_to("s"), ["✨ polished"]);

    // Cancelled while polishing: the task ends cancelled, no reply is made, nothing is sent.
    let second = h.engine.create(&alice, request).await.unwrap();
    polishing.notified().await;
    h.engine
        .cancel(&alice, &second.id.to_string())
        .await
        .unwrap();
    h.wait_status(second.id, TaskStatus::Cancelled).await;
    let reply = mai_engine::reply_task_id(&record(&h.engine, second.id).await);
    assert!(h.engine.get(&admin, reply).await.is_err(), "no reply made");
    assert_eq!(
        h.host.sent_to("s"),
        ["✨ polished"],
        "nothing more was sent"
    );
}

#[tokio::test]
async fn instant_tasks_deliver_their_text_and_delays_use_the_clock() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("unused")));
    let clock = ManualClock::new();
    let mut h = Harness::start_with(
        test_config(),
        model,
        Arc::new(ToolRegistry::new()),
        clock.clone(),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let request = CreateTask {
        level: TaskLevel::Instant,
        trigger: Trigger::Delay { seconds: 90 },
        title: Some("water".into()),
        ..CreateTask::agent("Time to drink water!")
    };
    let task = h.engine.create(&alice, request).await.unwrap();
    assert_eq!(task.status, TaskStatus::Scheduled);
    clock.advance(chrono::Duration::seconds(60));
    h.engine.clock_changed();
    assert_eq!(
        record(&h.engine, task.id).await.status,
        TaskStatus::Scheduled,
        "not due yet"
    );
    clock.advance(chrono::Duration::seconds(31));
    h.engine.clock_changed();
    h.wait_status(task.id, TaskStatus::Completed).await;
    assert_eq!(h.host.sent_to("s"), ["Time to drink water!"]);
}

/// A registry with one tool, `pause`, whose call notifies `gate`, then returns once `release`
/// is notified.
fn pausing_registry(gate: &Arc<Notify>, release: &Arc<Notify>) -> Arc<ToolRegistry> {
    struct Pause(Arc<Notify>, Arc<Notify>);
    #[async_trait]
    impl ToolHandler for Pause {
        async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
            self.0.notify_one();
            self.1.notified().await;
            Ok(json!({"success": true}))
        }
    }
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "pause",
            "Pause.",
            json!({"type": "object"}),
            Visibility::Discoverable,
            Role::User,
            Arc::new(Pause(gate.clone(), release.clone())),
        )
        .unwrap(),
    );
    registry
}

#[tokio::test]
async fn injected_instructions_reach_the_model_before_its_next_call() {
    let (gate, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let registry = pausing_registry(&gate, &release);
    let model = RuleModel::new(|req| {
        if tool_results(req) == 0 {
            return Ok(call("p", "pause", json!({})));
        }
        let injected = req
            .messages
            .iter()
            .any(|m| m.role == MessageRole::User && m.content.contains("also check /tmp"));
        Ok(ChatResponse::text(if injected {
            "saw the injection"
        } else {
            "no injection"
        }))
    });
    let mut h = Harness::start_with(
        test_config(),
        model,
        registry,
        Arc::new(mai_core::clock::SystemClock),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("scan"))
        .await
        .unwrap();
    gate.notified().await;
    h.engine
        .inject(&alice, &task.id.short(), "also check /tmp")
        .await
        .unwrap();
    release.notify_one();
    h.wait_status(task.id, TaskStatus::Completed).await;
    assert_eq!(
        record(&h.engine, task.id).await.metadata.answer.as_deref(),
        Some("saw the injection")
    );
}

/// A task created here that has not run reads no history at its first start, unless an
/// instruction was injected meanwhile: then its first model call carries it.
#[tokio::test]
async fn an_instruction_injected_before_a_task_first_runs_reaches_its_first_model_call() {
    let (gate, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let registry = pausing_registry(&gate, &release);
    let model = RuleModel::new(|req| {
        let said = |text: &str| {
            req.messages
                .iter()
                .any(|m| m.role == MessageRole::User && m.content.contains(text))
        };
        if said("hold the slot") && tool_results(req) == 0 {
            return Ok(call("p", "pause", json!({})));
        }
        Ok(ChatResponse::text(if said("also check /tmp") {
            "saw the injection"
        } else {
            "no injection"
        }))
    });
    let mut config = test_config();
    config.task.max_concurrent_tasks = 1;
    let mut h = Harness::start_with(
        config,
        model,
        registry,
        Arc::new(mai_core::clock::SystemClock),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let holder = h
        .engine
        .create(&alice, CreateTask::agent("hold the slot"))
        .await
        .unwrap();
    gate.notified().await;
    let (steered, plain) = (
        h.engine
            .create(&alice, CreateTask::agent("scan"))
            .await
            .unwrap(),
        h.engine
            .create(&alice, CreateTask::agent("scan too"))
            .await
            .unwrap(),
    );
    assert_eq!(
        record(&h.engine, steered.id).await.status,
        TaskStatus::Pending
    );
    h.engine
        .inject(&alice, &steered.id.short(), "also check /tmp")
        .await
        .unwrap();
    release.notify_one();
    for id in [holder.id, steered.id, plain.id] {
        h.wait_status(id, TaskStatus::Completed).await;
    }
    let answer = |task: TaskRecord| task.metadata.answer;
    assert_eq!(
        answer(record(&h.engine, steered.id).await).as_deref(),
        Some("saw the injection")
    );
    assert_eq!(
        answer(record(&h.engine, plain.id).await).as_deref(),
        Some("no injection")
    );
}

#[tokio::test]
async fn model_failures_fail_the_task_with_a_raw_notice() {
    let model = RuleModel::new(|_| {
        Err(ModelError::Status {
            url: "http://m".into(),
            model: "x".into(),
            status: 401,
            reason: "Unauthorized".into(),
            detail: "bad key".into(),
            retry_after: None,
        })
    });
    let mut config = test_config();
    config.polish.enabled = true;
    let mut h = Harness::start(config, model).await;
    let task = h
        .engine
        .create(&caller("user", Role::User, "s"), CreateTask::agent("x"))
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Failed).await;
    h.wait_for("notice", |e| matches!(e, TaskEvent::Sent { .. }))
        .await;
    let sent = h.host.sent_to("s");
    assert!(
        sent[0].contains("failed") && sent[0].contains("401"),
        "raw, not polished: {sent:?}"
    );
}

/// A reply claimed in the write that creates it logs `pending/created` first and `running`
/// after it, and no entry is dated before the one above it.
#[tokio::test]
async fn a_reply_tasks_status_log_starts_with_created_and_runs_in_time_order() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("the answer")));
    let mut h = Harness::start(test_config(), model).await;
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("a"))
        .await
        .unwrap();
    h.wait_status(task.id, TaskStatus::Completed).await;
    let reply = mai_engine::reply_task_id(&record(&h.engine, task.id).await);
    h.wait_status(reply, TaskStatus::Completed).await;
    let log = record(&h.engine, reply).await.status_log;
    let steps: Vec<(TaskStatus, &str)> =
        log.iter().map(|c| (c.status, c.reason.as_str())).collect();
    assert_eq!(
        steps[..2],
        [
            (TaskStatus::Pending, "created"),
            (TaskStatus::Running, "dispatched")
        ],
        "{log:?}"
    );
    assert!(
        log.windows(2).all(|pair| pair[0].at <= pair[1].at),
        "the log goes back in time: {log:?}"
    );
}
