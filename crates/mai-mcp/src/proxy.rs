//! The manager as the planner's `McpProxy`: `list_mcp_tools` / `call_mcp_tool` reach the very
//! same servers, names, timeouts and roles as the agent loop's `mcp_*` tools.

use async_trait::async_trait;
use mai_core::capabilities::McpProxy;
use mai_core::role::{Role, require};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::manager::McpManager;

#[async_trait]
impl McpProxy for McpManager {
    async fn list_tools(&self, role: Role) -> Result<Vec<(String, String, String)>, String> {
        Ok(self
            .tools()
            .into_iter()
            .filter(|tool| require(role, tool.min_role).is_ok())
            .map(|tool| (tool.server, tool.raw_name, tool.description))
            .collect())
    }

    async fn call_tool(
        &self,
        role: Role,
        server: &str,
        tool: &str,
        args: Value,
    ) -> Result<Value, String> {
        // The planner's call has no task to cancel it; the per-call timeout still applies.
        self.call(role, server, tool, args, &CancellationToken::new())
            .await
            .map_err(|e| e.to_string())
    }
}
