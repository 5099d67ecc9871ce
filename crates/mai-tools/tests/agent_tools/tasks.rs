//! The task tools: identity only from the context, forged identity refused by the schema gate,
//! guests refused, compact results.

use std::sync::Arc;

use mai_core::role::Role;
use mai_core::tool::{OutcomeKind, ToolRegistry, Visibility};
use mai_tools::tasks::{LIST_LIMIT, task_tools};
use serde_json::{Value, json};

use crate::fakes::{FakeControl, OWNER, STREAM, call, ctx, error_of, registry};

const NAMES: [&str; 4] = [
    "list_my_tasks",
    "create_subtask",
    "inject_task",
    "cancel_task",
];

fn setup() -> (Arc<FakeControl>, ToolRegistry) {
    let control = Arc::new(FakeControl::default());
    let registry = registry(task_tools(control.clone()).unwrap());
    (control, registry)
}

fn valid_args(tool: &str) -> Value {
    match tool {
        "list_my_tasks" => json!({}),
        "create_subtask" => json!({"intent": "water the plants"}),
        "inject_task" => json!({"task_id": "abcd1234", "instruction": "also the cactus"}),
        _ => json!({"task_id": "abcd1234"}),
    }
}

#[tokio::test]
async fn guests_can_neither_see_nor_call_task_tools() {
    let (control, registry) = setup();
    assert!(registry.names(Role::Guest).is_empty());
    let guest = ctx(Role::Guest);
    for tool in NAMES {
        let outcome = call(&registry, &guest, tool, valid_args(tool)).await;
        assert_eq!(outcome.kind, OutcomeKind::PermissionDenied, "{tool}");
    }
    assert!(control.calls().is_empty());
    for tool in NAMES {
        let tool = registry.get(tool).unwrap();
        assert_eq!(
            (tool.visibility(), tool.min_role()),
            (Visibility::Discoverable, Role::User)
        );
    }
}

#[tokio::test]
async fn forged_owner_or_role_arguments_are_refused_by_the_schema_gate() {
    let (control, registry) = setup();
    let user = ctx(Role::User);
    let forged = [
        ("cancel_task", json!({"task_id": "x", "owner": "qq:admin"})),
        (
            "inject_task",
            json!({"task_id": "x", "instruction": "y", "owner": "qq:admin"}),
        ),
        ("create_subtask", json!({"intent": "x", "role": "admin"})),
        (
            "create_subtask",
            json!({"intent": "x", "stream_id": "other"}),
        ),
        ("list_my_tasks", json!({"owner": "qq:admin"})),
    ];
    for (tool, args) in forged {
        let outcome = call(&registry, &user, tool, args.clone()).await;
        assert_eq!(outcome.kind, OutcomeKind::InvalidArguments, "{tool} {args}");
    }
    assert!(control.calls().is_empty(), "{:?}", control.calls());
}

#[tokio::test]
async fn owner_stream_and_role_come_from_the_task() {
    let (control, registry) = setup();
    let user = ctx(Role::User);
    for tool in NAMES {
        assert!(
            call(&registry, &user, tool, valid_args(tool)).await.is_ok(),
            "{tool}"
        );
    }
    call(
        &registry,
        &user,
        "create_subtask",
        json!({"intent": "ping", "level": "instant"}),
    )
    .await;
    let calls = control.calls();
    let methods: Vec<&str> = calls.iter().map(|c| c.method).collect();
    assert_eq!(methods, ["list", "create", "inject", "cancel", "create"]);
    for c in &calls {
        assert_eq!(
            (c.owner.as_str(), c.stream.as_str(), c.role),
            (OWNER, STREAM, Role::User)
        );
    }
    assert_eq!(calls[0].args, [LIST_LIMIT.to_string()]);
    assert_eq!(calls[1].args, ["water the plants", "Agent"]);
    assert_eq!(calls[2].args, ["abcd1234", "also the cactus"]);
    assert_eq!(calls[3].args, ["abcd1234"]);
    assert_eq!(calls[4].args, ["ping", "Instant"]);
}

#[tokio::test]
async fn results_are_short_id_title_and_status() {
    let (_, registry) = setup();
    let user = ctx(Role::User);
    let outcome = call(&registry, &user, "list_my_tasks", json!({})).await;
    let first = outcome.value["tasks"][0].as_object().unwrap();
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(first["id"].as_str().unwrap().len(), 8);
    assert_eq!(first["title"], "water the plants");
    assert_eq!(first["status"], "running");
    let outcome = call(
        &registry,
        &user,
        "cancel_task",
        json!({"task_id": "abcd1234"}),
    )
    .await;
    assert_eq!(outcome.value["task"]["status"], "cancelled");
}

#[tokio::test]
async fn refusals_of_the_task_control_reach_the_model_and_blank_fields_stop_early() {
    let (control, registry) = setup();
    let user = ctx(Role::User);
    let outcome = call(&registry, &user, "create_subtask", json!({"intent": "  "})).await;
    assert!(
        error_of(&outcome).contains("intent is empty"),
        "{outcome:?}"
    );
    assert!(control.calls().is_empty());
    *control.refuse.lock().unwrap() = Some("task abcd1234 belongs to someone else".into());
    let outcome = call(
        &registry,
        &user,
        "cancel_task",
        json!({"task_id": "abcd1234"}),
    )
    .await;
    assert_eq!(outcome.kind, OutcomeKind::Failed);
    assert!(
        error_of(&outcome).contains("belongs to someone else"),
        "{outcome:?}"
    );
}
