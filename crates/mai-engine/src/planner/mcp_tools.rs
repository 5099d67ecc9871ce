//! `list_mcp_tools` and `call_mcp_tool`: the planner's two proxy tools onto every configured MCP
//! server, so MCP tools need no planner tool of their own each (see docs/design.md, "The planner").
//!
//! They go through [`McpProxy`] with the caller's role (`ctx.role()`: the speaker's), which lists
//! and calls only the MCP tools that role may use (`[[mcp.servers]] min_role` / `tool_roles`,
//! admin by default). The two tools themselves are open to every role: the per-tool roles are the
//! gate, the same ones the agent loop's `mcp_*` tools carry. Without a proxy (no MCP manager
//! wired) they answer with a clear "no MCP servers are configured" result rather than failing, so
//! a planner that tries them learns the capability is absent instead of retrying.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::lazy;
use mai_core::capabilities::McpProxy;
use mai_core::role::Role;
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
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
            Role::Guest,
            {
                let mcp = mcp.clone();
                lazy(move || ListMcpTools(mcp.clone()))
            },
        )?
        .with_effects(Effect::CallsMcp),
        ToolDefinition::typed(
            "call_mcp_tool",
            CALL,
            Visibility::Discoverable,
            Role::Guest,
            lazy(move || CallMcpTool(mcp.clone())),
        )?
        .with_effects(Effect::CallsMcp),
    ])
}

// No `deny_unknown_fields`: hosts add context keys such as `chat_id`.
#[derive(Debug, Deserialize, JsonSchema)]
struct ListArgs {}

struct ListMcpTools(Option<Arc<dyn McpProxy>>);

impl TypedTool for ListMcpTools {
    type Args = ListArgs;

    async fn call(&self, ctx: &ToolContext, _args: ListArgs) -> Result<Value, ToolError> {
        let Some(mcp) = &self.0 else {
            return Ok(json!({"success": true, "tools": [], "note": NO_MCP}));
        };
        let tools = mcp.list_tools(ctx.role()).await.map_err(|e| {
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

    async fn call(&self, ctx: &ToolContext, args: CallArgs) -> Result<Value, ToolError> {
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
        let result = mcp
            .call_tool(ctx.role(), server, tool, arguments)
            .await
            .map_err(|e| {
                ToolError::new(format!(
                    "MCP tool `{tool}` of server `{server}` failed: {e}"
                ))
            })?;
        Ok(json!({"success": true, "server": server, "tool": tool, "result": result}))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;

    use async_trait::async_trait;
    use mai_core::config::Config;
    use mai_core::ids::StreamId;
    use mai_core::task::TaskId;
    use mai_core::tool::{FixedRole, ToolOutcome, ToolRegistry};
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A proxy with one tool per role (`for_guest`, `for_user`, `for_admin`) that records every
    /// call it lets through.
    #[derive(Default)]
    struct RoleProxy {
        reached: Mutex<Vec<String>>,
    }

    fn role_of(tool: &str) -> Role {
        tool.trim_start_matches("for_").parse().unwrap()
    }

    #[async_trait]
    impl McpProxy for RoleProxy {
        async fn list_tools(&self, role: Role) -> Result<Vec<(String, String, String)>, String> {
            Ok(Role::ALL
                .into_iter()
                .filter(|tool_role| *tool_role <= role)
                .map(|r| ("srv".into(), format!("for_{r}"), String::new()))
                .collect())
        }

        async fn call_tool(
            &self,
            role: Role,
            _server: &str,
            tool: &str,
            _args: Value,
        ) -> Result<Value, String> {
            // The real proxy refuses before contacting the server; so does this one.
            if role < role_of(tool) {
                return Err(format!("`{tool}` requires role {}", role_of(tool)));
            }
            self.reached.lock().unwrap().push(tool.to_owned());
            Ok(json!("done"))
        }
    }

    fn ctx(role: Role) -> ToolContext {
        ToolContext::new(
            TaskId::new(),
            "qq:1".parse().unwrap(),
            StreamId::new("s1").unwrap(),
            "qq",
            Arc::new(FixedRole(role)),
            CancellationToken::new(),
            Arc::new(Config::default()),
        )
    }

    async fn run(registry: &ToolRegistry, role: Role, name: &str, args: Value) -> ToolOutcome {
        registry.execute(name, role, args, &ctx(role)).await
    }

    #[tokio::test]
    async fn the_proxy_tools_list_and_call_with_the_callers_role() {
        let proxy = Arc::new(RoleProxy::default());
        let registry = ToolRegistry::new();
        for tool in mcp_tools(Some(proxy.clone())).unwrap() {
            registry.register(tool);
        }

        let listed = run(&registry, Role::User, "list_mcp_tools", json!({})).await;
        assert!(listed.is_ok(), "{:?}", listed.value);
        let names: Vec<&Value> = listed.value["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["tool"])
            .collect();
        assert_eq!(names, [&json!("for_guest"), &json!("for_user")]);

        let args = |tool: &str| json!({"server": "srv", "tool": tool});
        let refused = run(&registry, Role::User, "call_mcp_tool", args("for_admin")).await;
        let message = refused.error_message().unwrap_or_default();
        assert!(message.contains("requires role admin"), "{message}");
        let done = run(&registry, Role::Guest, "call_mcp_tool", args("for_guest")).await;
        assert_eq!(done.value["result"], "done", "{:?}", done.value);
        let done = run(&registry, Role::Admin, "call_mcp_tool", args("for_admin")).await;
        assert_eq!(done.value["result"], "done", "{:?}", done.value);
        assert_eq!(*proxy.reached.lock().unwrap(), ["for_guest", "for_admin"]);
    }
}
