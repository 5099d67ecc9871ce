//! Crashes, restarts, stops and schedules: recovery continues from the last checkpoint without
//! re-running checkpointed tool calls, waiting tasks survive restarts with their conversation,
//! graceful stops resume, cron tasks re-arm, priorities order the queue, runtimes are bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::*;
use mai_core::clock::SystemClock;
use mai_core::model::{ChatRequest, ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::task::{PauseCause, TaskId, TaskStatus, Trigger};
use mai_core::tool::{
    ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use mai_engine::CreateTask;
use serde_json::{Value, json};

fn tool_results(req: &ChatRequest) -> usize {
    req.messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .count()
}

fn call(id: &str, name: &str) -> ChatResponse {
    ChatResponse::tool_calls("", vec![ToolCall::new(id, name, json!({}))])
}

/// Counts its runs (the side effect that must not repeat).
struct Count(Arc<AtomicUsize>);

#[async_trait]
impl ToolHandler for Count {
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"success": true}))
    }
}

/// Signals that it was reached, then either blocks forever, waits for cancellation, or returns.
#[derive(Clone, Copy)]
enum Behaviour {
    Forever,
    UntilCancelled,
    Return,
}

struct Block(Behaviour, Arc<tokio::sync::Notify>);

#[async_trait]
impl ToolHandler for Block {
    async fn call(&self, ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        self.1.notify_one();
        match self.0 {
            Behaviour::Forever => std::future::pending().await,
            Behaviour::UntilCancelled => ctx.cancel_token().cancelled().await,
            Behaviour::Return => {}
        }
        Ok(json!({"success": true, "blocked": false}))
    }
}

fn registry(
    count: &Arc<AtomicUsize>,
    block: Behaviour,
    reached: &Arc<tokio::sync::Notify>,
) -> Arc<ToolRegistry> {
    let registry = Arc::new(ToolRegistry::new());
    for (name, handler) in [
        (
            "count",
            Arc::new(Count(count.clone())) as Arc<dyn ToolHandler>,
        ),
        (
            "block",
            Arc::new(Block(block, reached.clone())) as Arc<dyn ToolHandler>,
        ),
    ] {
        registry.register(
            ToolDefinition::new(
                name,
                "test",
                json!({"type": "object"}),
                Visibility::Discoverable,
                Role::User,
                handler,
            )
            .unwrap(),
        );
    }
    registry
}

/// count → block → answer.
fn count_block_answer() -> Arc<RuleModel> {
    RuleModel::new(|req| {
        Ok(match tool_results(req) {
            0 => call("c1", "count"),
            1 => call("b1", "block"),
            _ => ChatResponse::text("finished"),
        })
    })
}

/// Runs `phase` on a runtime of its own, then drops that runtime without any cleanup: to the
/// database this is a crash (the process died mid-task).
fn crash_after<F>(phase: impl FnOnce() -> F + Send + 'static) -> F::Output
where
    F: std::future::Future + 'static,
    F::Output: Send + 'static,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let output = runtime.block_on(phase());
        runtime.shutdown_background();
        output
    })
    .join()
    .unwrap()
}

#[tokio::test]
async fn a_crash_mid_task_resumes_from_the_checkpoint_without_rerunning_tools() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");
    let count = Arc::new(AtomicUsize::new(0));
    let model = count_block_answer();

    let (db1, count1, model1) = (db.clone(), count.clone(), model.clone());
    let task_id: TaskId = crash_after(move || async move {
        let reached = Arc::new(tokio::sync::Notify::new());
        let engine = engine_at(
            &db1,
            test_config(),
            model1,
            Arc::new(RecordingHost::default()),
            registry(&count1, Behaviour::Forever, &reached),
            Arc::new(SystemClock),
        )
        .await;
        engine.start().await.unwrap();
        let task = engine
            .create(&caller("user", Role::User, "s"), CreateTask::agent("work"))
            .await
            .unwrap();
        reached.notified().await;
        task.id
    });
    assert_eq!(count.load(Ordering::SeqCst), 1);

    // Restart on the same database.
    let reached = Arc::new(tokio::sync::Notify::new());
    let host = Arc::new(RecordingHost::default());
    let engine = engine_at(
        &db,
        test_config(),
        model.clone(),
        host.clone(),
        registry(&count, Behaviour::Return, &reached),
        Arc::new(SystemClock),
    )
    .await;
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    wait_for(&mut events, "completion", |e| matches!(e, mai_engine::TaskEvent::Status { task_id: t, status: TaskStatus::Completed, .. } if *t == task_id)).await;

    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the checkpointed call did not run again"
    );
    let task = record(&engine, task_id).await;
    assert_eq!(task.metadata.answer.as_deref(), Some("finished"));
    assert!(
        task.status_log
            .iter()
            .any(|c| c.reason == "recovered from running")
    );
    let history = engine
        .history(&caller("user", Role::User, "s"), &task_id.to_string())
        .await
        .unwrap();
    let calls: Vec<String> = history
        .entries
        .iter()
        .filter_map(|e| e.payload["tool_call_id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        calls,
        ["c1", "b1"],
        "each tool result checkpointed once, in order"
    );
    // Before the crash: count, then block (in flight). A model reply is checkpointed with its
    // first tool result, so the in-flight round's reply was not saved and the model is asked for
    // that round again; the completed round is never repeated.
    assert_eq!(model.agent_calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_waiting_task_survives_a_crash_and_the_reply_continues_the_same_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");
    let model = RuleModel::new(|req| {
        let last = req.messages.last().unwrap();
        if last.role == MessageRole::Tool {
            return Ok(ChatResponse::text(format!("ok, using {}", last.content)));
        }
        Ok(ChatResponse::tool_calls(
            "",
            vec![ToolCall::new(
                "q",
                "ask_user",
                json!({"question": "Which region?"}),
            )],
        ))
    });
    let (db1, model1) = (db.clone(), model.clone());
    let task_id = crash_after(move || async move {
        let engine = engine_at(
            &db1,
            test_config(),
            model1,
            Arc::new(RecordingHost::default()),
            Arc::new(ToolRegistry::new()),
            Arc::new(SystemClock),
        )
        .await;
        let mut events = engine.subscribe();
        engine.start().await.unwrap();
        let task = engine
            .create(
                &caller("user", Role::User, "s"),
                CreateTask::agent("deploy"),
            )
            .await
            .unwrap();
        wait_for(&mut events, "waiting", |e| {
            matches!(e, mai_engine::TaskEvent::Question { .. })
        })
        .await;
        task.id
    });

    let engine = engine_at(
        &db,
        test_config(),
        model.clone(),
        Arc::new(RecordingHost::default()),
        Arc::new(ToolRegistry::new()),
        Arc::new(SystemClock),
    )
    .await;
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    assert_eq!(
        record(&engine, task_id).await.status,
        TaskStatus::WaitingInput
    );
    let owner = mai_core::ids::PersonId::new("qq", "user").unwrap();
    let stream = mai_core::ids::StreamId::new("s").unwrap();
    assert_eq!(
        engine
            .handle_user_reply(&owner, &stream, "eu-west")
            .await
            .unwrap(),
        Some(task_id)
    );
    wait_for(&mut events, "completion", |e| matches!(e, mai_engine::TaskEvent::Status { task_id: t, status: TaskStatus::Completed, .. } if *t == task_id)).await;
    let last = model.agent_requests().last().unwrap().clone();
    let roles: Vec<MessageRole> = last.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            MessageRole::System,
            MessageRole::User,
            MessageRole::Assistant,
            MessageRole::Tool
        ]
    );
    assert_eq!(last.messages[1].content, "deploy");
    assert!(last.messages[3].content.contains("eu-west"));
    assert_eq!(
        record(&engine, task_id).await.metadata.answer.unwrap(),
        format!("ok, using {}", last.messages[3].content)
    );
}

#[tokio::test]
async fn a_graceful_stop_pauses_running_tasks_and_the_next_start_resumes_them() {
    let count = Arc::new(AtomicUsize::new(0));
    let reached = Arc::new(tokio::sync::Notify::new());
    let model = count_block_answer();
    let h = Harness::start_with(
        test_config(),
        model.clone(),
        registry(&count, Behaviour::UntilCancelled, &reached),
        Arc::new(SystemClock),
    )
    .await;
    let task = h
        .engine
        .create(&caller("user", Role::User, "s"), CreateTask::agent("work"))
        .await
        .unwrap();
    reached.notified().await;
    h.engine.stop().await;
    let paused = record(&h.engine, task.id).await;
    assert_eq!(paused.status, TaskStatus::Paused);
    assert_eq!(paused.metadata.pause_cause, Some(PauseCause::Stop));
    assert_eq!(paused.status_log.last().unwrap().reason, "paused by stop");

    let engine = engine_at(
        &h.db(),
        test_config(),
        model,
        Arc::new(RecordingHost::default()),
        registry(&count, Behaviour::Return, &reached),
        Arc::new(SystemClock),
    )
    .await;
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    wait_for(&mut events, "completion", |e| matches!(e, mai_engine::TaskEvent::Status { task_id: t, status: TaskStatus::Completed, .. } if *t == task.id)).await;
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn user_pause_and_resume_continue_from_the_checkpoint() {
    let count = Arc::new(AtomicUsize::new(0));
    let reached = Arc::new(tokio::sync::Notify::new());
    let mut h = Harness::start_with(
        test_config(),
        count_block_answer(),
        registry(&count, Behaviour::UntilCancelled, &reached),
        Arc::new(SystemClock),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, CreateTask::agent("work"))
        .await
        .unwrap();
    reached.notified().await;
    h.engine.pause(&alice, &task.id.short()).await.unwrap();
    h.wait_status(task.id, TaskStatus::Paused).await;
    assert_eq!(
        record(&h.engine, task.id).await.metadata.pause_cause,
        Some(PauseCause::User)
    );
    h.engine.resume(&alice, &task.id.short()).await.unwrap();
    // The block tool ended with the pause and its result was recorded: the resumed loop goes on
    // to the model, which answers; nothing ran twice.
    h.wait_status(task.id, TaskStatus::Completed).await;
    assert_eq!(count.load(Ordering::SeqCst), 1);
    let history = h.engine.history(&alice, &task.id.short()).await.unwrap();
    let results = history
        .entries
        .iter()
        .filter(|e| e.payload["role"] == "tool")
        .count();
    assert_eq!(results, 2, "count and block, each recorded once");
}

#[tokio::test]
async fn higher_priority_runs_first_then_fifo() {
    let order = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = order.clone();
    let reached = Arc::new(tokio::sync::Notify::new());
    let count = Arc::new(AtomicUsize::new(0));
    let model = RuleModel::new(move |req| {
        let intent = req.messages[1].content.clone();
        if intent == "blocker" && tool_results(req) == 0 {
            return Ok(call("b", "block"));
        }
        if tool_results(req) == 0 {
            seen.lock().unwrap().push(intent);
        }
        Ok(ChatResponse::text("done"))
    });
    let mut config = test_config();
    config.task.max_concurrent_tasks = 1;
    let mut h = Harness::start_with(
        config,
        model,
        registry(&count, Behaviour::UntilCancelled, &reached),
        Arc::new(SystemClock),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let blocker = h
        .engine
        .create(
            &alice,
            CreateTask {
                title: Some("blocker".into()),
                ..CreateTask::agent("blocker")
            },
        )
        .await
        .unwrap();
    reached.notified().await;
    let mut last = None;
    for (name, priority) in [("low-1", 0), ("high", 5), ("low-2", 0), ("mid", 2)] {
        let task = h
            .engine
            .create(
                &alice,
                CreateTask {
                    priority,
                    title: Some(name.into()),
                    ..CreateTask::agent(name)
                },
            )
            .await
            .unwrap();
        last = Some(task.id);
    }
    let _ = last;
    h.engine.cancel(&alice, &blocker.id.short()).await.unwrap();
    while order.lock().unwrap().len() < 4 {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(20), h.events.recv())
            .await
            .expect("stalled");
    }
    assert_eq!(*order.lock().unwrap(), ["high", "mid", "low-1", "low-2"]);
}

#[tokio::test]
async fn a_cron_task_rearms_after_completion_and_a_cancel_stops_it() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("drink water")));
    let clock = ManualClock::new();
    let mut h = Harness::start_with(
        test_config(),
        model.clone(),
        Arc::new(ToolRegistry::new()),
        clock.clone(),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(
            &alice,
            CreateTask {
                trigger: Trigger::Cron {
                    expr: "* * * * *".into(),
                    timezone: None,
                },
                title: Some("water".into()),
                ..CreateTask::agent("remind")
            },
        )
        .await
        .unwrap();
    assert_eq!(task.status, TaskStatus::Scheduled);
    let first = task.scheduled_at.unwrap();
    assert!(
        first > clock_now(&clock) && first <= clock_now(&clock) + chrono::Duration::seconds(60)
    );
    clock.advance(chrono::Duration::seconds(61));
    h.engine.clock_changed();
    h.wait_status(task.id, TaskStatus::Completed).await;
    h.wait_status(task.id, TaskStatus::Scheduled).await;
    let rearmed = record(&h.engine, task.id).await;
    assert_eq!(rearmed.metadata.cron_runs, 1);
    assert!(rearmed.scheduled_at.unwrap() > first);
    assert!(
        rearmed.metadata.history_from > 0,
        "the next run starts a fresh conversation"
    );

    // Second run: a fresh conversation (system + intent only), not the first run's answer.
    clock.advance(chrono::Duration::seconds(61));
    h.engine.clock_changed();
    h.wait_status(task.id, TaskStatus::Scheduled).await;
    let last = model.agent_requests().last().unwrap().clone();
    assert_eq!(last.messages.len(), 2);
    assert_eq!(record(&h.engine, task.id).await.metadata.cron_runs, 2);

    h.engine.cancel(&alice, &task.id.short()).await.unwrap();
    let calls = model.agent_calls.load(Ordering::SeqCst);
    clock.advance(chrono::Duration::seconds(180));
    h.engine.clock_changed();
    assert_eq!(
        record(&h.engine, task.id).await.status,
        TaskStatus::Cancelled
    );
    assert_eq!(model.agent_calls.load(Ordering::SeqCst), calls);
    // Two runs, two replies (each reply task runs after its run re-armed the cron task).
    while h.host.sent_to("s").len() < 2 {
        h.wait_for("a reply", |e| {
            matches!(e, mai_engine::TaskEvent::Sent { .. })
        })
        .await;
    }
    assert_eq!(h.host.sent_to("s").len(), 2);
}

#[tokio::test]
async fn a_paused_scheduled_task_never_fires_and_resumes_to_its_time_or_to_the_queue() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("done")));
    let clock = ManualClock::new();
    let mut h = Harness::start_with(
        test_config(),
        model.clone(),
        Arc::new(ToolRegistry::new()),
        clock.clone(),
    )
    .await;
    let alice = caller("user", Role::User, "s");
    let cron = h
        .engine
        .create(&alice, cron_in("* * * * *", None))
        .await
        .unwrap();
    let first = cron.scheduled_at.unwrap();
    let delayed = h
        .engine
        .create(
            &alice,
            CreateTask {
                trigger: Trigger::Delay { seconds: 30 },
                ..CreateTask::agent("later")
            },
        )
        .await
        .unwrap();
    for task in [&cron, &delayed] {
        let paused = h.engine.pause(&alice, &task.id.short()).await.unwrap();
        assert_eq!(paused.status, TaskStatus::Paused);
        assert_eq!(paused.metadata.pause_cause, Some(PauseCause::User));
    }
    // Resumed before its time: scheduled again, for the same time.
    let back = h.engine.resume(&alice, &cron.id.short()).await.unwrap();
    assert_eq!(back.status, TaskStatus::Scheduled);
    assert_eq!(back.scheduled_at, Some(first));
    assert_eq!(
        back.status_log.last().unwrap().reason,
        "resumed: waits for its time"
    );
    h.engine.pause(&alice, &cron.id.short()).await.unwrap();

    // Their times pass while they are paused: neither fires.
    clock.advance(chrono::Duration::seconds(120));
    h.engine.clock_changed();
    for task in [&cron, &delayed] {
        assert_eq!(record(&h.engine, task.id).await.status, TaskStatus::Paused);
    }
    assert_eq!(model.agent_calls.load(Ordering::SeqCst), 0);

    // Resumed after its time: queued, and it runs at once.
    let queued = h.engine.resume(&alice, &delayed.id.short()).await.unwrap();
    assert_eq!(queued.status, TaskStatus::Pending);
    assert_eq!(queued.status_log.last().unwrap().reason, "resumed");
    h.wait_status(delayed.id, TaskStatus::Completed).await;
    // A cron task that missed its time runs once now, then waits for the next.
    h.engine.resume(&alice, &cron.id.short()).await.unwrap();
    h.wait_status(cron.id, TaskStatus::Completed).await;
    h.wait_status(cron.id, TaskStatus::Scheduled).await;
    let rearmed = record(&h.engine, cron.id).await;
    assert_eq!(rearmed.metadata.cron_runs, 1);
    assert!(rearmed.scheduled_at.unwrap() > clock_now(&clock));
}

fn utc(rfc3339: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .with_timezone(&chrono::Utc)
}

fn cron_in(expr: &str, timezone: Option<&str>) -> CreateTask {
    CreateTask {
        trigger: Trigger::Cron {
            expr: expr.into(),
            timezone: timezone.map(str::to_owned),
        },
        ..CreateTask::agent("remind")
    }
}

#[tokio::test]
async fn six_pm_in_shanghai_fires_at_ten_utc_and_rearms_for_the_next_day() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("dinner")));
    let clock = ManualClock::at("2025-03-01T08:15:42.5Z");
    let mut config = test_config();
    config.task.timezone = Some("UTC".into());
    let mut h =
        Harness::start_with(config, model, Arc::new(ToolRegistry::new()), clock.clone()).await;
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, cron_in("0 18 * * *", Some("Asia/Shanghai")))
        .await
        .unwrap();
    assert_eq!(task.scheduled_at, Some(utc("2025-03-01T10:00:00Z")));
    let in_utc = h
        .engine
        .create(&alice, cron_in("0 18 * * *", None))
        .await
        .unwrap();
    assert_eq!(in_utc.scheduled_at, Some(utc("2025-03-01T18:00:00Z")));

    clock.advance(chrono::Duration::seconds(6258)); // 10:00:00.5
    h.engine.clock_changed();
    h.wait_status(task.id, TaskStatus::Completed).await;
    h.wait_status(task.id, TaskStatus::Scheduled).await;
    let rearmed = record(&h.engine, task.id).await;
    assert_eq!(rearmed.scheduled_at, Some(utc("2025-03-02T10:00:00Z")));
    assert_eq!(
        record(&h.engine, in_utc.id).await.status,
        TaskStatus::Scheduled,
        "18:00 UTC has not come"
    );
}

#[tokio::test]
async fn a_cron_task_without_a_zone_follows_task_timezone_and_a_wrong_zone_is_refused() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("ok")));
    let clock = ManualClock::at("2025-03-01T08:15:42.5Z");
    let mut config = test_config();
    config.task.timezone = Some("Asia/Shanghai".into());
    let h = Harness::start_with(config, model, Arc::new(ToolRegistry::new()), clock).await;
    let alice = caller("user", Role::User, "s");
    let task = h
        .engine
        .create(&alice, cron_in("0 18 * * *", None))
        .await
        .unwrap();
    assert_eq!(task.scheduled_at, Some(utc("2025-03-01T10:00:00Z")));
    assert_eq!(h.engine.default_time_zone().0.to_string(), "Asia/Shanghai");
    let error = h
        .engine
        .create(&alice, cron_in("0 18 * * *", Some("Asia/Shangai")))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("timezone: `Asia/Shangai` is not an IANA time zone name"),
        "{error}"
    );
    assert!(error.contains("did you mean `Asia/Shanghai`?"), "{error}");
    let error = h
        .engine
        .create(&alice, cron_in("0 0 18 * * *", None))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("it has 6 field(s)"), "{error}");
    assert!(error.contains("expected 5 fields"), "{error}");
}

fn clock_now(clock: &ManualClock) -> chrono::DateTime<chrono::Utc> {
    use mai_core::clock::Clock;
    clock.now()
}

#[tokio::test]
async fn max_runtime_fails_a_task_that_runs_too_long() {
    let count = Arc::new(AtomicUsize::new(0));
    let reached = Arc::new(tokio::sync::Notify::new());
    let model = RuleModel::new(|_| Ok(call("b", "block")));
    let mut h = Harness::start_with(
        test_config(),
        model,
        registry(&count, Behaviour::UntilCancelled, &reached),
        Arc::new(SystemClock),
    )
    .await;
    let task = h
        .engine
        .create(
            &caller("user", Role::User, "s"),
            CreateTask {
                max_runtime_min: Some(1),
                ..CreateTask::agent("slow")
            },
        )
        .await
        .unwrap();
    reached.notified().await;
    // Jump the runtime's timers past the one-minute budget.
    tokio::time::pause();
    tokio::time::advance(std::time::Duration::from_secs(61)).await;
    tokio::time::resume();
    h.wait_status(task.id, TaskStatus::Failed).await;
    let failed = record(&h.engine, task.id).await;
    assert!(
        failed
            .metadata
            .error
            .unwrap()
            .contains("longer than its limit of 1 minutes")
    );
}

/// A model whose polish never answers (and says when it was asked): a crash lands while the
/// question is being polished, after the waiting state was saved.
struct PolishHangs {
    inner: Arc<RuleModel>,
    reached: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl mai_core::model::ChatModel for PolishHangs {
    async fn complete(
        &self,
        req: &ChatRequest,
    ) -> Result<ChatResponse, mai_core::model::ModelError> {
        if req.purpose == mai_core::model::ModelPurpose::Replyer {
            self.reached.notify_one();
            return std::future::pending().await;
        }
        self.inner.complete(req).await
    }
}

/// Regression: a crash between saving the waiting state and sending the question (here: while
/// the question is polished) used to leave the task waiting for an answer to a question nobody
/// saw. The next start sends it; a start after that does not send it again.
#[tokio::test]
async fn a_question_cut_off_by_a_crash_is_sent_on_the_next_start_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");
    let model = RuleModel::new(|req| {
        let last = req.messages.last().unwrap();
        if last.role == MessageRole::Tool {
            return Ok(ChatResponse::text(format!("ok, using {}", last.content)));
        }
        Ok(ChatResponse::tool_calls(
            "",
            vec![ToolCall::new(
                "q",
                "ask_user",
                json!({"question": "Which region?"}),
            )],
        ))
    });
    let (db1, model1) = (db.clone(), model.clone());
    let task_id = crash_after(move || async move {
        let reached = Arc::new(tokio::sync::Notify::new());
        let mut config = test_config();
        config.polish.enabled = true;
        let engine = engine_at(
            &db1,
            config,
            Arc::new(PolishHangs {
                inner: model1,
                reached: reached.clone(),
            }),
            Arc::new(RecordingHost::default()),
            Arc::new(ToolRegistry::new()),
            Arc::new(SystemClock),
        )
        .await;
        engine.start().await.unwrap();
        let task = engine
            .create(
                &caller("user", Role::User, "s"),
                CreateTask::agent("deploy"),
            )
            .await
            .unwrap();
        reached.notified().await;
        task.id
    });

    // The next start sends the question it finds unsent.
    let (db2, model2) = (db.clone(), model.clone());
    let sent = crash_after(move || async move {
        let host = Arc::new(RecordingHost::default());
        let engine = engine_at(
            &db2,
            test_config(),
            model2,
            host.clone(),
            Arc::new(ToolRegistry::new()),
            Arc::new(SystemClock),
        )
        .await;
        let mut events = engine.subscribe();
        engine.start().await.unwrap();
        wait_for(&mut events, "the question", |e| {
            matches!(e, mai_engine::TaskEvent::Question { .. })
        })
        .await;
        let record = record(&engine, task_id).await;
        assert_eq!(record.status, TaskStatus::WaitingInput);
        assert!(!record.metadata.waiting.unwrap().unsent, "marked sent");
        host.sent_to("s")
    });
    assert_eq!(sent, ["Which region?"]);

    // A start after that does not ask again; the answer finishes the task.
    let host = Arc::new(RecordingHost::default());
    let engine = engine_at(
        &db,
        test_config(),
        model.clone(),
        host.clone(),
        Arc::new(ToolRegistry::new()),
        Arc::new(SystemClock),
    )
    .await;
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    let owner = mai_core::ids::PersonId::new("qq", "user").unwrap();
    let stream = mai_core::ids::StreamId::new("s").unwrap();
    assert_eq!(
        engine
            .handle_user_reply(&owner, &stream, "eu-west")
            .await
            .unwrap(),
        Some(task_id)
    );
    wait_for(&mut events, "the reply", |e| {
        matches!(e, mai_engine::TaskEvent::Sent { .. })
    })
    .await;
    let sent = host.sent_to("s");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].starts_with("ok, using"), "{sent:?}");
}

/// count, count (identical), block; after the restart: count again (identical), then answer.
fn count_twice_block_count() -> Arc<RuleModel> {
    RuleModel::new(|req| {
        Ok(match tool_results(req) {
            0 => call("c1", "count"),
            1 => call("c2", "count"),
            2 => call("b1", "block"),
            3 => call("c3", "count"),
            _ => ChatResponse::text("finished"),
        })
    })
}

#[tokio::test]
async fn a_crash_mid_task_loses_neither_its_usage_records_nor_its_loop_guard_counts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");
    let count = Arc::new(AtomicUsize::new(0));
    let model = count_twice_block_count();
    let config = || {
        let mut config = test_config();
        config.task.repeat_warn_after = 3;
        config.task.repeat_fail_after = 5;
        config
    };

    let (db1, count1, model1) = (db.clone(), count.clone(), model.clone());
    let task_id: TaskId = crash_after(move || async move {
        let reached = Arc::new(tokio::sync::Notify::new());
        let engine = engine_at(
            &db1,
            config(),
            model1,
            Arc::new(RecordingHost::default()),
            registry(&count1, Behaviour::Forever, &reached),
            Arc::new(SystemClock),
        )
        .await;
        engine.start().await.unwrap();
        let task = engine
            .create(&caller("user", Role::User, "s"), CreateTask::agent("work"))
            .await
            .unwrap();
        reached.notified().await;
        task.id
    });
    assert_eq!(count.load(Ordering::SeqCst), 2);
    let calls_before = model.agent_calls.load(Ordering::SeqCst);
    assert_eq!(calls_before, 3);
    // The two checkpointed rounds' usage waits in the task's record (fewer than a batch).
    let store = mai_store::SqliteStore::open(&db).await.unwrap();
    let stored = mai_core::store::TaskStore::get(&store, task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored
            .metadata
            .usage_unwritten
            .iter()
            .map(|r| r.round)
            .collect::<Vec<_>>(),
        [1, 2],
        "the checkpoints carried the usage of rounds 1 and 2"
    );
    store.close().await;

    let reached = Arc::new(tokio::sync::Notify::new());
    let engine = engine_at(
        &db,
        config(),
        model.clone(),
        Arc::new(RecordingHost::default()),
        registry(&count, Behaviour::Return, &reached),
        Arc::new(SystemClock),
    )
    .await;
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    wait_for(&mut events, "completion", |e| matches!(e, mai_engine::TaskEvent::Status { task_id: t, status: TaskStatus::Completed, .. } if *t == task_id)).await;

    assert_eq!(
        count.load(Ordering::SeqCst),
        2,
        "the third identical call was counted with the two before the crash: warned, not run"
    );
    let admin = caller("admin", Role::Admin, "s");
    let query = mai_core::usage::UsageQuery {
        task: Some(task_id),
        group_by: Some(mai_core::usage::UsageGroup::Purpose),
        ..Default::default()
    };
    let (groups, _) = engine.usage(&admin, query).await.unwrap();
    let agent = groups
        .iter()
        .find(|g| g.key.as_deref() == Some("agent"))
        .expect("agent usage");
    // Every agent call is recorded once, except the one in flight at the crash (its reply was
    // never checkpointed, so it was asked again).
    let calls = model.agent_calls.load(Ordering::SeqCst) as u64;
    assert_eq!(agent.calls, calls - 1, "{groups:?}");
    let task = record(&engine, task_id).await;
    assert!(task.metadata.usage_unwritten.is_empty());
}
