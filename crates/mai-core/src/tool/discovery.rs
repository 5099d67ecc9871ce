//! The synthetic discovery tools `list_tools` and `get_tool_schema` (docs/design.md, "Tools").
//!
//! They are a fallback for models that still call them (old history, habit): never registered,
//! never presented, answered at dispatch time from the registry's role view. `get_tool_schema`
//! refuses essential tools and tools above the caller's role, exactly like the gates.

use serde_json::{Value, json};

use super::definition::Visibility;
use super::outcome::{OutcomeKind, ToolOutcome};
use super::registry::ToolRegistry;
use crate::role::{Role, require};

pub const LIST_TOOLS: &str = "list_tools";
pub const GET_TOOL_SCHEMA: &str = "get_tool_schema";
pub const SYNTHETIC_NAMES: [&str; 2] = [LIST_TOOLS, GET_TOOL_SCHEMA];

/// Whether `name` is answered here instead of by the registry.
pub fn is_synthetic(name: &str) -> bool {
    SYNTHETIC_NAMES.contains(&name)
}

/// Answers a synthetic call, or `None` if `name` is not synthetic.
pub fn dispatch(
    registry: &ToolRegistry,
    name: &str,
    role: Role,
    args: &Value,
) -> Option<ToolOutcome> {
    match name {
        LIST_TOOLS => Some(list_tools(registry, role)),
        GET_TOOL_SCHEMA => Some(get_tool_schema(registry, role, args)),
        _ => None,
    }
}

/// Names and descriptions of the discoverable tools `role` may use.
pub fn list_tools(registry: &ToolRegistry, role: Role) -> ToolOutcome {
    let tools: Vec<Value> = registry
        .list_discoverable(role)
        .iter()
        .map(|t| json!({"name": t.name(), "description": t.description()}))
        .collect();
    ToolOutcome::ok(json!({
        "success": true,
        "tools": tools,
        "note": "these tools are already in your tool list; call them directly by name",
    }))
}

/// The full schema of one discoverable tool `role` may use.
pub fn get_tool_schema(registry: &ToolRegistry, role: Role, args: &Value) -> ToolOutcome {
    let Some(name) = args
        .get("name")
        .or_else(|| args.get("tool_name"))
        .and_then(Value::as_str)
    else {
        return ToolOutcome::error(
            OutcomeKind::InvalidArguments,
            "invalid arguments for `get_tool_schema`: missing required field `name`",
        );
    };
    let refused = || {
        ToolOutcome::error(
            OutcomeKind::PermissionDenied,
            format!("no discoverable tool `{name}` is available to this task"),
        )
    };
    let Some(tool) = registry.get(name) else {
        return refused();
    };
    if tool.visibility() != Visibility::Discoverable || require(role, tool.min_role()).is_err() {
        return refused();
    }
    ToolOutcome::ok(json!({
        "success": true,
        "name": tool.name(),
        "description": tool.description(),
        "parameters": tool.parameters(),
    }))
}
