//! Sub-agents (see docs/design.md, "Sub-agents"): synchronous helper loops inside one tool call.
//!
//! A sub-agent sees the parent's role-visible tools minus every tool whose effects include
//! contacting people, managing tasks, nesting agents, running commands or calling host plugins
//! ([`REFUSED_TO_SUBAGENTS`]); a requested `tools` list must be a subset of that. Every call is
//! checked against the allowed set again at execution, so a disallowed name never reaches the
//! registry. Each sub-agent is the task's agent loop (`agent_loop.rs`) with nothing as its sink:
//! nothing is persisted, the calls of a round run concurrently, and cancelling the parent stops
//! its sub-agents before their next round.

use std::collections::HashSet;

use futures::future::join_all;
use serde_json::{Value, json};

use mai_core::model::{ChatMessage, ToolSpec};
use mai_core::role::Role;
use mai_core::tool::{Effect, Effects, ToolContext, ToolDefinition, ToolError};

use crate::agent_loop::{AgentLoop, LoopEnd, Presented, Sink};
use crate::conversation::Conversation;
use crate::engine::Engine;
use crate::prompts::PromptName;
use crate::truncate::head_tail;

pub(crate) const ASK_SUBAGENT: &str = "ask_subagent";
pub(crate) const ASK_SUBAGENTS: &str = "ask_subagents";

/// A sub-agent never gets a tool with any of these effects.
pub const REFUSED_TO_SUBAGENTS: Effects = Effects::of(&[
    Effect::ContactsPeople,
    Effect::ManagesTasks,
    Effect::NestsAgents,
    Effect::RunsCommands,
    Effect::CallsPluginApis,
]);

/// Whether a sub-agent may ever use `tool`, by its effects.
pub fn open_to_subagents(tool: &ToolDefinition) -> bool {
    !tool.effects().intersects(REFUSED_TO_SUBAGENTS)
}

/// The tools a sub-agent of a `role` caller may use: the role's tools, in round order, that are
/// [`open_to_subagents`].
fn subagent_tools(engine: &Engine, role: Role) -> Vec<ToolSpec> {
    engine
        .registry
        .presented(role)
        .iter()
        .filter(|tool| open_to_subagents(tool))
        .map(|tool| tool.spec())
        .collect()
}

pub(crate) struct SubagentRequest {
    pub intents: Vec<String>,
    pub tools: Option<Vec<String>>,
    pub single: bool,
}

/// Runs the sub-agents of one `ask_subagent(s)` call.
pub(crate) async fn ask(
    engine: &Engine,
    ctx: &ToolContext,
    request: SubagentRequest,
) -> Result<Value, ToolError> {
    let config = engine.config.config();
    let max_parallel = config.subagent.max_parallel_subagents as usize;
    if request.intents.is_empty() || request.intents.iter().any(|i| i.trim().is_empty()) {
        return Err(ToolError::new("every intent must be a non-empty question"));
    }
    if request.intents.len() > max_parallel {
        return Err(ToolError::new(format!(
            "at most {max_parallel} sub-agents per call ([subagent].max_parallel_subagents); got {}",
            request.intents.len()
        )));
    }
    refuse_over_budget(engine, ctx).await?;
    let role = ctx.role();
    let visible = subagent_tools(engine, role);
    let mut allowed: HashSet<String> = visible.iter().map(|t| t.name.clone()).collect();
    if let Some(requested) = &request.tools {
        let refused: Vec<&str> = requested
            .iter()
            .map(String::as_str)
            .filter(|name| !allowed.contains(*name))
            .collect();
        if !refused.is_empty() {
            return Err(ToolError::new(format!(
                "sub-agents cannot use {}; allowed: {}",
                refused.join(", "),
                sorted(&allowed).join(", ")
            )));
        }
        allowed = requested.iter().cloned().collect();
    }
    let specs: Vec<ToolSpec> = visible
        .into_iter()
        .filter(|t| allowed.contains(&t.name))
        .collect();
    let runs = request.intents.iter().map(|intent| {
        let child = ctx.child();
        let specs = specs.clone();
        let allowed = &allowed;
        async move { run_one(engine, &child, intent, specs, allowed).await }
    });
    let answers = join_all(runs).await;
    let max_chars = config.subagent.max_result_chars as usize;
    let cut = |answer: Result<String, String>| match answer {
        Ok(text) => json!({"success": true, "answer": head_tail(&text, max_chars)}),
        Err(error) => json!({"success": false, "error": error}),
    };
    if request.single {
        let answer = answers
            .into_iter()
            .next()
            .unwrap_or_else(|| Err("no answer".into()));
        return Ok(cut(answer));
    }
    let results: Vec<Value> = request
        .intents
        .iter()
        .zip(answers)
        .map(|(intent, answer)| {
            let mut value = cut(answer);
            value["intent"] = json!(intent);
            value
        })
        .collect();
    Ok(json!({"success": true, "results": results}))
}

/// The budget gate for the door `ask_subagent(s)`: sub-agents spend the asking task's budgets.
async fn refuse_over_budget(engine: &Engine, ctx: &ToolContext) -> Result<(), ToolError> {
    let failed = |error: crate::error::EngineError| ToolError::new(error.to_string());
    let Some(task) = engine
        .store
        .get(ctx.task_id())
        .await
        .map_err(|e| failed(e.into()))?
    else {
        return Ok(());
    };
    match crate::admission::check_spending(engine, &task)
        .await
        .map_err(failed)?
    {
        Ok(()) => Ok(()),
        Err(hit) => Err(ToolError::new(format!("limit reached: {}", hit.message))),
    }
}

fn sorted(set: &HashSet<String>) -> Vec<&str> {
    let mut names: Vec<&str> = set.iter().map(String::as_str).collect();
    names.sort_unstable();
    names
}

/// One sub-agent: the agent loop over an in-memory conversation, with nothing kept.
async fn run_one(
    engine: &Engine,
    ctx: &ToolContext,
    intent: &str,
    specs: Vec<ToolSpec>,
    allowed: &HashSet<String>,
) -> Result<String, String> {
    let config = engine.config.config();
    let max_rounds = config.subagent.max_rounds;
    let system = engine
        .prompts
        .render(
            PromptName::SubagentSystem,
            &json!({"intent": intent, "max_rounds": max_rounds}),
        )
        .map_err(|e| e.to_string())?;
    let mut conversation = Conversation {
        messages: vec![ChatMessage::system(system), ChatMessage::user(intent)],
        ..Conversation::default()
    };
    let mut tools = Presented::Fixed {
        specs,
        allowed: allowed.clone(),
    };
    let mut agent = AgentLoop {
        deps: &engine.deps,
        ctx,
        sink: Sink::Discard {
            rounds: 0,
            max_rounds,
            repeats: Default::default(),
        },
        tools: &mut tools,
        last_text: String::new(),
    };
    match agent.run(&mut conversation).await {
        Ok(LoopEnd::Answer(text)) => Ok(text),
        Ok(LoopEnd::OutOfRounds(last_text)) => engine
            .prompts
            .render(
                PromptName::SubagentOutOfRounds,
                &json!({"max_rounds": max_rounds, "last_text": last_text}),
            )
            .map_err(|e| e.to_string()),
        Ok(LoopEnd::Cancelled) => Err("cancelled with the parent task".into()),
        Ok(LoopEnd::Failed(error)) => Err(error),
        Ok(LoopEnd::Question(..)) => Err("sub-agents cannot ask the user".into()),
        Ok(LoopEnd::OverBudget(hit)) => Err(hit.message),
        Err(error) => Err(error.to_string()),
    }
}
