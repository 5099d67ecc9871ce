//! `list_mcp_tools` and `call_mcp_tool`: the planner's two proxy tools onto every configured MCP
//! server, so MCP tools need no planner tool of their own each (SYSTEM.md §7).
//!
//! They go through [`McpProxy`]; without one (no MCP manager wired) they answer with a clear
//! "no MCP servers are configured" result rather than failing, so a planner that tries them
//! learns the capability is absent instead of retrying.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::lazy;
use mai_core::capabilities::McpProxy;
use mai_core::role::Role;
use mai_core::tool::{
    ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
};

const LIST: &str = "List the tools of the configured external MCP servers (server, tool, \
description). Use it to discover extra capabilities (search engines, databases, services) \
before call_mcp_tool; not for background sub-agents (subagent_list).";
const CALL: &str = "Call one tool of a configured external MCP server by server and tool name \
(from list_mcp_tools) with its arguments, and get its result now. For multi-step work that should \
run in the background use subagent_create instead.";

/// What both tools answer when no MCP manager is wired.
pub(crate) const NO_MCP: &str = "no MCP servers are configured; add servers under [mcp] in the \
config to use MCP tools";

pub(super) fn mcp_tools(
    mcp: Option<Arc<dyn McpProxy>>,
) -> Result<Vec<ToolDefinition>, ToolDefinitionError> {
    Ok(vec![
        ToolDefinition::typed(
            "list_mcp_tools",
            LIST,
            Visibility::Discoverable,
            Role::Admin,
            {
                let mcp = mcp.clone();
                lazy(move || ListMcpTools(mcp.clone()))
            },
        )?,
        ToolDefinition::typed(
            "call_mcp_tool",
            CALL,
            Visibility::Discoverable,
            Role::Admin,
            lazy(move || CallMcpTool(mcp.clone())),
        )?,
    ])
}

// No `deny_unknown_fields`: hosts add context keys such as `chat_id`.
#[derive(Debug, Deserialize, JsonSchema)]
struct ListArgs {}

struct ListMcpTools(Option<Arc<dyn McpProxy>>);

impl TypedTool for ListMcpTools {
    type Args = ListArgs;

    async fn call(&self, _ctx: &ToolContext, _args: ListArgs) -> Result<Value, ToolError> {
        let Some(mcp) = &self.0 else {
            return Ok(json!({"success": true, "tools": [], "note": NO_MCP}));
        };
        let tools = mcp.list_tools().await.map_err(|e| {
            ToolError::new(format!("could not list the MCP tools: {e}; retry later"))
        })?;
        let tools: Vec<Value> = tools
            .into_iter()
            .map(|(server, tool, description)| {
                json!({"server": server, "tool": tool, "description": description})
            })
            .collect();
        Ok(json!({"success": true, "count": tools.len(), "tools": tools}))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CallArgs {
    /// The server name, as list_mcp_tools shows it.
    server: String,
    /// The tool name on that server.
    tool: String,
    /// The tool's arguments as a JSON object (default: none).
    arguments: Option<serde_json::Map<String, Value>>,
}

struct CallMcpTool(Option<Arc<dyn McpProxy>>);

impl TypedTool for CallMcpTool {
    type Args = CallArgs;

    async fn call(&self, _ctx: &ToolContext, args: CallArgs) -> Result<Value, ToolError> {
        let Some(mcp) = &self.0 else {
            return Err(ToolError::new(NO_MCP));
        };
        let (server, tool) = (args.server.trim(), args.tool.trim());
        if server.is_empty() || tool.is_empty() {
            return Err(ToolError::new(
                "give both server and tool (list_mcp_tools shows them)",
            ));
        }
        let arguments = Value::Object(args.arguments.unwrap_or_default());
        let result = mcp.call_tool(server, tool, arguments).await.map_err(|e| {
            ToolError::new(format!(
                "MCP tool `{tool}` of server `{server}` failed: {e}"
            ))
        })?;
        Ok(json!({"success": true, "server": server, "tool": tool, "result": result}))
    }
}
