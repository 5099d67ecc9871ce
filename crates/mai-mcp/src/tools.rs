//! MCP tools as registry tools: each becomes a discoverable `ToolDefinition` whose `min_role` is
//! the tool's configured role (`[[mcp.servers]] tool_roles` entry, else the server's `min_role`,
//! admin by default) and whose handler calls the manager with the exact (server, raw name) it was
//! built for and the calling task's role, so the manager checks the role again at call time.
//!
//! Owns the one function that syncs a registry with the manager's current tool set. Must not
//! touch registry tools it did not add: it removes only the names its previous apply added.

use std::sync::Arc;

use async_trait::async_trait;
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use serde_json::{Value, json};

use crate::manager::{McpManager, McpTool};

struct McpToolHandler {
    manager: McpManager,
    server: String,
    raw_name: String,
}

#[async_trait]
impl ToolHandler for McpToolHandler {
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        self.manager
            .call(
                ctx.role(),
                &self.server,
                &self.raw_name,
                args,
                ctx.cancel_token(),
            )
            .await
            .map_err(ToolError::new)
    }
}

/// What one apply changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Names registered now.
    pub registered: Vec<String>,
    /// Names from the previous apply that are gone.
    pub removed: Vec<String>,
    /// Tools skipped because the registry refused them (e.g. an invalid input schema).
    pub refused: Vec<(String, String)>,
}

/// Makes `registry`'s MCP tools equal to `manager`'s current tool set in one atomic swap: a
/// running loop sees either the old set or the new one. Call after start, after a reconcile and
/// whenever [`McpManager::subscribe`] signals a change (a reload that changes only roles
/// signals one too, so the registry always carries the current roles).
pub fn apply_to_registry(manager: &McpManager, registry: &ToolRegistry) -> ApplyReport {
    let mut report = ApplyReport::default();
    let mut definitions = Vec::new();
    for tool in manager.tools() {
        match definition(manager, &tool) {
            Ok(def) => definitions.push(def),
            Err(e) => report.refused.push((tool.name.clone(), e.to_string())),
        }
    }
    let mut applied = manager.applied().lock().unwrap_or_else(|p| p.into_inner());
    let current: Vec<String> = definitions.iter().map(|d| d.name().to_owned()).collect();
    report.removed = applied
        .iter()
        .filter(|n| !current.contains(n))
        .cloned()
        .collect();
    registry.edit(|edit| {
        for name in applied.iter() {
            edit.unregister(name);
        }
        for def in definitions {
            edit.register(def);
        }
    });
    report.registered = current.clone();
    *applied = current;
    report
}

fn definition(
    manager: &McpManager,
    tool: &McpTool,
) -> Result<ToolDefinition, mai_core::tool::ToolDefinitionError> {
    let mut schema = tool.input_schema.clone();
    // Some servers omit `type` on argument-less tools; the registry (and model APIs) need an
    // object schema.
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("type").or_insert_with(|| json!("object"));
    } else {
        schema = json!({"type": "object"});
    }
    let description = if tool.description.is_empty() {
        format!("Tool `{}` of MCP server `{}`.", tool.raw_name, tool.server)
    } else {
        format!("{} (MCP server `{}`)", tool.description, tool.server)
    };
    ToolDefinition::new(
        tool.name.clone(),
        description,
        schema,
        Visibility::Discoverable,
        tool.min_role,
        Arc::new(McpToolHandler {
            manager: manager.clone(),
            server: tool.server.clone(),
            raw_name: tool.raw_name.clone(),
        }),
    )
    .map(|definition| definition.with_effects(Effect::CallsMcp))
}
