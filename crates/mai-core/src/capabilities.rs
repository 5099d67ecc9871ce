//! What agent-loop tools may ask of the engine, as traits: tools never import the engine.
//!
//! Every method takes the calling tool's [`ToolContext`]: the owner, stream and role come from
//! the task, never from tool arguments.

use async_trait::async_trait;

use crate::ids::StreamId;
use crate::role::Role;
use crate::task::{TaskLevel, TaskRecord};
use crate::tool::ToolContext;

/// Task management for the task-management tools (docs/tools.md).
#[async_trait]
pub trait TaskControl: Send + Sync + 'static {
    /// The tasks of the calling task's owner, newest first.
    async fn list_own_tasks(
        &self,
        ctx: &ToolContext,
        limit: u32,
    ) -> Result<Vec<TaskRecord>, String>;

    /// A new task in the calling task's stream, for its owner, created by it.
    async fn create_subtask(
        &self,
        ctx: &ToolContext,
        intent: &str,
        level: TaskLevel,
    ) -> Result<TaskRecord, String>;

    /// Adds an instruction to a running or waiting task of the same owner (any task for admin).
    async fn inject_task(
        &self,
        ctx: &ToolContext,
        task: &str,
        instruction: &str,
    ) -> Result<TaskRecord, String>;

    /// Cancels a task of the same owner (any task for admin).
    async fn cancel_task(&self, ctx: &ToolContext, task: &str) -> Result<TaskRecord, String>;
}

/// Sending text through the reply path: polish, split, send with retries (docs/design.md,
/// "Replies and delivery").
#[async_trait]
pub trait Messenger: Send + Sync + 'static {
    /// Delivers `text` to `stream`; returns the parts sent.
    async fn deliver(
        &self,
        ctx: &ToolContext,
        stream: &StreamId,
        text: &str,
        polish: bool,
        split: bool,
    ) -> Result<Vec<String>, String>;
}

/// The MCP client manager as the planner's proxy tools (`list_mcp_tools`, `call_mcp_tool`,
/// docs/design.md, "The planner") see it: the planner reaches every configured MCP tool through
/// these two calls instead of one registered tool per MCP tool.
///
/// Both take the caller's role (the speaker's, for the planner) and apply the same per-tool roles
/// as the agent loop's `mcp_*` tools (`[[mcp.servers]] min_role` / `tool_roles`): a tool the role
/// may not use is neither listed nor called, and a refused call never reaches the server.
#[async_trait]
pub trait McpProxy: Send + Sync + 'static {
    /// Every tool of every connected server that `role` may use, as `(server, tool, description)`.
    async fn list_tools(&self, role: Role) -> Result<Vec<(String, String, String)>, String>;

    /// Calls `tool` of `server` with `args` for a caller of `role`; the tool's result as JSON.
    /// Refuses, without contacting the server, a tool that needs a higher role.
    async fn call_tool(
        &self,
        role: Role,
        server: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, String>;
}
