//! Tool argument validation: `ToolRegistry::admit` / `execute` with arbitrary JSON (or the raw
//! text a provider leaves when the model's arguments were not JSON) against real schemas (`read`,
//! `write`, `run_command`) and a schema using most JSON Schema keywords (`probe`, whose handler
//! echoes what it received). Asserts the gates, not just "no panic":
//! - admitted ⇔ the role may use the tool and an independent validator accepts the arguments;
//! - admitted arguments are the given ones (`null` read as `{}`), always an object;
//! - a refusal is `{"success": false, "error": …}` with a short message;
//! - `execute` reaches the handler exactly when `admit` admits, with the admitted arguments.
#![no_main]

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use libfuzzer_sys::fuzz_target;
use mai_core::config::Config;
use mai_core::ids::StreamId;
use mai_core::role::{Role, require};
use mai_core::task::TaskId;
use mai_core::tool::{
    FixedRole, ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Refusals go back to the model every round: they must stay short whatever it sent.
const MAX_ERROR_CHARS: usize = 2_000;

struct Echo;

#[async_trait]
impl ToolHandler for Echo {
    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        Ok(json!({"echo": args}))
    }
}

struct Fixture {
    registry: ToolRegistry,
    names: Vec<String>,
    _root: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
}

fn probe_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": 64},
            "count": {"type": "integer", "minimum": 0, "maximum": 100},
            "ratio": {"type": "number", "exclusiveMaximum": 1.5},
            "mode": {"enum": ["a", "b", 3, null]},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5, "uniqueItems": true},
            "nested": {
                "type": "object",
                "properties": {"id": {"type": ["string", "integer"]}, "deep": {"$ref": "#/properties/nested"}},
                "required": ["id"],
                "additionalProperties": false
            },
            "pattern": {"type": "string", "pattern": "^[a-z]+[0-9]*$"},
            "either": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]}
        },
        "required": ["text"],
        "additionalProperties": false
    })
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let registry = ToolRegistry::new();
    let tools = mai_tools::files::file_tools(root.path().join("files"))
        .unwrap_or_else(|e| panic!("file tools: {e}"));
    for tool in tools {
        registry.register(tool);
    }
    registry.register(
        mai_tools::shell::run_command_tool().unwrap_or_else(|e| panic!("run_command: {e}")),
    );
    for (name, role) in [("probe", Role::Guest), ("probe_admin", Role::Admin)] {
        let tool = ToolDefinition::new(
            name,
            "echoes its arguments",
            probe_schema(),
            Visibility::Discoverable,
            role,
            Arc::new(Echo),
        )
        .unwrap_or_else(|e| panic!("probe: {e}"));
        registry.register(tool);
    }
    let names = registry.all().iter().map(|t| t.name().to_owned()).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    Fixture {
        registry,
        names,
        _root: root,
        runtime,
    }
});

fn context(role: Role) -> ToolContext {
    ToolContext::new(
        TaskId::new(),
        "qq:1".parse().unwrap_or_else(|e| panic!("owner: {e:?}")),
        StreamId::new("s1").unwrap_or_else(|e| panic!("stream: {e:?}")),
        "qq",
        Arc::new(FixedRole(role)),
        CancellationToken::new(),
        Arc::new(Config::default()),
    )
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let fixture = &*FIXTURE;
    let role = Role::ALL[usize::from(selector % 3)];
    // High bit: the tool name is the input's first line (hallucinated names, near misses).
    let (name, raw_args) = if selector & 0x80 != 0 {
        let split = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let name = String::from_utf8_lossy(&rest[..split]).into_owned();
        (name, rest.get(split + 1..).unwrap_or_default())
    } else {
        let index = usize::from(selector >> 2) % fixture.names.len();
        (fixture.names[index].clone(), rest)
    };
    // What mai-llm hands over: parsed JSON, or the raw text when it was not JSON.
    let args = serde_json::from_slice::<Value>(raw_args)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(raw_args).into_owned()));

    let tool = fixture.registry.get(&name);
    let admitted = fixture.registry.admit(&name, role, args.clone());
    match &admitted {
        Ok((admitted_tool, admitted_args)) => {
            let tool = tool.unwrap_or_else(|| panic!("admitted unknown tool {name:?}"));
            assert_eq!(admitted_tool.name(), name);
            assert!(
                require(role, tool.min_role()).is_ok(),
                "{name} admitted for {role}"
            );
            let expected = if args.is_null() {
                json!({})
            } else {
                args.clone()
            };
            assert_eq!(admitted_args, &expected);
            let validator = jsonschema::validator_for(tool.parameters())
                .unwrap_or_else(|e| panic!("schema of {name}: {e}"));
            assert!(
                validator.is_valid(admitted_args),
                "{name}: admitted invalid {args}"
            );
        }
        Err(refusal) => {
            assert!(!refusal.is_ok());
            assert_eq!(refusal.value.get("success"), Some(&Value::Bool(false)));
            let message = refusal
                .error_message()
                .unwrap_or_else(|| panic!("refusal without a message: {}", refusal.value));
            let chars = message.chars().count();
            assert!(
                chars <= MAX_ERROR_CHARS,
                "refusal of {chars} chars: {message:.200}"
            );
            if let Some(tool) = &tool
                && require(role, tool.min_role()).is_ok()
                && (args.is_object() || args.is_null())
            {
                let validator = jsonschema::validator_for(tool.parameters())
                    .unwrap_or_else(|e| panic!("schema of {name}: {e}"));
                let given = if args.is_null() {
                    json!({})
                } else {
                    args.clone()
                };
                assert!(!validator.is_valid(&given), "{name}: refused valid {args}");
            }
        }
    }
    // Only the echo tools run: the real ones would touch the filesystem or spawn shells.
    if name.starts_with("probe") {
        let ctx = context(role);
        let outcome = fixture
            .runtime
            .block_on(fixture.registry.execute(&name, role, args, &ctx));
        match admitted {
            Ok((_, admitted_args)) => {
                assert!(outcome.is_ok(), "{outcome:?}");
                assert_eq!(outcome.value, json!({"echo": admitted_args}));
            }
            Err(refusal) => assert_eq!(outcome, refusal),
        }
    }
});
