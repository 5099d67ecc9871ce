//! The planner channel: the 11 planner tools, acting as the host's speaker (or at
//! `[planner] default_role` without one) with owner `planner:{stream}`, stream isolation with the
//! host-injected `chat_id`, the shared `send_message`/`search_users`, and the MCP proxy with and
//! without a manager.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::*;
use mai_core::capabilities::McpProxy;
use mai_core::clock::SystemClock;
use mai_core::host::{ChatTarget, StreamInfo, UserHit};
use mai_core::ids::StreamId;
use mai_core::model::{ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::task::{TaskId, TaskStatus, Trigger};
use mai_core::tool::{Effect, Effects, ToolOutcome, ToolRegistry};
use mai_engine::TaskEvent;
use mai_engine::{Caller, CreateTask};
use mai_engine::{
    PLANNER_TOOLS, PlannerVisibility, REFUSED_TO_PLANNER, call_planner_tool, planner_registry,
    planner_visibility,
};
use serde_json::{Value, json};

async fn planner(mcp: Option<Arc<dyn McpProxy>>) -> (Harness, ToolRegistry) {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("done")));
    let harness = Harness::start(test_config(), model).await;
    let registry = planner_registry(&harness.engine, mcp).unwrap();
    (harness, registry)
}

async fn call(harness: &Harness, registry: &ToolRegistry, name: &str, args: Value) -> ToolOutcome {
    call_planner_tool(&harness.engine, registry, name, args).await
}

fn error_of(outcome: &ToolOutcome) -> String {
    assert!(
        !outcome.is_ok(),
        "expected a refusal, got {:?}",
        outcome.value
    );
    outcome.error_message().unwrap().to_owned()
}

fn id_of(outcome: &ToolOutcome) -> TaskId {
    assert!(outcome.is_ok(), "{:?}", outcome.value);
    outcome.value["id"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn every_planner_tool_says_what_it_does_and_none_may_touch_the_machine() {
    let (_harness, registry) = planner(None).await;
    for tool in registry.all() {
        let expected: Effects = match tool.name() {
            name if name.starts_with("subagent_") => Effect::ManagesTasks.into(),
            "send_message" => Effect::ContactsPeople.into(),
            "search_users" => Effect::ReadsChats.into(),
            "list_mcp_tools" | "call_mcp_tool" => Effect::CallsMcp.into(),
            other => panic!("unexpected planner tool {other}"),
        };
        assert_eq!(tool.effects(), expected, "{}", tool.name());
        assert!(!tool.effects().intersects(REFUSED_TO_PLANNER));
    }
}

#[tokio::test]
async fn the_registry_has_the_eleven_tools_with_their_parameters_and_visibility() {
    let (harness, registry) = planner(None).await;
    let names: Vec<String> = registry.all().iter().map(|t| t.name().to_owned()).collect();
    let expected: Vec<&str> = PLANNER_TOOLS.iter().map(|(n, _)| *n).collect();
    let mut sorted_names = names.clone();
    sorted_names.sort();
    let mut sorted_expected = expected.clone();
    sorted_expected.sort();
    assert_eq!(sorted_names, sorted_expected);
    let visible: Vec<&str> = PLANNER_TOOLS
        .iter()
        .filter(|(_, v)| *v == PlannerVisibility::Visible)
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        visible,
        [
            "subagent_create",
            "subagent_list",
            "subagent_status",
            "subagent_delete",
            "subagent_schedule"
        ]
    );
    assert_eq!(
        planner_visibility("send_message"),
        Some(PlannerVisibility::Deferred)
    );
    assert_eq!(planner_visibility("run_command"), None);
    let params = |name: &str| -> (Vec<String>, Vec<String>) {
        let tool = registry.get(name).unwrap();
        let schema = tool.parameters();
        let mut props: Vec<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        props.sort();
        let mut required: Vec<String> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        required.sort();
        (props, required)
    };
    let table: [(&str, &[&str], &[&str]); 11] = [
        ("search_users", &["chat_type", "keyword", "platform"], &[]),
        (
            "subagent_create",
            &[
                "cron_expr",
                "delay_seconds",
                "intent",
                "level",
                "priority",
                "reply_stream_id",
                "stream_id",
                "timezone",
            ],
            &["intent", "stream_id"],
        ),
        ("subagent_list", &["status", "stream_id"], &["stream_id"]),
        (
            "subagent_status",
            &["stream_id", "task_id"],
            &["stream_id", "task_id"],
        ),
        (
            "subagent_modify",
            &["inject_instruction", "stream_id", "task_id"],
            &["inject_instruction", "stream_id", "task_id"],
        ),
        (
            "subagent_delete",
            &["stream_id", "task_id"],
            &["stream_id", "task_id"],
        ),
        (
            "subagent_history",
            &["stream_id", "task_id"],
            &["stream_id", "task_id"],
        ),
        (
            "subagent_schedule",
            &["cron_expr", "intent", "level", "stream_id", "timezone"],
            &["cron_expr", "intent", "stream_id"],
        ),
        (
            "send_message",
            &[
                "group_id",
                "platform",
                "polish",
                "split",
                "stream_id",
                "text",
                "user_id",
            ],
            &["text"],
        ),
        ("list_mcp_tools", &[], &[]),
        (
            "call_mcp_tool",
            &["arguments", "server", "tool"],
            &["server", "tool"],
        ),
    ];
    for (name, props, required) in table {
        assert_eq!(
            params(name),
            (
                props.iter().map(|s| s.to_string()).collect(),
                required.iter().map(|s| s.to_string()).collect()
            ),
            "{name}"
        );
        let tool = registry.get(name).unwrap();
        assert!(
            !tool.parameters().to_string().contains("chat_id"),
            "{name}: chat_id is host-only and must not be in a schema"
        );
        assert!(
            tool.description().len() > 80,
            "{name}: a keyword-rich description"
        );
    }
    for name in names.iter().filter(|n| n.starts_with("subagent_")) {
        assert!(
            registry
                .get(name)
                .unwrap()
                .description()
                .contains("background sub-agent"),
            "{name} says background sub-agent"
        );
    }
    drop(harness);
}

#[tokio::test]
async fn subagent_create_makes_a_task_of_the_planner_that_acts_as_its_speaker() {
    let (mut harness, registry) = planner(None).await;
    let created = call(
        &harness,
        &registry,
        "subagent_create",
        json!({"intent": "check the weather", "stream_id": "grp-a", "chat_id": "grp-a", "priority": 3}),
    )
    .await;
    let id = id_of(&created);
    assert_eq!(created.value["task_id"], id.short().as_str());
    harness.wait_status(id, TaskStatus::Completed).await;
    let task = record(&harness.engine, id).await;
    assert_eq!(task.owner.to_string(), "planner:grp-a");
    assert_eq!(task.stream_id.as_str(), "grp-a");
    assert_eq!(task.priority, 3);
    assert_eq!(task.status_log[0].actor, "planner:grp-a");
    assert_eq!(task.requester(), None);
    assert_eq!(harness.engine.task_role(&task), Role::User);
    // The answer goes out (through its reply task) to the planner's stream.
    harness
        .wait_for("the answer sent to grp-a", |e| {
            matches!(e, TaskEvent::Sent { stream_id, text, .. } if stream_id.as_str() == "grp-a" && text == "done")
        })
        .await;

    // Without a speaker the planner acts for nobody at `[planner] default_role` (user): a
    // person's task in its stream is not its to cancel. With the admin as speaker, it is.
    let person_task = harness
        .engine
        .create(
            &caller("user", Role::User, "grp-a"),
            CreateTask {
                trigger: mai_core::task::Trigger::Delay { seconds: 3600 },
                ..CreateTask::agent("later")
            },
        )
        .await
        .unwrap();
    let args = json!({"task_id": person_task.id.short(), "stream_id": "grp-a", "chat_id": "grp-a"});
    let refused = call(&harness, &registry, "subagent_delete", args.clone()).await;
    assert!(!refused.is_ok(), "{:?}", refused.value);
    assert_eq!(
        record(&harness.engine, person_task.id).await.status,
        TaskStatus::Scheduled
    );
    let mut as_admin = args;
    as_admin["user_id"] = json!("admin");
    as_admin["platform"] = json!("qq");
    let deleted = call(&harness, &registry, "subagent_delete", as_admin).await;
    assert!(deleted.is_ok(), "{:?}", deleted.value);
    assert_eq!(deleted.value["result"], "cancelled");
    assert_eq!(
        record(&harness.engine, person_task.id).await.status,
        TaskStatus::Cancelled
    );
}

#[tokio::test]
async fn list_status_history_and_delete_work_on_the_streams_tasks() {
    let (mut harness, registry) = planner(None).await;
    let ctx = |extra: Value| {
        let mut args = json!({"stream_id": "grp-a", "chat_id": "grp-a"});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        args
    };
    let done = id_of(
        &call(
            &harness,
            &registry,
            "subagent_create",
            ctx(json!({"intent": "now"})),
        )
        .await,
    );
    harness.wait_status(done, TaskStatus::Completed).await;
    let later = call(
        &harness,
        &registry,
        "subagent_create",
        ctx(json!({"intent": "remind me", "delay_seconds": 3600, "level": "instant"})),
    )
    .await;
    let later_id = id_of(&later);
    assert_eq!(later.value["status"], "scheduled");
    assert_eq!(later.value["level"], "instant");
    assert!(later.value["scheduled_at"].is_string());

    let list = call(&harness, &registry, "subagent_list", ctx(json!({}))).await;
    assert!(list.is_ok(), "{:?}", list.value);
    // The finished agent task's answer went out through its instant reply task: three tasks.
    let listed: Vec<&str> = list.value["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed.contains(&done.short().as_str()) && listed.contains(&later_id.short().as_str()));
    let scheduled = call(
        &harness,
        &registry,
        "subagent_list",
        ctx(json!({"status": "scheduled"})),
    )
    .await;
    assert_eq!(scheduled.value["count"], 1);
    assert_eq!(
        scheduled.value["tasks"][0]["task_id"],
        later_id.short().as_str()
    );
    let bad = call(
        &harness,
        &registry,
        "subagent_list",
        ctx(json!({"status": "sleeping"})),
    )
    .await;
    assert!(error_of(&bad).contains("unknown task status"));

    let status = call(
        &harness,
        &registry,
        "subagent_status",
        ctx(json!({"task_id": done.short()})),
    )
    .await;
    assert!(status.is_ok(), "{:?}", status.value);
    assert_eq!(status.value["status"], "completed");
    assert_eq!(status.value["answer"], "done");
    assert_eq!(status.value["intent"], "now");

    let history = call(
        &harness,
        &registry,
        "subagent_history",
        ctx(json!({"task_id": done.short()})),
    )
    .await;
    assert!(history.is_ok(), "{:?}", history.value);
    let log: Vec<&str> = history.value["status_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(log.first(), Some(&"pending"));
    assert_eq!(log.last(), Some(&"completed"));
    assert!(
        history.value["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["text"] == "done"),
        "{:?}",
        history.value
    );

    let deleted = call(
        &harness,
        &registry,
        "subagent_delete",
        ctx(json!({"task_id": later_id.short()})),
    )
    .await;
    assert!(deleted.is_ok(), "{:?}", deleted.value);
    assert_eq!(
        record(&harness.engine, later_id).await.status,
        TaskStatus::Cancelled
    );
    let again = call(
        &harness,
        &registry,
        "subagent_delete",
        ctx(json!({"task_id": done.short()})),
    )
    .await;
    assert!(error_of(&again).contains("completed"));
}

#[tokio::test]
async fn stream_isolation_refuses_forged_streams_and_hides_other_streams_tasks() {
    let (harness, registry) = planner(None).await;
    // chat_id A, stream_id B: refused, nothing created.
    let forged = call(
        &harness,
        &registry,
        "subagent_create",
        json!({"intent": "spy", "stream_id": "grp-b", "chat_id": "grp-a"}),
    )
    .await;
    assert!(error_of(&forged).contains("not the current conversation"));
    let forged_list = call(
        &harness,
        &registry,
        "subagent_list",
        json!({"stream_id": "grp-b", "chat_id": "grp-a"}),
    )
    .await;
    assert!(error_of(&forged_list).contains("not the current conversation"));

    // Without chat_id the model names the stream: a planner that speaks with nobody (at
    // `[planner] default_role`, user) may not; speaking with the admin it may.
    let in_b = json!({"intent": "later in b", "stream_id": "grp-b", "delay_seconds": 3600});
    let refused = call(&harness, &registry, "subagent_create", in_b.clone()).await;
    assert!(error_of(&refused).contains("no chat_id"));
    let mut as_admin = in_b;
    as_admin["user_id"] = json!("admin");
    as_admin["platform"] = json!("qq");
    let b_task = id_of(&call(&harness, &registry, "subagent_create", as_admin).await);
    let all_b = call(
        &harness,
        &registry,
        "subagent_list",
        json!({"stream_id": "grp-b", "user_id": "admin", "platform": "qq"}),
    )
    .await;
    assert_eq!(all_b.value["count"], 1);

    // From stream A, B's task does not exist — for every tool that takes a task id.
    let a_list = call(
        &harness,
        &registry,
        "subagent_list",
        json!({"stream_id": "grp-a", "chat_id": "grp-a"}),
    )
    .await;
    assert_eq!(a_list.value["count"], 0);
    for (tool, extra) in [
        ("subagent_status", json!({})),
        ("subagent_history", json!({})),
        ("subagent_delete", json!({})),
        ("subagent_modify", json!({"inject_instruction": "stop"})),
    ] {
        let mut args = json!({"task_id": b_task.short(), "stream_id": "grp-a", "chat_id": "grp-a"});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let outcome = call(&harness, &registry, tool, args).await;
        assert!(
            error_of(&outcome).contains("no task"),
            "{tool}: {:?}",
            outcome.value
        );
    }
    assert_eq!(
        record(&harness.engine, b_task).await.status,
        TaskStatus::Scheduled,
        "untouched"
    );

    // reply_stream_id may target another stream on purpose, within the speaker's reach: not
    // for a planner that speaks with nobody, anywhere for an admin speaker.
    let mut cross = json!({"intent": "tell b", "stream_id": "grp-a", "chat_id": "grp-a",
           "reply_stream_id": "grp-b", "delay_seconds": 3600});
    let refused = call(&harness, &registry, "subagent_create", cross.clone()).await;
    assert!(error_of(&refused).contains("may only send to its own chat"));
    cross["user_id"] = json!("admin");
    cross["platform"] = json!("qq");
    let cross = call(&harness, &registry, "subagent_create", cross).await;
    let cross_id = id_of(&cross);
    assert_eq!(
        record(&harness.engine, cross_id)
            .await
            .reply_stream_id
            .map(|s| s.to_string()),
        Some("grp-b".to_owned())
    );
}

#[tokio::test]
async fn subagent_schedule_validates_the_cron_expression() {
    let (harness, registry) = planner(None).await;
    let bad = call(
        &harness,
        &registry,
        "subagent_schedule",
        json!({"intent": "daily report", "stream_id": "grp-a", "chat_id": "grp-a", "cron_expr": "every day at six"}),
    )
    .await;
    let error = error_of(&bad);
    assert!(
        error.contains("invalid cron expression `every day at six`"),
        "{error}"
    );
    assert!(error.contains("minute hour day month weekday"), "{error}");
    let good = call(
        &harness,
        &registry,
        "subagent_schedule",
        json!({"intent": "daily report", "stream_id": "grp-a", "chat_id": "grp-a", "cron_expr": "0 18 * * *"}),
    )
    .await;
    let id = id_of(&good);
    assert_eq!(good.value["status"], "scheduled");
    let task = record(&harness.engine, id).await;
    assert_eq!(
        task.trigger,
        mai_core::task::Trigger::Cron {
            expr: "0 18 * * *".into(),
            timezone: None,
        }
    );
    let zoned = call(
        &harness,
        &registry,
        "subagent_schedule",
        json!({"intent": "dinner", "stream_id": "grp-a", "chat_id": "grp-a",
               "cron_expr": "0 18 * * *", "timezone": "Asia/Shanghai"}),
    )
    .await;
    let task = record(&harness.engine, id_of(&zoned)).await;
    assert_eq!(
        task.trigger,
        mai_core::task::Trigger::Cron {
            expr: "0 18 * * *".into(),
            timezone: Some("Asia/Shanghai".into()),
        }
    );
    let next = task.scheduled_at.unwrap();
    assert_eq!(next.format("%M:%S").to_string(), "00:00");
    assert_eq!(
        next.with_timezone(&chrono_tz::Tz::Asia__Shanghai)
            .format("%H")
            .to_string(),
        "18"
    );
    let both = call(
        &harness,
        &registry,
        "subagent_create",
        json!({"intent": "x", "stream_id": "grp-a", "chat_id": "grp-a", "cron_expr": "0 18 * * *", "delay_seconds": 5}),
    )
    .await;
    assert!(error_of(&both).contains("not both"));
}

#[tokio::test]
async fn subagent_modify_answers_a_waiting_task_and_wakes_it() {
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
    let mut harness = Harness::start(test_config(), model).await;
    let registry = planner_registry(&harness.engine, None).unwrap();
    let id = id_of(
        &call(
            &harness,
            &registry,
            "subagent_create",
            json!({"intent": "weather", "stream_id": "grp-a", "chat_id": "grp-a"}),
        )
        .await,
    );
    harness.wait_status(id, TaskStatus::WaitingInput).await;
    let status = call(
        &harness,
        &registry,
        "subagent_status",
        json!({"task_id": id.short(), "stream_id": "grp-a", "chat_id": "grp-a"}),
    )
    .await;
    assert_eq!(status.value["waiting_question"], "Which region?");
    let modified = call(
        &harness,
        &registry,
        "subagent_modify",
        json!({"task_id": id.short(), "inject_instruction": "Europe", "stream_id": "grp-a", "chat_id": "grp-a"}),
    )
    .await;
    assert!(modified.is_ok(), "{:?}", modified.value);
    assert!(
        modified.value["result"]
            .as_str()
            .unwrap()
            .contains("answered")
    );
    harness.wait_status(id, TaskStatus::Completed).await;
    let answer = record(&harness.engine, id).await.metadata.answer.unwrap();
    assert!(answer.contains("Europe"), "{answer}");
}

#[tokio::test]
async fn send_message_and_search_users_share_the_agent_loop_implementations() {
    let host = Arc::new(RecordingHost {
        users: vec![UserHit {
            stream: StreamInfo {
                stream_id: StreamId::new("grp-b").unwrap(),
                platform: "qq".into(),
                target: ChatTarget::Group {
                    group_id: "2002".into(),
                },
                name: "Book club".into(),
            },
            matched: "Book club".into(),
        }],
        ..RecordingHost::default()
    });
    let model = RuleModel::new(|_| Ok(ChatResponse::text("done")));
    let harness = Harness::start_with_host(
        test_config(),
        model,
        Arc::new(ToolRegistry::new()),
        Arc::new(SystemClock),
        host,
    )
    .await;
    let registry = planner_registry(&harness.engine, None).unwrap();

    let found = call(
        &harness,
        &registry,
        "search_users",
        json!({"keyword": "Book", "chat_id": "grp-a"}),
    )
    .await;
    assert!(found.is_ok(), "{:?}", found.value);
    assert_eq!(found.value["found"][0]["stream_id"], "grp-b");

    // The host injected stream_id = chat_id = grp-a; the model's target is grp-b. Without a
    // speaker the planner reaches only its own chat; speaking with the admin (the host's
    // `user_id`, under `host_user_id` since send_message declares `user_id` as a target), any.
    let to_b = json!({"text": "meeting moved to 8", "stream_id": "grp-b", "chat_id": "grp-a", "polish": false});
    let refused = call(&harness, &registry, "send_message", to_b.clone()).await;
    assert!(!refused.is_ok(), "{:?}", refused.value);
    assert!(harness.host.sent_to("grp-b").is_empty());
    let mut as_admin = to_b;
    as_admin["host_user_id"] = json!("admin");
    as_admin["host_platform"] = json!("qq");
    let sent = call(&harness, &registry, "send_message", as_admin).await;
    assert!(sent.is_ok(), "{:?}", sent.value);
    assert_eq!(
        harness.host.sent_to("grp-b"),
        vec!["meeting moved to 8".to_owned()]
    );
    // Only the host's own stream left: no target, with the shared tool's explanation.
    let none = call(
        &harness,
        &registry,
        "send_message",
        json!({"text": "hi", "stream_id": "grp-a", "chat_id": "grp-a"}),
    )
    .await;
    assert!(error_of(&none).contains("current conversation"));
    assert!(harness.host.sent_to("grp-a").is_empty());
}

struct FakeMcp;

#[async_trait]
impl McpProxy for FakeMcp {
    async fn list_tools(&self, _role: Role) -> Result<Vec<(String, String, String)>, String> {
        Ok(vec![(
            "web".into(),
            "search".into(),
            "search the web".into(),
        )])
    }
    async fn call_tool(
        &self,
        _role: Role,
        server: &str,
        tool: &str,
        args: Value,
    ) -> Result<Value, String> {
        if tool != "search" {
            return Err(format!("unknown tool {tool}"));
        }
        Ok(json!({"server": server, "echo": args}))
    }
}

#[tokio::test]
async fn mcp_proxy_tools_without_a_manager_say_none_are_configured() {
    let (harness, registry) = planner(None).await;
    let listed = call(
        &harness,
        &registry,
        "list_mcp_tools",
        json!({"chat_id": "grp-a"}),
    )
    .await;
    assert!(listed.is_ok());
    assert_eq!(listed.value["tools"], json!([]));
    assert!(
        listed.value["note"]
            .as_str()
            .unwrap()
            .contains("no MCP servers are configured")
    );
    let called = call(
        &harness,
        &registry,
        "call_mcp_tool",
        json!({"server": "web", "tool": "search"}),
    )
    .await;
    assert!(error_of(&called).contains("no MCP servers are configured"));
}

#[tokio::test]
async fn mcp_proxy_tools_list_and_call_through_the_manager() {
    let (harness, registry) = planner(Some(Arc::new(FakeMcp))).await;
    let listed = call(&harness, &registry, "list_mcp_tools", json!({})).await;
    assert_eq!(
        listed.value["tools"],
        json!([{"server": "web", "tool": "search", "description": "search the web"}])
    );
    let called = call(
        &harness,
        &registry,
        "call_mcp_tool",
        json!({"server": "web", "tool": "search", "arguments": {"q": "rust"}}),
    )
    .await;
    assert!(called.is_ok(), "{:?}", called.value);
    assert_eq!(called.value["result"]["echo"], json!({"q": "rust"}));
    let failed = call(
        &harness,
        &registry,
        "call_mcp_tool",
        json!({"server": "web", "tool": "nope"}),
    )
    .await;
    assert!(error_of(&failed).contains("unknown tool nope"));
}

#[tokio::test]
async fn a_reference_ambiguous_across_streams_resolves_within_the_current_one() {
    let (harness, registry) = planner(None).await;
    let create = |stream: &str| json!({"intent": "later", "stream_id": stream, "chat_id": stream, "delay_seconds": 3600});
    // Both get the model's title, so the title alone matches two tasks.
    let a = id_of(&call(&harness, &registry, "subagent_create", create("grp-a")).await);
    let b = id_of(&call(&harness, &registry, "subagent_create", create("grp-b")).await);
    let title = record(&harness.engine, a).await.title;
    assert_eq!(record(&harness.engine, b).await.title, title);
    assert!(matches!(
        harness
            .engine
            .resolve(&caller("admin", Role::Admin, "s"), &title)
            .await,
        Err(mai_engine::EngineError::Ambiguous { .. })
    ));
    let status = call(
        &harness,
        &registry,
        "subagent_status",
        json!({"task_id": title, "stream_id": "grp-a", "chat_id": "grp-a"}),
    )
    .await;
    assert!(status.is_ok(), "{:?}", status.value);
    assert_eq!(status.value["id"], a.to_string().as_str());
    assert!(
        !status.value.to_string().contains(&b.short()),
        "another stream's id must not show"
    );
}

#[tokio::test]
async fn the_person_a_planner_task_was_made_for_answers_it_by_replying_in_the_stream() {
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
    let mut config = test_config();
    config.permission.users.push("qq:alice".into());
    let mut harness = Harness::start(config, model).await;
    let registry = planner_registry(&harness.engine, None).unwrap();
    let id = id_of(
        &call(
            &harness,
            &registry,
            "subagent_create",
            json!({"intent": "weather", "stream_id": "grp-a", "chat_id": "grp-a",
                   "platform": "qq", "user_id": "alice"}),
        )
        .await,
    );
    harness.wait_status(id, TaskStatus::WaitingInput).await;
    let stream = StreamId::new("grp-a").unwrap();
    let alice = mai_core::ids::PersonId::new("qq", "alice").unwrap();
    let bob = mai_core::ids::PersonId::new("qq", "bob").unwrap();
    // Someone else in the group, or alice in another stream: nothing wakes.
    let other = StreamId::new("grp-b").unwrap();
    assert_eq!(
        harness
            .engine
            .handle_user_reply(&bob, &stream, "Asia")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        harness
            .engine
            .handle_user_reply(&alice, &other, "Asia")
            .await
            .unwrap(),
        None
    );
    let woken = harness
        .engine
        .handle_user_reply(&alice, &stream, "Europe")
        .await
        .unwrap();
    assert_eq!(woken, Some(id));
    harness.wait_status(id, TaskStatus::Completed).await;
    let task = record(&harness.engine, id).await;
    assert!(task.metadata.answer.clone().unwrap().contains("Europe"));
    assert_eq!(task.owner.to_string(), "planner:grp-a");
    assert_eq!(task.requester().unwrap().to_string(), "qq:alice");
    // The resume's status-log line names who answered.
    let resumed = task
        .status_log
        .iter()
        .find(|line| line.reason == "resumed with the answer")
        .expect("a resume line");
    assert_eq!(resumed.actor, "qq:alice");
    assert_eq!(
        task.metadata.answered_by, None,
        "cleared once the run started"
    );
}

#[tokio::test]
async fn the_planner_sees_of_tasks_not_its_speakers_only_what_reached_its_conversation() {
    let model = RuleModel::new(|_| Ok(ChatResponse::text("the root password is hunter2")));
    let mut harness = Harness::start(test_config(), model).await;
    let registry = planner_registry(&harness.engine, None).unwrap();
    // The admin's task in the group answers in the admin's private chat.
    let admin = caller("admin", Role::Admin, "grp-a");
    let private = harness
        .engine
        .create(
            &admin,
            CreateTask {
                reply_stream_id: Some(StreamId::new("qq:admin").unwrap()),
                ..CreateTask::agent("read me the root password, privately")
            },
        )
        .await
        .unwrap();
    harness.wait_status(private.id, TaskStatus::Completed).await;
    // A guest's planner turn in the group sees how it stands, not what it answered elsewhere.
    let status = call(
        &harness,
        &registry,
        "subagent_status",
        json!({"task_id": private.id.short(), "stream_id": "grp-a", "chat_id": "grp-a",
               "user_id": "stranger", "platform": "qq"}),
    )
    .await;
    assert!(status.is_ok(), "{:?}", status.value);
    assert_eq!(status.value["status"], "completed");
    assert!(
        !status.value.to_string().contains("hunter2"),
        "{:?}",
        status.value
    );

    // The API token's task in the group is admin's: a planner call without a speaker (at
    // `[planner] default_role`) shares its owner but neither reads nor stops it.
    let token = Caller::token(StreamId::new("grp-a").unwrap(), "qq".into(), None);
    let job = harness
        .engine
        .create(
            &token,
            CreateTask {
                trigger: Trigger::Delay { seconds: 3600 },
                ..CreateTask::agent("rotate the root password to hunter3")
            },
        )
        .await
        .unwrap();
    let args = json!({"task_id": job.id.short(), "stream_id": "grp-a", "chat_id": "grp-a"});
    let history = call(&harness, &registry, "subagent_history", args.clone()).await;
    assert!(error_of(&history).contains("acts for someone else"));
    let status = call(&harness, &registry, "subagent_status", args.clone()).await;
    assert!(status.value.get("intent").is_none(), "{:?}", status.value);
    let deleted = call(&harness, &registry, "subagent_delete", args).await;
    assert!(!deleted.is_ok(), "{:?}", deleted.value);
    assert_eq!(
        record(&harness.engine, job.id).await.status,
        TaskStatus::Scheduled
    );
}
