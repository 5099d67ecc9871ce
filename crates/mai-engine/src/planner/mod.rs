//! The planner channel (see docs/design.md, "The planner"): the 11 tools the host's planner sees,
//! as a registry of their own, separate from the agent-loop registry.
//!
//! These are adapters: the `subagent_*` tools go through the task facade, `search_users`
//! and `send_message` run the agent-loop implementations from `mai-tools` (one implementation,
//! two channels), the MCP proxy tools through [`McpProxy`]. A call acts as the person the
//! planner speaks with (the host's `user_id`): with their role in the stream, for them — never
//! above them; without a speaker, at `[planner] default_role` for nobody. What keeps one
//! conversation's planner away from another conversation's tasks is **stream isolation**
//! ([`isolation`]).
//!
//! Host context reaches a call inside its arguments, put there by the front door: `chat_id`
//! always; `platform`, `group_id` and `user_id` under their own names for tools whose schema does
//! not declare them, and as `host_platform`, `host_group_id`, `host_user_id` for tools whose
//! schema does (`send_message`'s target). The door removes any of these keys the model wrote.
//! Must not: expose a dangerous tool (one whose effects include [`REFUSED_TO_PLANNER`]: file
//! write, command execution), or let a model-given field widen what the host-injected `chat_id`
//! allows.

mod board;
mod isolation;
mod mcp_tools;
mod shared_tools;
mod subagent_tools;

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use mai_core::capabilities::McpProxy;
use mai_core::ids::StreamId;
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{
    Effect, Effects, FixedRole, OutcomeKind, ToolContext, ToolDefinition, ToolDefinitionError,
    ToolError, ToolOutcome, ToolRegistry, TypedTool,
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

/// The planner tools in spec order, with their visibility (docs/design.md, "The planner").
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

/// Effects no planner tool may have: the planner speaks for whoever is in the chat, so nothing it
/// calls may touch the machine.
pub const REFUSED_TO_PLANNER: Effects = Effects::of(&[Effect::RunsCommands, Effect::WritesFiles]);

/// The planner registry: the 11 tools, in spec order. Handlers hold the engine (the registry is
/// the front end's, not one of the engine's dependencies) and build what they delegate to on
/// first use.
pub fn planner_registry(
    engine: &Arc<Engine>,
    mcp: Option<Arc<dyn McpProxy>>,
) -> Result<ToolRegistry, EngineError> {
    let invalid = |e: ToolDefinitionError| EngineError::Internal(e.to_string());
    let shared = Arc::new(shared_tools::Shared::new(engine));
    let mut tools: Vec<ToolDefinition> = Vec::with_capacity(PLANNER_TOOLS.len());
    tools.push(shared_tools::search_users(shared.clone()).map_err(invalid)?);
    tools.extend(subagent_tools::subagent_tools(Engine::clone(engine)).map_err(invalid)?);
    tools.push(shared_tools::send_message(shared).map_err(invalid)?);
    tools.extend(mcp_tools::mcp_tools(mcp).map_err(invalid)?);
    if let Some(tool) = tools
        .iter()
        .find(|tool| tool.effects().intersects(REFUSED_TO_PLANNER))
    {
        return Err(EngineError::Internal(format!(
            "planner tool `{}` has effects {:?}, which the planner must never expose",
            tool.name(),
            tool.effects()
        )));
    }
    let registry = ToolRegistry::new();
    registry.edit(|edit| {
        for tool in tools {
            edit.register(tool);
        }
    });
    Ok(registry)
}

/// Runs one planner tool call as the speaker the host named (see the module comment); front ends
/// (MCP server, HTTP API) call this rather than building a context.
pub async fn call_planner_tool(
    engine: &Engine,
    registry: &ToolRegistry,
    name: &str,
    args: Value,
) -> ToolOutcome {
    let schema = registry.get(name).map(|tool| tool.parameters().clone());
    let host = host_context(&args, schema.as_ref());
    // A placeholder stream for a call that names no conversation (a direct API call).
    let stream = host.chat_id.clone().unwrap_or_else(|| "planner".to_owned());
    let stream = match StreamId::new(stream.trim()) {
        Ok(stream) => stream,
        Err(e) => return ToolOutcome::error(OutcomeKind::Failed, e.to_string()),
    };
    let caller = match isolation::planner_caller(engine, stream, &host).await {
        Ok(caller) => caller,
        Err(error) => return ToolOutcome::error(OutcomeKind::Failed, error.0),
    };
    let ctx = ToolContext::new(
        TaskId(uuid::Uuid::nil()),
        caller.owner,
        caller.stream_id,
        caller.platform,
        Arc::new(FixedRole(caller.role)),
        CancellationToken::new(),
        engine.config.config(),
    )
    .with_requester(caller.requester);
    // The channel gate: every planner tool is for the planner; each acts as `ctx`'s speaker.
    registry.execute(name, Role::Admin, args, &ctx).await
}

/// Where the host's context key `key` travels in the arguments of a tool whose parameters are
/// `schema`: under its own name, or as `host_<key>` when the schema declares `key` as one of the
/// model's parameters (`send_message`'s target). The front doors write by this rule, the
/// planner reads by it.
pub fn host_context_key(key: &str, schema: &Value) -> String {
    let declared = schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|properties| properties.contains_key(key));
    if declared {
        format!("host_{key}")
    } else {
        key.to_owned()
    }
}

/// The host context a front door put into `args` (see the module comment).
fn host_context(args: &Value, schema: Option<&Value>) -> isolation::HostContext {
    let read = |key: &str| {
        let key = schema.map_or_else(|| key.to_owned(), |schema| host_context_key(key, schema));
        match args.get(&key) {
            Some(Value::String(text)) if !text.trim().is_empty() => Some(text.trim().to_owned()),
            Some(Value::Number(number)) => Some(number.to_string()),
            _ => None,
        }
    };
    isolation::HostContext {
        chat_id: read("chat_id"),
        platform: read("platform"),
        group_id: read("group_id"),
        user_id: read("user_id"),
    }
}

/// A planner handler built on its first call (handlers are built lazily): a host
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
