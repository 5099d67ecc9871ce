//! The registry's gates: presentation and execution agree for every role, refusals never run a
//! handler, and arguments are checked before any handler sees them.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::{Counting, ctx, tool};
use mai_core::role::Role;
use mai_core::tool::{
    OutcomeKind, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, ToolRegistry,
    TypedTool, Visibility, discovery,
};
use proptest::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

fn role_strategy() -> impl Strategy<Value = Role> {
    prop_oneof![Just(Role::Guest), Just(Role::User), Just(Role::Admin)]
}

fn visibility_strategy() -> impl Strategy<Value = Visibility> {
    prop_oneof![Just(Visibility::Essential), Just(Visibility::Discoverable)]
}

#[derive(Debug, Clone)]
enum Op {
    Register(usize, Visibility, Role),
    Unregister(usize),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..12usize, visibility_strategy(), role_strategy())
            .prop_map(|(n, v, r)| Op::Register(n, v, r)),
        1 => (0..12usize).prop_map(Op::Unregister),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A tool is presented to a role iff `execute` does not refuse it for permission, essential
    /// tools always appear for roles ≥ min_role, and replace/unregister keep snapshots right.
    #[test]
    fn presentation_and_execution_agree(ops in proptest::collection::vec(op_strategy(), 1..40),
                                        calls in proptest::collection::vec((0..12usize, role_strategy()), 1..20)) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let registry = ToolRegistry::new();
        // The model of what should be registered: name -> (visibility, min_role).
        let mut expected: std::collections::BTreeMap<String, (Visibility, Role)> = Default::default();
        let handler = Arc::new(Counting::default());
        for op in &ops {
            match *op {
                Op::Register(n, visibility, min_role) => {
                    let name = format!("tool_{n}");
                    registry.register(tool(&name, visibility, min_role, handler.clone()));
                    expected.insert(name, (visibility, min_role));
                }
                Op::Unregister(n) => {
                    let name = format!("tool_{n}");
                    prop_assert_eq!(registry.unregister(&name).is_some(), expected.remove(&name).is_some());
                }
            }
        }
        prop_assert_eq!(registry.len(), expected.len());
        for role in Role::ALL {
            let presented: Vec<String> = registry.presented(role).iter().map(|t| t.name().to_owned()).collect();
            let essential: Vec<String> = registry.list_essential(role).iter().map(|t| t.name().to_owned()).collect();
            let names = registry.names(role);
            for (name, &(visibility, min_role)) in &expected {
                let allowed = role >= min_role;
                prop_assert_eq!(presented.contains(name), allowed, "{} for {}", name, role);
                prop_assert_eq!(names.contains(name), allowed);
                if visibility == Visibility::Essential {
                    prop_assert_eq!(essential.contains(name), allowed);
                }
            }
            prop_assert_eq!(presented.len(), names.len());
        }
        for (n, role) in calls {
            let name = format!("tool_{n}");
            let before = handler.0.load(Ordering::SeqCst);
            let outcome = runtime.block_on(registry.execute(&name, role, json!({"n": 1}), &ctx(role)));
            let presented = registry.presented(role).iter().any(|t| t.name() == name);
            match expected.get(&name) {
                None => prop_assert_eq!(outcome.kind, OutcomeKind::UnknownTool),
                Some(_) => {
                    prop_assert_eq!(outcome.kind != OutcomeKind::PermissionDenied, presented);
                    prop_assert_eq!(outcome.is_ok(), presented);
                }
            }
            let ran = handler.0.load(Ordering::SeqCst) - before;
            prop_assert_eq!(ran, usize::from(outcome.is_ok()), "handler ran only on success");
        }
    }
}

#[tokio::test]
async fn permission_denied_never_runs_the_handler() {
    let registry = ToolRegistry::new();
    let handler = Arc::new(Counting::default());
    registry.register(tool(
        "run_command",
        Visibility::Discoverable,
        Role::Admin,
        handler.clone(),
    ));
    for role in [Role::Guest, Role::User] {
        let outcome = registry
            .execute("run_command", role, json!({}), &ctx(role))
            .await;
        assert_eq!(outcome.kind, OutcomeKind::PermissionDenied);
        assert_eq!(outcome.value["success"], json!(false));
        assert_eq!(
            outcome.error_message().unwrap(),
            format!(
                "permission denied: tool `run_command` requires role admin, this task runs as {role}"
            )
        );
    }
    assert_eq!(handler.0.load(Ordering::SeqCst), 0);
    let outcome = registry
        .execute("run_command", Role::Admin, json!({}), &ctx(Role::Admin))
        .await;
    assert!(outcome.is_ok());
    assert_eq!(handler.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn unknown_tools_get_the_closest_names_the_role_may_use() {
    let registry = ToolRegistry::new();
    let handler = Arc::new(Counting::default());
    registry.register(tool(
        "search_memory",
        Visibility::Discoverable,
        Role::Guest,
        handler.clone(),
    ));
    registry.register(tool(
        "search_users",
        Visibility::Discoverable,
        Role::Guest,
        handler.clone(),
    ));
    registry.register(tool(
        "search_admin_logs",
        Visibility::Discoverable,
        Role::Admin,
        handler.clone(),
    ));
    let outcome = registry
        .execute("search_memroy", Role::Guest, json!({}), &ctx(Role::Guest))
        .await;
    assert_eq!(outcome.kind, OutcomeKind::UnknownTool);
    let message = outcome.error_message().unwrap();
    assert!(
        message.starts_with("unknown tool `search_memroy`; did you mean `search_memory`"),
        "{message}"
    );
    assert!(
        !message.contains("search_admin_logs"),
        "never suggests tools above the role: {message}"
    );
    let outcome = registry
        .execute("qqqqqqqq", Role::Guest, json!({}), &ctx(Role::Guest))
        .await;
    assert!(
        outcome
            .error_message()
            .unwrap()
            .contains("call one of the tools listed")
    );
}

#[tokio::test]
async fn bad_arguments_are_results_naming_the_field() {
    let registry = ToolRegistry::new();
    let handler = Arc::new(Counting::default());
    registry.register(tool(
        "count",
        Visibility::Discoverable,
        Role::Guest,
        handler.clone(),
    ));
    for (args, needle) in [
        (json!([1, 2]), "must be a JSON object, got array"),
        (
            json!({"n": "five"}),
            "field `n`: expected integer, got string",
        ),
        (json!("{broken"), "not valid JSON"),
    ] {
        let outcome = registry
            .execute("count", Role::Guest, args, &ctx(Role::Guest))
            .await;
        assert_eq!(outcome.kind, OutcomeKind::InvalidArguments);
        assert!(
            outcome.error_message().unwrap().contains(needle),
            "{:?}",
            outcome.value
        );
    }
    assert_eq!(handler.0.load(Ordering::SeqCst), 0);
}

#[test]
fn invalid_and_reserved_names_are_refused_at_registration() {
    let handler = Arc::new(Counting::default());
    let schema = json!({"type": "object"});
    for bad in [
        "",
        "has space",
        "dot.name",
        "ünïcode",
        &"x".repeat(65),
        "semi;colon",
    ] {
        let err = ToolDefinition::new(
            bad,
            "",
            schema.clone(),
            Visibility::Discoverable,
            Role::User,
            handler.clone(),
        )
        .unwrap_err();
        assert!(
            matches!(err, ToolDefinitionError::InvalidName(_)),
            "{bad}: {err}"
        );
    }
    assert!(
        ToolDefinition::new(
            "x".repeat(64),
            "",
            schema.clone(),
            Visibility::Discoverable,
            Role::User,
            handler.clone()
        )
        .is_ok()
    );
    for reserved in discovery::SYNTHETIC_NAMES {
        let err = ToolDefinition::new(
            reserved,
            "",
            schema.clone(),
            Visibility::Discoverable,
            Role::User,
            handler.clone(),
        )
        .unwrap_err();
        assert_eq!(err, ToolDefinitionError::ReservedName(reserved.into()));
    }
    let err = ToolDefinition::new(
        "arr",
        "",
        json!({"type": "array"}),
        Visibility::Discoverable,
        Role::User,
        handler.clone(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("\"type\": \"object\""), "{err}");
    let err = ToolDefinition::new(
        "bad_schema",
        "",
        json!({"type": "object", "properties": {"a": {"type": "nope"}}}),
        Visibility::Discoverable,
        Role::User,
        handler,
    )
    .unwrap_err();
    assert!(
        matches!(err, ToolDefinitionError::InvalidSchema { .. }),
        "{err}"
    );
}

/// A typed tool: its schema comes from the struct, its handler gets the struct.
struct Greet;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GreetArgs {
    /// Who to greet.
    name: String,
    /// How many times.
    #[serde(default)]
    times: Option<u8>,
}

impl TypedTool for Greet {
    type Args = GreetArgs;
    async fn call(&self, ctx: &ToolContext, args: GreetArgs) -> Result<Value, ToolError> {
        if args.name == "fail" {
            return Err(ToolError::new("cannot greet `fail`"));
        }
        if args.name == "panic" {
            panic!("bug in a tool");
        }
        let times = args.times.unwrap_or(1);
        Ok(
            json!({"success": true, "text": format!("hi {} x{times} from {}", args.name, ctx.role())}),
        )
    }
}

#[tokio::test]
async fn typed_tools_derive_their_schema_and_failures_are_results() {
    let registry = ToolRegistry::new();
    registry.register(
        ToolDefinition::typed(
            "greet",
            "Say hello.",
            Visibility::Discoverable,
            Role::User,
            Greet,
        )
        .unwrap(),
    );
    let def = registry.get("greet").unwrap();
    let schema = def.parameters();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["name"]));
    assert_eq!(schema["properties"]["name"]["description"], "Who to greet.");
    assert_eq!(schema["additionalProperties"], json!(false));
    assert!(schema.get("$schema").is_none() && schema.get("title").is_none());

    let ok = registry
        .execute(
            "greet",
            Role::User,
            json!({"name": "ann", "times": 2}),
            &ctx(Role::User),
        )
        .await;
    assert_eq!(ok.value["text"], "hi ann x2 from user");
    let wrong = registry
        .execute(
            "greet",
            Role::User,
            json!({"name": "ann", "times": 300}),
            &ctx(Role::User),
        )
        .await;
    assert_eq!(
        wrong.kind,
        OutcomeKind::InvalidArguments,
        "{:?}",
        wrong.value
    );
    assert!(wrong.error_message().unwrap().contains("field `times`"));
    let failed = registry
        .execute(
            "greet",
            Role::User,
            json!({"name": "fail"}),
            &ctx(Role::User),
        )
        .await;
    assert_eq!(failed.kind, OutcomeKind::Failed);
    assert_eq!(
        failed.value,
        json!({"success": false, "error": "tool `greet` failed: cannot greet `fail`"})
    );
    let crashed = registry
        .execute(
            "greet",
            Role::User,
            json!({"name": "panic"}),
            &ctx(Role::User),
        )
        .await;
    assert_eq!(crashed.kind, OutcomeKind::Failed);
    assert!(crashed.error_message().unwrap().contains("crashed"));
}

#[test]
fn replacing_keeps_the_position_and_swaps_atomically() {
    let registry = ToolRegistry::new();
    let handler = Arc::new(Counting::default());
    registry.register(tool(
        "a",
        Visibility::Discoverable,
        Role::Guest,
        handler.clone(),
    ));
    registry.register(tool(
        "b",
        Visibility::Discoverable,
        Role::Guest,
        handler.clone(),
    ));
    let before = registry.presented(Role::Guest);
    let replaced = registry.register(tool(
        "a",
        Visibility::Discoverable,
        Role::Admin,
        handler.clone(),
    ));
    assert_eq!(replaced.unwrap().min_role(), Role::Guest);
    // An earlier snapshot is unaffected; the new one reflects the change.
    assert_eq!(before.len(), 2);
    assert_eq!(&*registry.names(Role::Guest), ["b"]);
    assert_eq!(&*registry.names(Role::Admin), ["a", "b"]);
    registry.edit(|e| {
        e.unregister("b");
        e.register(tool(
            "c",
            Visibility::Essential,
            Role::User,
            handler.clone(),
        ));
    });
    assert_eq!(&*registry.names(Role::Admin), ["a", "c"]);
    assert_eq!(registry.list_essential(Role::User).len(), 1);
    assert_eq!(registry.list_discoverable(Role::User).len(), 0);
}

#[test]
fn synthetic_discovery_answers_without_being_registered() {
    let registry = ToolRegistry::new();
    let handler = Arc::new(Counting::default());
    registry.register(tool(
        "ask_user",
        Visibility::Essential,
        Role::User,
        handler.clone(),
    ));
    registry.register(tool(
        "search_memory",
        Visibility::Discoverable,
        Role::Guest,
        handler.clone(),
    ));
    registry.register(tool(
        "run_command",
        Visibility::Discoverable,
        Role::Admin,
        handler.clone(),
    ));
    assert!(registry.get("list_tools").is_none());
    assert!(
        !registry
            .names(Role::Admin)
            .iter()
            .any(|n| discovery::is_synthetic(n))
    );

    let listed = discovery::dispatch(&registry, "list_tools", Role::User, &json!({})).unwrap();
    let names: Vec<&str> = listed.value["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["search_memory"],
        "discoverable only, and only up to the role"
    );

    let schema = discovery::dispatch(
        &registry,
        "get_tool_schema",
        Role::Guest,
        &json!({"name": "search_memory"}),
    )
    .unwrap();
    assert!(schema.is_ok());
    assert_eq!(schema.value["parameters"]["type"], "object");
    for (name, role) in [
        ("run_command", Role::User),
        ("ask_user", Role::Admin),
        ("nope", Role::Admin),
    ] {
        let refused =
            discovery::dispatch(&registry, "get_tool_schema", role, &json!({"name": name}))
                .unwrap();
        assert_eq!(
            refused.kind,
            OutcomeKind::PermissionDenied,
            "{name} for {role}"
        );
    }
    let missing =
        discovery::dispatch(&registry, "get_tool_schema", Role::Admin, &json!({})).unwrap();
    assert_eq!(missing.kind, OutcomeKind::InvalidArguments);
    assert!(discovery::dispatch(&registry, "search_memory", Role::Admin, &json!({})).is_none());
    assert_eq!(handler.0.load(Ordering::SeqCst), 0);
}
