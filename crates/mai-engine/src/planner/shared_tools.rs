//! `search_users` and `send_message` for the planner: the agent-loop implementations from
//! `mai-tools`, reached through a private registry built on first use — one implementation,
//! two channels, so target choosing, host context stripping and delivery cannot drift apart.
//!
//! The planner-facing schemas are those of docs/design.md, "The planner" (no `keywords`, no `on_behalf_of`); the
//! handlers pass the arguments on unchanged apart from dropping keys the agent-loop tool does
//! not take. Must not: deliver any other way than through the shared `send_message`.

use std::sync::{Arc, OnceLock};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use mai_core::role::Role;
use mai_core::tool::{
    ToolContext, ToolDefinition, ToolDefinitionError, ToolError, ToolRegistry, TypedTool,
    Visibility,
};

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
}

pub(super) fn send_message(shared: Arc<Shared>) -> Result<ToolDefinition, ToolDefinitionError> {
    ToolDefinition::typed(
        "send_message",
        SEND_MESSAGE,
        Visibility::Discoverable,
        Role::Admin,
        lazy(move || SendMessage(shared.clone())),
    )
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ChatType {
    Group,
    Private,
}

// No doc comments on the args structs (they would become the schema's description) and no
// `deny_unknown_fields` (hosts add context keys such as `chat_id`).
#[derive(Debug, Deserialize, JsonSchema)]
struct SearchUsersArgs {
    /// A name, nickname or id (part of it is enough).
    keyword: Option<String>,
    /// Default: both.
    chat_type: Option<ChatType>,
    platform: Option<String>,
}

struct SearchUsers(Arc<Shared>);

impl TypedTool for SearchUsers {
    type Args = SearchUsersArgs;

    async fn call(&self, ctx: &ToolContext, args: SearchUsersArgs) -> Result<Value, ToolError> {
        let mut forwarded = Map::new();
        if let Some(keyword) = args.keyword {
            forwarded.insert("keyword".into(), keyword.into());
        }
        if let Some(chat_type) = args.chat_type {
            let name = match chat_type {
                ChatType::Group => "group",
                ChatType::Private => "private",
            };
            forwarded.insert("chat_type".into(), name.into());
        }
        if let Some(platform) = args.platform {
            forwarded.insert("platform".into(), platform.into());
        }
        self.0
            .run("search_users", Value::Object(forwarded), ctx)
            .await
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SendMessageArgs {
    text: String,
    stream_id: Option<String>,
    group_id: Option<String>,
    user_id: Option<String>,
    /// For group_id/user_id; default: this chat's platform.
    platform: Option<String>,
    /// Rewrite in the bot's style (default true).
    polish: Option<bool>,
    /// Split long text into several messages (default true).
    split: Option<bool>,
    /// Host-only: the current conversation, injected by the host.
    #[schemars(skip)]
    #[serde(default)]
    chat_id: Option<String>,
}

struct SendMessage(Arc<Shared>);

impl TypedTool for SendMessage {
    type Args = SendMessageArgs;

    async fn call(&self, ctx: &ToolContext, args: SendMessageArgs) -> Result<Value, ToolError> {
        let mut forwarded = Map::new();
        forwarded.insert("text".into(), args.text.into());
        let optional_strings = [
            ("stream_id", args.stream_id),
            ("group_id", args.group_id),
            ("user_id", args.user_id),
            ("platform", args.platform),
            ("chat_id", args.chat_id.clone()),
        ];
        for (key, value) in optional_strings {
            if let Some(value) = value {
                forwarded.insert(key.into(), value.into());
            }
        }
        for (key, value) in [("polish", args.polish), ("split", args.split)] {
            if let Some(value) = value {
                forwarded.insert(key.into(), value.into());
            }
        }
        // The sender is the planner of the current conversation (the host's chat_id), acting
        // for the speaker; the target is chosen by the shared tool, under the speaker's reach.
        self.0
            .run("send_message", Value::Object(forwarded), ctx)
            .await
    }
}
