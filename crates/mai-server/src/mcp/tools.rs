//! The planner tools in MCP terms: each `ToolDefinition` of the planner registry as an MCP `Tool`
//! (with `_meta.visibility`), and a tool's JSON outcome as a `CallToolResult`.
//!
//! Must not: invent tools or schemas of its own — name, description and input schema are the
//! registry's, so the MCP server, the HTTP API and the model see one definition.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, Tool};
use serde_json::{Value, json};

use mai_core::tool::{ToolDefinition, ToolOutcome, ToolRegistry};
use mai_engine::{PLANNER_TOOLS, PlannerVisibility};

/// The planner tools of `registry` in spec order (docs/design.md, "The planner"). A spec tool
/// missing from the registry is left out (and logged): listing a tool that cannot be called would
/// be worse.
pub(crate) fn planner_tools(registry: &ToolRegistry) -> Vec<Tool> {
    PLANNER_TOOLS
        .iter()
        .filter_map(|(name, visibility)| match registry.get(name) {
            Some(definition) => Some(mcp_tool(&definition, *visibility)),
            None => {
                tracing::warn!(
                    tool = name,
                    "planner tool missing from the planner registry"
                );
                None
            }
        })
        .collect()
}

fn mcp_tool(definition: &ToolDefinition, visibility: PlannerVisibility) -> Tool {
    let schema = match definition.parameters() {
        Value::Object(schema) => schema.clone(),
        // ToolDefinition::new refuses non-object schemas; this only keeps the type honest.
        _ => JsonObject::from_iter([("type".to_owned(), json!("object"))]),
    };
    let mut meta = MetaObject::new();
    meta.insert("visibility".into(), visibility.as_str().into());
    Tool::new(
        definition.name().to_owned(),
        definition.description().to_owned(),
        Arc::new(schema),
    )
    .with_meta(meta)
}

/// A planner tool outcome as an MCP result: the JSON as text (what every MCP client shows a
/// model), the same JSON as `structuredContent` when it is an object, and `isError` when the
/// call was refused or failed (`{"success": false, "error": …}`), so the host's model reads the
/// reason and can correct itself.
pub(crate) fn call_result(outcome: ToolOutcome) -> CallToolResult {
    let failed =
        !outcome.is_ok() || outcome.value.get("success").and_then(Value::as_bool) == Some(false);
    let text = ContentBlock::text(outcome.value.to_string());
    let mut result = if failed {
        CallToolResult::error(vec![text])
    } else {
        CallToolResult::success(vec![text])
    };
    if outcome.value.is_object() {
        result.structured_content = Some(outcome.value);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use mai_core::tool::OutcomeKind;

    #[test]
    fn an_object_outcome_is_text_and_structured_content() {
        let result = call_result(ToolOutcome::ok(json!({"success": true, "tasks": []})));
        assert_eq!(result.is_error, Some(false));
        assert_eq!(
            result.structured_content,
            Some(json!({"success": true, "tasks": []}))
        );
        let text = result.content[0].as_text().map(|t| t.text.clone());
        assert_eq!(text.as_deref(), Some(r#"{"success":true,"tasks":[]}"#));
    }

    #[test]
    fn a_refusal_or_reported_failure_is_an_error_result() {
        let refused = call_result(ToolOutcome::error(OutcomeKind::InvalidArguments, "bad"));
        assert_eq!(refused.is_error, Some(true));
        assert_eq!(
            refused.structured_content,
            Some(json!({"success": false, "error": "bad"}))
        );
        let reported = call_result(ToolOutcome::ok(json!({"success": false, "error": "no"})));
        assert_eq!(reported.is_error, Some(true));
    }

    #[test]
    fn a_non_object_outcome_is_text_only() {
        let result = call_result(ToolOutcome::ok(json!(["a", "b"])));
        assert_eq!(result.is_error, Some(false));
        assert_eq!(result.structured_content, None);
        assert_eq!(
            result.content[0].as_text().map(|t| t.text.as_str()),
            Some(r#"["a","b"]"#)
        );
    }
}
