//! The manager as the planner's `McpProxy`: `list_mcp_tools` / `call_mcp_tool` reach the very
//! same servers, names and timeouts as the agent loop's `mcp_*` tools.

use async_trait::async_trait;
use mai_core::capabilities::McpProxy;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::manager::McpManager;

#[async_trait]
impl McpProxy for McpManager {
    async fn list_tools(&self) -> Result<Vec<(String, String, String)>, String> {
        Ok(self
            .tools()
            .into_iter()
            .map(|tool| (tool.server, tool.raw_name, tool.description))
            .collect())
    }

    async fn call_tool(&self, server: &str, tool: &str, args: Value) -> Result<Value, String> {
        // The planner's call has no task to cancel it; the per-call timeout still applies.
        self.call(server, tool, args, &CancellationToken::new())
            .await
            .map_err(|e| e.to_string())
    }
}
