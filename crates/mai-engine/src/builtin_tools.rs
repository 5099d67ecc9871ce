//! Registration of the agent-loop tools, in the order of docs/design.md, "Tools" (task management →
//! information → files → ask_user → send_message → cross-plugin API → sub-agents → command
//! execution), each group behind its config switch; and the tools the engine itself provides:
//! `ask_user` (handled by the loop, registered so it passes the same gates and is presented every
//! round) and the sub-agent tools.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use mai_core::role::Role;
use mai_core::tool::{
    Effect, Effects, ToolContext, ToolDefinition, ToolError, TypedTool, Visibility,
};

use crate::agent_loop::ASK_USER;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::subagent::{self, ASK_SUBAGENT, ASK_SUBAGENTS, SubagentRequest};
use crate::tool_handle::ToolHandle;

/// Registers the built-in agent-loop tools, in spec order, as one atomic registry change.
pub(crate) async fn register(
    engine: &Engine,
    handle: &Arc<ToolHandle>,
    files_root: Option<PathBuf>,
) -> Result<(), EngineError> {
    let invalid = |e: mai_core::tool::ToolDefinitionError| EngineError::Internal(e.to_string());
    let config = engine.config.config();
    let capabilities = handle.clone();
    let mut tools: Vec<ToolDefinition> = Vec::new();
    // 1. Task management.
    tools.extend(mai_tools::tasks::task_tools(capabilities.clone()).map_err(invalid)?);
    // 2. Information.
    tools.extend(mai_tools::info::info_tools(engine.host.clone()).map_err(invalid)?);
    // 3. Files.
    if let Some(root) = files_root {
        tools
            .extend(mai_tools::files::file_tools(root).map_err(|e| {
                EngineError::Internal(format!("cannot set up the file tools: {e}"))
            })?);
    }
    // 4. ask_user.
    tools.push(
        ToolDefinition::typed(
            ASK_USER,
            "Ask the task's owner a question and wait for the answer. Use only when you cannot \
             continue without their decision or missing facts.",
            Visibility::Essential,
            Role::User,
            AskUser,
        )
        .map_err(invalid)?
        .with_effects(Effect::ContactsPeople),
    );
    // 5. send_message.
    tools.push(
        mai_tools::send_message::send_message_tool(engine.host.clone(), capabilities)
            .map_err(invalid)?,
    );
    // 6.–8. Cross-plugin APIs, sub-agents, command execution: behind hot-reloadable switches.
    tools.extend(switchable_tools(engine, handle, &config).await?);
    engine.registry.edit(|edit| {
        for tool in tools {
            edit.register(tool);
        }
    });
    Ok(())
}

/// The tools of groups 6–8 (docs/design.md, "Tools"), whose switches are hot-reloaded: cross-plugin APIs (allowlisted
/// only), sub-agents, command execution.
async fn switchable_tools(
    engine: &Engine,
    handle: &Arc<ToolHandle>,
    config: &mai_core::config::Config,
) -> Result<Vec<ToolDefinition>, EngineError> {
    let invalid = |e: mai_core::tool::ToolDefinitionError| EngineError::Internal(e.to_string());
    let mut tools: Vec<ToolDefinition> = Vec::new();
    // 6. Cross-plugin APIs (allowlisted only).
    tools.extend(
        mai_tools::plugin_api::plugin_api_tools(engine.host.clone(), &config.plugin_api.allowlist)
            .await
            .map_err(|e| {
                EngineError::Internal(format!("cannot list the host's plugin APIs: {e}"))
            })?,
    );
    // 7. Sub-agents.
    if config.subagent.enabled {
        tools.push(
            ToolDefinition::typed(
                ASK_SUBAGENT,
                "Delegate one focused sub-question to a helper agent with its own tool loop; \
                 returns its answer. Use for self-contained research; the helper cannot ask the \
                 user.",
                Visibility::Discoverable,
                Role::User,
                SubagentTool::<AskSubagentArgs>::new(handle.clone()),
            )
            .map_err(invalid)?
            .with_effects(Effect::NestsAgents),
        );
        tools.push(
            ToolDefinition::typed(
                ASK_SUBAGENTS,
                "Run several independent sub-questions in parallel helper agents; returns each \
                 answer in order. Prefer over repeated ask_subagent when the questions do not \
                 depend on each other.",
                Visibility::Discoverable,
                Role::User,
                SubagentTool::<AskSubagentsArgs>::new(handle.clone()),
            )
            .map_err(invalid)?
            .with_effects(Effect::NestsAgents),
        );
    }
    // 8. Command execution.
    if config.shell.enabled {
        tools.push(mai_tools::shell::run_command_tool().map_err(invalid)?);
    }
    Ok(tools)
}

/// The effects of the tools [`switchable_tools`] builds: a tool with one of them is governed by
/// a hot-reloaded switch (`[plugin_api] allowlist`, `[subagent] enabled`, `[shell] enabled`).
const SWITCHABLE: Effects = Effects::of(&[
    Effect::CallsPluginApis,
    Effect::NestsAgents,
    Effect::RunsCommands,
]);

/// Whether `tool` is one of [`switchable_tools`], by its effects.
fn is_switchable(tool: &ToolDefinition) -> bool {
    tool.effects().intersects(SWITCHABLE)
}

/// After a config reload: swaps the switchable tools for what the new config enables, in one
/// atomic registry change, keeping their place in the order of "Tools" (right after `send_message`).
/// Running loops see the change from their next round.
pub(crate) async fn resync_switchable(
    engine: &Engine,
    handle: &Arc<ToolHandle>,
) -> Result<(), EngineError> {
    let config = engine.config.config();
    let tools = switchable_tools(engine, handle, &config).await?;
    engine.registry.edit(|edit| {
        edit.retain(|tool| !is_switchable(tool));
        edit.insert_after(mai_tools::send_message::SEND_MESSAGE, tools);
    });
    Ok(())
}

/// The schema of `ask_user`; the loop reads the question from the checked arguments itself.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct AskUserArgs {
    /// The question, written for the person.
    pub question: String,
    /// Why you ask (kept with the task, not sent).
    #[serde(default)]
    pub context: Option<String>,
}

struct AskUser;

impl TypedTool for AskUser {
    type Args = AskUserArgs;
    async fn call(&self, _ctx: &ToolContext, _args: AskUserArgs) -> Result<Value, ToolError> {
        // The agent loop answers ask_user itself; only a caller outside a task loop lands here.
        Err(ToolError::new(
            "ask_user works only in a task's own agent loop (not in sub-agents or the planner)",
        ))
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskSubagentArgs {
    /// The sub-question, self-contained.
    pub intent: String,
    /// Restrict the helper to these tools (default: all it may use).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskSubagentsArgs {
    /// Independent sub-questions, one helper each.
    pub intents: Vec<String>,
    /// Restrict the helpers to these tools (default: all they may use).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

impl From<AskSubagentArgs> for SubagentRequest {
    fn from(args: AskSubagentArgs) -> Self {
        SubagentRequest {
            intents: vec![args.intent],
            tools: args.tools,
            single: true,
        }
    }
}

impl From<AskSubagentsArgs> for SubagentRequest {
    fn from(args: AskSubagentsArgs) -> Self {
        SubagentRequest {
            intents: args.intents,
            tools: args.tools,
            single: false,
        }
    }
}

/// `ask_subagent` and `ask_subagents`: the same runner, one or several intents.
struct SubagentTool<A>(Arc<ToolHandle>, PhantomData<fn() -> A>);

impl<A> SubagentTool<A> {
    fn new(engine: Arc<ToolHandle>) -> Self {
        SubagentTool(engine, PhantomData)
    }
}

impl<A> TypedTool for SubagentTool<A>
where
    A: Into<SubagentRequest> + serde::de::DeserializeOwned + JsonSchema + Send + 'static,
{
    type Args = A;
    async fn call(&self, ctx: &ToolContext, args: A) -> Result<Value, ToolError> {
        let engine = self.0.engine().map_err(ToolError::new)?;
        subagent::ask(&engine, ctx, args.into()).await
    }
}
