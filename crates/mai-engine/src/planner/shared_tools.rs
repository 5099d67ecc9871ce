//! `search_users` and `send_message` for the planner: the agent-loop implementations from
//! `mai-tools`, reached through a private registry built on first use — one implementation,
//! two channels, so target choosing, host context stripping and delivery cannot drift apart.
//!
//! The planner's tools take the agent-loop tools' own argument types, without the agent loop's
//! extras (mai-tools' `UserSearch` and `Message`: no `keywords`, no `relay`); the handlers pass
//! the arguments on as given, minus the host keys the shared tool does not take. Must not: deliver any other way than through the shared `send_message`.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use mai_core::role::Role;
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, ToolRegistry, TypedTool,
    Visibility,
};

use mai_tools::info::UserSearch;
use mai_tools::send_message::Message;

use super::lazy;
use crate::engine::Engine;
use crate::tool_handle::ToolHandle;

const SEARCH_USERS: &str = "Find people and group chats by name, nickname or id. Returns their \
stream_id / user_id / group_id and platform, which send_message and subagent_create's \
reply_stream_id take. Use before messaging someone or some group you only know by name.";
const SEND_MESSAGE: &str = "Send a message right now to another chat: a stream, a group or a \
person (proactive messaging). Give exactly one target: stream_id, group_id or user_id \
(search_users finds them). Not for answering this conversation (just reply), and not for work \
that takes steps or must happen later (subagent_create).";

/// The engine and the agent-loop tools the planner shares, built on first use.
pub(super) struct Shared {
    engine: Engine,
    tools: OnceLock<Result<ToolRegistry, String>>,
}

impl Shared {
    pub(super) fn new(engine: &Engine) -> Shared {
        Shared {
            engine: engine.clone(),
            tools: OnceLock::new(),
        }
    }

    fn tools(&self, engine: &Engine) -> Result<&ToolRegistry, ToolError> {
        self.tools
            .get_or_init(|| build_shared_tools(engine))
            .as_ref()
            .map_err(ToolError::new)
    }

    /// Runs the agent-loop tool `name` as the planner call `ctx` (the speaker, with their role
    /// in the current conversation), under the same role gates as an agent task.
    async fn run(&self, name: &str, args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let tools = self.tools(&self.engine)?;
        let outcome = tools.execute(name, ctx.role(), args, ctx).await;
        if outcome.is_ok() {
            return Ok(outcome.value);
        }
        // The shared tool already worded the error for a model; pass it on as is (the planner
        // registry names the tool again, so its own prefix goes).
        let message = outcome
            .error_message()
            .map_or_else(|| outcome.value.to_string(), str::to_owned);
        let prefix = format!("tool `{name}` failed: ");
        let message = message.strip_prefix(&prefix).unwrap_or(&message).to_owned();
        Err(ToolError(message))
    }
}

fn build_shared_tools(engine: &Engine) -> Result<ToolRegistry, String> {
    let search_users = mai_tools::info::info_tools(engine.host.clone())
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|tool| tool.name() == "search_users")
        .ok_or_else(|| "the shared search_users tool is missing".to_owned())?;
    // The planner's registry is its front end's, not the engine's: holding the engine is no
    // cycle, and the handle is never revoked.
    let capabilities = Arc::new(ToolHandle::holding(engine.clone()));
    let send_message =
        mai_tools::send_message::send_message_tool(engine.host.clone(), capabilities)
            .map_err(|e| e.to_string())?;
    let registry = ToolRegistry::new();
    registry.edit(|edit| {
        edit.register(search_users);
        edit.register(send_message);
    });
    Ok(registry)
}

pub(super) fn search_users(shared: Arc<Shared>) -> Result<ToolDefinition, ToolDefinitionError> {
    ToolDefinition::typed(
        "search_users",
        SEARCH_USERS,
        Visibility::Discoverable,
        Role::Admin,
        lazy(move || SearchUsers(shared.clone())),
    )
    .map(|tool| tool.with_effects(Effect::ReadsChats))
}

pub(super) fn send_message(shared: Arc<Shared>) -> Result<ToolDefinition, ToolDefinitionError> {
    ToolDefinition::typed(
        "send_message",
        SEND_MESSAGE,
        Visibility::Discoverable,
        Role::Admin,
        lazy(move || SendMessage(shared.clone())),
    )
    .map(|tool| tool.with_effects(Effect::ContactsPeople))
}

// The planner's tools take the agent-loop tools' own argument types (without the agent loop's
// extras: `keywords`, `relay`), so the two channels' schemas cannot drift apart.
struct SearchUsers(Arc<Shared>);

impl TypedTool for SearchUsers {
    type Args = UserSearch;

    async fn call(&self, ctx: &ToolContext, args: UserSearch) -> Result<Value, ToolError> {
        self.0.run("search_users", forwarded(&args)?, ctx).await
    }
}

struct SendMessage(Arc<Shared>);

impl TypedTool for SendMessage {
    type Args = Message;

    async fn call(&self, ctx: &ToolContext, args: Message) -> Result<Value, ToolError> {
        // The sender is the planner of the current conversation (the host's chat_id), acting
        // for the speaker; the target is chosen by the shared tool, under the speaker's reach.
        self.0.run("send_message", forwarded(&args)?, ctx).await
    }
}

/// The arguments as the shared tool takes them: the fields given, none of the absent ones.
fn forwarded(args: &impl serde::Serialize) -> Result<Value, ToolError> {
    serde_json::to_value(args)
        .map_err(|e| ToolError::new(format!("could not pass the arguments on: {e}")))
}
