//! The planner channel (SYSTEM.md §7): the 11 tools the host's planner sees, as a registry of
//! their own, separate from the agent-loop registry.
//!
//! These are adapters: the `subagent_*` tools go through the task manager facade, `search_users`
//! and `send_message` run the agent-loop implementations from `mai-tools` (one implementation,
//! two channels), the MCP proxy tools through [`McpProxy`]. The planner is a trusted host
//! component, so every call runs as **admin** with owner `planner:{stream_id}`, the stream taken
//! from the call's `stream_id` argument; what keeps one conversation's planner away from another
//! conversation's tasks is **stream isolation** ([`isolation`]), not the role.
//! Must not: expose a dangerous tool (file write, command execution), or let a model-given field
//! widen what the host-injected `chat_id` allows.

mod isolation;
mod mcp_tools;
mod shared_tools;
mod subagent_tools;

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use mai_core::capabilities::McpProxy;
use mai_core::ids::{Owner, StreamId};
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{
    FixedRole, OutcomeKind, ToolContext, ToolDefinition, ToolDefinitionError, ToolError,
    ToolOutcome, ToolRegistry, TypedTool,
};

use crate::engine::Engine;
use crate::error::EngineError;

/// How a host presents a planner tool (the MCP server's `_meta.visibility`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlannerVisibility {
    /// Always in the planner's tool list.
    Visible,
    /// Found through the host's tool search (by name and description keywords).
    Deferred,
}

impl PlannerVisibility {
    pub fn as_str(self) -> &'static str {
        match self {
            PlannerVisibility::Visible => "visible",
            PlannerVisibility::Deferred => "deferred",
        }
    }
}

/// The planner tools in spec order, with their visibility (SYSTEM.md §7 table).
pub const PLANNER_TOOLS: [(&str, PlannerVisibility); 11] = [
    ("search_users", PlannerVisibility::Deferred),
    ("subagent_create", PlannerVisibility::Visible),
    ("subagent_list", PlannerVisibility::Visible),
    ("subagent_status", PlannerVisibility::Visible),
    ("subagent_modify", PlannerVisibility::Deferred),
    ("subagent_delete", PlannerVisibility::Visible),
    ("subagent_history", PlannerVisibility::Deferred),
    ("subagent_schedule", PlannerVisibility::Visible),
    ("send_message", PlannerVisibility::Deferred),
    ("list_mcp_tools", PlannerVisibility::Deferred),
    ("call_mcp_tool", PlannerVisibility::Deferred),
];

/// The visibility of a planner tool; `None` for a name that is not one.
pub fn planner_visibility(name: &str) -> Option<PlannerVisibility> {
    PLANNER_TOOLS
        .iter()
        .find(|(tool, _)| *tool == name)
        .map(|(_, visibility)| *visibility)
}

/// The planner registry: the 11 tools, in spec order. Handlers hold a weak reference to the
/// engine (the caller keeps the engine alive) and build what they delegate to on first use.
pub fn planner_registry(
    engine: &Arc<Engine>,
    mcp: Option<Arc<dyn McpProxy>>,
) -> Result<ToolRegistry, EngineError> {
    let invalid = |e: ToolDefinitionError| EngineError::Internal(e.to_string());
    let shared = Arc::new(shared_tools::Shared::new(engine));
    let weak = Arc::downgrade(engine);
    let mut tools: Vec<ToolDefinition> = Vec::with_capacity(PLANNER_TOOLS.len());
    tools.push(shared_tools::search_users(shared.clone()).map_err(invalid)?);
    tools.extend(subagent_tools::subagent_tools(weak).map_err(invalid)?);
    tools.push(shared_tools::send_message(shared).map_err(invalid)?);
    tools.extend(mcp_tools::mcp_tools(mcp).map_err(invalid)?);
    let registry = ToolRegistry::new();
    registry.edit(|edit| {
        for tool in tools {
            edit.register(tool);
        }
    });
    Ok(registry)
}

/// Runs one planner tool call as the planner (admin). Identity comes from the call's arguments
/// (`stream_id`, host-injected `chat_id`), so the context here carries no conversation of its
/// own; front ends (MCP server, HTTP API) call this rather than building a context.
pub async fn call_planner_tool(
    engine: &Engine,
    registry: &ToolRegistry,
    name: &str,
    args: Value,
) -> ToolOutcome {
    // A placeholder stream: no stream is known before the arguments are read, and handlers
    // never act on the context's stream.
    let stream = match StreamId::new("planner") {
        Ok(stream) => stream,
        Err(e) => return ToolOutcome::error(OutcomeKind::Failed, e.to_string()),
    };
    let ctx = planner_context(engine, &stream, "", CancellationToken::new());
    registry.execute(name, Role::Admin, args, &ctx).await
}

/// A tool context for the planner in `stream`: owner `planner:{stream}`, role admin, and no task
/// (the nil task id: a planner call is not a task).
pub(crate) fn planner_context(
    engine: &Engine,
    stream: &StreamId,
    platform: &str,
    cancel: CancellationToken,
) -> ToolContext {
    ToolContext::new(
        TaskId(uuid::Uuid::nil()),
        Owner::planner(stream.clone()),
        stream.clone(),
        platform,
        Arc::new(FixedRole(Role::Admin)),
        cancel,
        engine.config.config(),
    )
}

/// A planner handler built on its first call (SYSTEM.md §7: handlers are built lazily): a host
/// that never uses a tool never pays for it, and nothing a handler needs has to exist when the
/// registry is built. The schema comes from `T::Args`, so it is known up front.
pub(crate) struct Lazy<T, F> {
    cell: OnceLock<T>,
    build: F,
}

pub(crate) fn lazy<T, F>(build: F) -> Lazy<T, F>
where
    T: TypedTool + Sync,
    F: Fn() -> T + Send + Sync + 'static,
{
    Lazy {
        cell: OnceLock::new(),
        build,
    }
}

impl<T, F> TypedTool for Lazy<T, F>
where
    T: TypedTool + Sync,
    F: Fn() -> T + Send + Sync + 'static,
{
    type Args = T::Args;

    async fn call(&self, ctx: &ToolContext, args: T::Args) -> Result<Value, ToolError> {
        self.cell.get_or_init(&self.build).call(ctx, args).await
    }
}
