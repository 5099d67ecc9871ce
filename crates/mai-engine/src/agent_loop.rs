//! The agent loop, one type ([`AgentLoop`]) for tasks and sub-agents: each round presents the
//! tools, asks the model, and runs its tool calls through the registry's gates. A task's loop
//! has the store as its sink: it applies injected instructions, checkpoints every result
//! (the round's last one while the model is asked next, durable before anything the reply leads
//! to), and ends with an honest final answer at `max_rounds`; a sub-agent's keeps nothing. Both
//! honour cancellation at every await.
//!
//! Unknown tools, bad arguments, tool failures and over-long outputs go back to the model as
//! tool results; nothing the model does can kill the loop.

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::join_all;
use serde_json::{Value, json};

use mai_core::model::{ChatMessage, ChatRequest, ModelPurpose, ToolCall, ToolSpec};
use mai_core::role::Role;
use mai_core::store::{HistoryKind, NewHistoryEntry, SaveOutcome};
use mai_core::task::{TaskRecord, TaskStatus};
use mai_core::tool::{
    MAX_ARGUMENT_BYTES, OutcomeKind, ToolContext, ToolDefinition, ToolOutcome, ToolRegistry,
    discovery,
};

use crate::conversation::{Conversation, Tail};
use crate::deps::Deps;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::events::TaskEvent;
use crate::loop_guard::{self, Verdict};
use crate::prompts::{PromptName, Prompts};
use crate::run::{RunControl, RunEnd, StopReason};
use crate::truncate::head_tail;
use crate::usage::{Served, record_of};
use mai_core::usage::UsagePurpose;

/// The tool the loop answers itself: it suspends the task on a question.
pub(crate) const ASK_USER: &str = "ask_user";

/// Tool results longer than this reach the model as head + tail with a note.
pub(crate) const MAX_TOOL_RESULT_CHARS: usize = 12_000;

/// Most tool calls run from one model reply (agent loop and sub-agents alike). Models ask for a
/// handful in parallel; a reply with thousands is a runaway or hostile one, and running them all
/// would cost a store write each (and, in a sub-agent, as many concurrent calls). The rest are
/// dropped from the reply before anything runs, and the reply says so, so the model can ask again.
pub const MAX_TOOL_CALLS_PER_ROUND: usize = 32;

/// Bounds one model reply before it joins the conversation: at most
/// [`MAX_TOOL_CALLS_PER_ROUND`] calls are kept (the reply's text then notes how many were
/// dropped), and arguments over [`MAX_ARGUMENT_BYTES`] are replaced by a short note — the gate
/// would refuse them anyway, and the conversation (sent again every round and checkpointed)
/// must not carry megabytes the model cannot use.
pub(crate) fn bound_tool_calls(
    message: &mut ChatMessage,
    prompts: &Prompts,
) -> Result<(), EngineError> {
    let render = |name, vars: Value| {
        prompts
            .render(name, &vars)
            .map_err(|e| EngineError::Internal(e.to_string()))
    };
    let total = message.tool_calls.len();
    if total > MAX_TOOL_CALLS_PER_ROUND {
        message.tool_calls.truncate(MAX_TOOL_CALLS_PER_ROUND);
        let note = render(
            PromptName::ToolCallsDropped,
            json!({
                "total": total,
                "kept": MAX_TOOL_CALLS_PER_ROUND,
                "dropped": total - MAX_TOOL_CALLS_PER_ROUND,
            }),
        )?;
        if message.content.trim().is_empty() {
            message.content = note;
        } else {
            message.content.push_str("\n\n");
            message.content.push_str(&note);
        }
    }
    for call in &mut message.tool_calls {
        let size = match &call.arguments {
            Value::String(raw) => raw.len(),
            other => other.to_string().len(),
        };
        if size > MAX_ARGUMENT_BYTES {
            call.arguments = Value::String(render(
                PromptName::ArgumentsDropped,
                json!({"size": size, "limit": MAX_ARGUMENT_BYTES}),
            )?);
        }
    }
    Ok(())
}

/// The tool list of the last round, reused while the registry's view for the role is the same
/// snapshot (a registry change swaps the snapshot, and the next round rebuilds the list).
#[derive(Default)]
pub(crate) struct ToolsCache {
    source: Option<(Role, Arc<[Arc<ToolDefinition>]>)>,
    specs: Vec<ToolSpec>,
}

impl ToolsCache {
    /// The specs to present to `role` this round (moved out; give them back with `put_back`).
    fn take(&mut self, registry: &ToolRegistry, role: Role) -> Vec<ToolSpec> {
        let presented = registry.presented(role);
        let fresh =
            matches!(&self.source, Some((r, p)) if *r == role && Arc::ptr_eq(p, &presented));
        if !fresh || self.specs.is_empty() {
            self.specs = presented.iter().map(|tool| tool.spec()).collect();
            self.source = Some((role, presented));
        }
        std::mem::take(&mut self.specs)
    }

    fn put_back(&mut self, specs: Vec<ToolSpec>) {
        self.specs = specs;
    }
}

/// What the task loop does after a question was handled.
pub(crate) enum AfterCalls {
    Continue,
    End(RunEnd),
}

/// The tools a loop presents each round.
pub(crate) enum Presented {
    /// What the registry presents to the context's role, re-read every round (a task).
    Registry(ToolsCache),
    /// A fixed list, and only these names may run (a sub-agent).
    Fixed {
        specs: Vec<ToolSpec>,
        allowed: HashSet<String>,
    },
}

impl Presented {
    fn allows(&self, name: &str) -> bool {
        match self {
            Presented::Registry(_) => true,
            Presented::Fixed { allowed, .. } => allowed.contains(name),
        }
    }
}

/// Where a loop's conversation goes as it grows.
pub(crate) enum Sink<'a> {
    /// A task: every tool result is checkpointed — the round's last one while the model is asked
    /// next — injections are read and events emitted. Calls run one by one, so each result is
    /// durable before the next call runs.
    Store {
        engine: &'a Engine,
        task: &'a mut TaskRecord,
        /// The loop guard's counts of the task's conversation (see `loop_guard::counts_in`).
        repeats: &'a mut std::collections::BTreeMap<String, u32>,
    },
    /// A sub-agent: nothing is kept, and the calls of one round run concurrently. `repeats`:
    /// its loop guard's counts.
    Discard {
        rounds: u32,
        max_rounds: u32,
        repeats: std::collections::BTreeMap<String, u32>,
    },
}

/// How a loop ended.
pub(crate) enum LoopEnd {
    Answer(String),
    /// An admitted `ask_user` call (a task's), after the round's other calls ran.
    Question(ToolCall, Value),
    Cancelled,
    Failed(String),
    /// A sub-agent ran out of rounds; the last text the model wrote.
    OutOfRounds(String),
    /// A task's requester or stream used up a daily budget (checked at each round boundary,
    /// after the checkpoint).
    OverBudget(crate::admission::BudgetHit),
}

/// What running one round's calls left.
enum Calls {
    Done,
    /// The round's last result is in the conversation but not checkpointed yet: its write
    /// overlaps the next model call, and is durable before anything else happens.
    Unsaved,
    End(LoopEnd),
}

/// What a checkpoint writes: the conversation's new history entries and the usage records
/// staged with them.
pub(crate) struct Checkpoint {
    pub entries: Vec<NewHistoryEntry>,
    pub usage: Vec<mai_core::usage::UsageRecord>,
}

/// What a model call came back with.
enum Called {
    End(LoopEnd),
    Reply(ChatMessage),
}

/// The agent loop, for tasks and sub-agents alike: ask the model with the round's tools, run
/// the calls of its reply through the registry's gates, repeat until it answers. What differs
/// is the [`Sink`] (a task's store, or nothing) and the [`Presented`] tools.
pub(crate) struct AgentLoop<'a> {
    pub deps: &'a Deps,
    pub ctx: &'a ToolContext,
    pub sink: Sink<'a>,
    pub tools: &'a mut Presented,
    /// The text of the last reply that called tools.
    pub last_text: String,
}

impl AgentLoop<'_> {
    /// Runs until the model answers, a question is asked, the context is cancelled, or the
    /// model fails. Stops at every await when cancelled.
    pub(crate) async fn run(
        &mut self,
        conversation: &mut Conversation,
    ) -> Result<LoopEnd, EngineError> {
        let mut checkpoint_due = false;
        loop {
            if self.ctx.cancel_token().is_cancelled() {
                if checkpoint_due {
                    self.save_unsaved(conversation).await?;
                }
                return Ok(LoopEnd::Cancelled);
            }
            match conversation.tail() {
                Tail::Answered(text) => return Ok(LoopEnd::Answer(text)),
                Tail::Unfinished(calls) => match self.run_calls(conversation, calls).await? {
                    Calls::Done => {}
                    Calls::Unsaved => checkpoint_due = true,
                    Calls::End(end) => return Ok(end),
                },
                Tail::Empty | Tail::ReadyForModel => {
                    let due = std::mem::take(&mut checkpoint_due);
                    if let Some(end) = self.model_round(conversation, due).await? {
                        return Ok(end);
                    }
                }
            }
        }
    }

    fn max_rounds(&self) -> u32 {
        match &self.sink {
            Sink::Store { .. } => self.deps.config.config().task.max_rounds,
            Sink::Discard { max_rounds, .. } => *max_rounds,
        }
    }

    fn rounds(&self) -> u32 {
        match &self.sink {
            Sink::Store { task, .. } => task.metadata.rounds,
            Sink::Discard { rounds, .. } => *rounds,
        }
    }

    fn set_rounds(&mut self, round: u32) {
        match &mut self.sink {
            Sink::Store { task, .. } => task.metadata.rounds = round,
            Sink::Discard { rounds, .. } => *rounds = round,
        }
    }

    async fn save_unsaved(&mut self, conversation: &mut Conversation) -> Result<(), EngineError> {
        match &mut self.sink {
            Sink::Store { engine, task, .. } => engine.save_unsaved(task, conversation).await,
            Sink::Discard { .. } => Ok(()),
        }
    }

    /// One model call. Returns `Some` when the loop must end.
    ///
    /// With `checkpoint_due`, the previous round's last tool result is written while the model
    /// is asked (see docs/design.md, "The agent loop and checkpoints"): the write is awaited, and
    /// its failure ends the loop as before, ahead of anything the reply leads to — the next
    /// round's tools, a question, the final answer's delivery.
    async fn model_round(
        &mut self,
        conversation: &mut Conversation,
        checkpoint_due: bool,
    ) -> Result<Option<LoopEnd>, EngineError> {
        let round = self.rounds() + 1;
        let max_rounds = self.max_rounds();
        if round > max_rounds && matches!(self.sink, Sink::Discard { .. }) {
            return Ok(Some(LoopEnd::OutOfRounds(std::mem::take(
                &mut self.last_text,
            ))));
        }
        if let Sink::Store { engine, task, .. } = &self.sink
            && let Err(hit) = crate::admission::check_spending(engine, task).await?
        {
            if checkpoint_due {
                self.save_unsaved(conversation).await?;
            }
            return Ok(Some(LoopEnd::OverBudget(hit)));
        }
        let (store, checkpoint) = match &mut self.sink {
            Sink::Store { engine, task, .. } if checkpoint_due => {
                let checkpoint = engine.take_unsaved(task, conversation)?;
                (Some((*engine, &**task)), Some(checkpoint))
            }
            Sink::Store { engine, task, .. } => (Some((*engine, &**task)), None),
            Sink::Discard { .. } => (None, None),
        };
        let write = async {
            match (store, &checkpoint) {
                (Some((engine, task)), Some(checkpoint)) if !checkpoint.entries.is_empty() => {
                    engine.write_checkpoint(task, checkpoint).await
                }
                _ => Ok(()),
            }
        };
        let call = call_model(
            self.deps,
            self.ctx,
            store,
            conversation,
            self.tools,
            round,
            max_rounds,
        );
        let (written, called) = tokio::join!(write, call);
        written?;
        let mut message = match called? {
            Called::End(end) => return Ok(Some(end)),
            Called::Reply(message) => message,
        };
        if round > max_rounds {
            message.tool_calls.clear();
        }
        bound_tool_calls(&mut message, &self.deps.prompts)?;
        if message.tool_calls.is_empty() && message.content.trim().is_empty() {
            message.content = self
                .deps
                .prompts
                .render(PromptName::NoAnswer, &json!({}))
                .map_err(|e| EngineError::Internal(e.to_string()))?;
        }
        if !message.tool_calls.is_empty() {
            self.last_text.clone_from(&message.content);
        }
        self.set_rounds(round);
        // A reply that calls tools is saved with its first result; the final answer with the
        // task's completion.
        conversation.defer(message);
        Ok(None)
    }

    /// Runs the unanswered calls of the last model reply (see [`Sink`] for how).
    async fn run_calls(
        &mut self,
        conversation: &mut Conversation,
        calls: Vec<ToolCall>,
    ) -> Result<Calls, EngineError> {
        match &mut self.sink {
            Sink::Store {
                engine,
                task,
                repeats,
            } => {
                engine
                    .run_calls(task, repeats, conversation, calls, self.ctx)
                    .await
            }
            Sink::Discard { repeats, .. } => {
                let config = self.deps.config.config();
                let mut verdicts = Vec::with_capacity(calls.len());
                for call in &calls {
                    match loop_guard::count(repeats, &config.task, &self.deps.prompts, call) {
                        Verdict::Fail(error) => return Ok(Calls::End(LoopEnd::Failed(error))),
                        verdict => verdicts.push(verdict),
                    }
                }
                run_concurrently(
                    self.deps,
                    self.ctx,
                    self.tools,
                    conversation,
                    calls,
                    verdicts,
                )
                .await;
                Ok(Calls::Done)
            }
        }
    }
}

/// Applies a task's injections, presents the round's tools and asks the model (stopping when
/// the context is cancelled). `round` past `max_rounds` is a task's last: no tools, and an
/// explicit request for an honest summary.
async fn call_model(
    deps: &Deps,
    ctx: &ToolContext,
    store: Option<(&Engine, &TaskRecord)>,
    conversation: &mut Conversation,
    presented: &mut Presented,
    round: u32,
    max_rounds: u32,
) -> Result<Called, EngineError> {
    if let Some((engine, task)) = store {
        engine.read_injections(task, conversation).await?;
        conversation.apply_injections();
    }
    let last_round = round > max_rounds;
    let tools = match presented {
        _ if last_round => {
            let note = deps
                .prompts
                .render(
                    PromptName::MaxRoundsReached,
                    &json!({"max_rounds": max_rounds}),
                )
                .map_err(|e| EngineError::Internal(e.to_string()))?;
            conversation.defer(ChatMessage::user(note));
            Vec::new()
        }
        Presented::Registry(cache) => cache.take(&deps.registry, ctx.role()),
        Presented::Fixed { specs, .. } => specs.clone(),
    };
    if let Some((engine, task)) = store {
        engine.emit(TaskEvent::Round {
            task_id: task.id,
            round,
        });
    }
    // The conversation and the tool list move into the request and back: no per-round copy
    // of a history that grows every round.
    let mut request = ChatRequest::new(
        ModelPurpose::Agent,
        std::mem::take(&mut conversation.messages),
    )
    .with_tools(tools);
    let started = std::time::Instant::now();
    let response = tokio::select! {
        _ = ctx.cancel_token().cancelled() => None,
        response = deps.model.complete(&request) => Some(response),
    };
    if let Some(Ok(answered)) = &response {
        let (served, purpose) = match store {
            Some((_, task)) => (Served::task(task), UsagePurpose::Agent),
            None => (Served::context(ctx, round), UsagePurpose::Subagent),
        };
        let served = Served { round, ..served };
        deps.meter.hold(record_of(
            deps, &served, purpose, &request, answered, started,
        ));
    }
    conversation.messages = std::mem::take(&mut request.messages);
    if let (false, Presented::Registry(cache)) = (last_round, presented) {
        cache.put_back(std::mem::take(&mut request.tools));
    }
    Ok(match response {
        None => Called::End(LoopEnd::Cancelled),
        Some(Ok(response)) => Called::Reply(response.message),
        Some(Err(error)) => Called::End(LoopEnd::Failed(format!("model call failed: {error}"))),
    })
}

/// A sub-agent's round: its calls run concurrently, each checked against the allowed set
/// first (a call the loop guard stopped gets its warning); results join the conversation in
/// call order.
async fn run_concurrently(
    deps: &Deps,
    ctx: &ToolContext,
    presented: &Presented,
    conversation: &mut Conversation,
    calls: Vec<ToolCall>,
    verdicts: Vec<Verdict>,
) {
    let outcomes = join_all(
        calls
            .iter()
            .zip(verdicts)
            .map(|(call, verdict)| async move {
                if let Verdict::Warn(outcome) = verdict {
                    return outcome;
                }
                if !presented.allows(&call.name) {
                    return ToolOutcome::error(
                        OutcomeKind::PermissionDenied,
                        format!("tool `{}` is not available to sub-agents", call.name),
                    );
                }
                deps.registry
                    .execute(&call.name, ctx.role(), call.arguments.clone(), ctx)
                    .await
            }),
    )
    .await;
    for (call, outcome) in calls.iter().zip(outcomes) {
        let text = head_tail(&outcome.value.to_string(), MAX_TOOL_RESULT_CHARS);
        conversation
            .messages
            .push(ChatMessage::tool_result(call.id.clone(), text));
    }
}

impl Engine {
    pub(crate) async fn run_agent(&self, task: &mut TaskRecord, control: &RunControl) -> RunEnd {
        match self.agent_loop(task, control).await {
            Ok(end) => end,
            // Not the task's failure: it goes on from its checkpoint when the database is back.
            Err(EngineError::Store(error)) if error.is_unavailable() => {
                RunEnd::Stopped(StopReason::StoreLost)
            }
            Err(error) => match control.reason() {
                Some(reason) => RunEnd::Stopped(reason),
                None => RunEnd::Failed(error.to_string()),
            },
        }
    }

    /// A task's loop: its conversation rebuilt from the history (or begun), run by an
    /// [`AgentLoop`] with the store as its sink; a question suspends it (see `waiting.rs`).
    async fn agent_loop(
        &self,
        task: &mut TaskRecord,
        control: &RunControl,
    ) -> Result<RunEnd, EngineError> {
        // Everything injected so far is in the history read below. A task created here that
        // has not run and was sent no instruction has no history: nothing to read.
        let injected = self.schedule.take_injected(task.id);
        let history = if self.schedule.take_fresh(task.id) && !injected {
            Vec::new()
        } else {
            self.store
                .history(task.id, task.metadata.history_from)
                .await?
        };
        let mut conversation = Conversation::rebuild(&history).map_err(EngineError::Internal)?;
        let mut repeats = loop_guard::counts_in(&conversation.messages, ASK_USER);
        let ctx = self.tool_context(task, control.token.clone());
        if conversation.messages.is_empty() {
            self.begin_conversation(task, &ctx, &mut conversation)?;
        }
        let mut tools = Presented::Registry(ToolsCache::default());
        loop {
            let mut agent = AgentLoop {
                deps: &self.deps,
                ctx: &ctx,
                sink: Sink::Store {
                    engine: self,
                    task,
                    repeats: &mut repeats,
                },
                tools: &mut tools,
                last_text: String::new(),
            };
            match agent.run(&mut conversation).await? {
                LoopEnd::Answer(text) => {
                    // Written with the completion (one write instead of two), and so are
                    // its reply's parts.
                    let history = self.unsaved_entries(&conversation, task.metadata.rounds)?;
                    let parts = match self.answer_parts(task, &text, control).await {
                        Ok(parts) => parts,
                        Err(stop) => return Ok(RunEnd::Stopped(stop)),
                    };
                    return Ok(RunEnd::Answer {
                        text,
                        history,
                        parts,
                    });
                }
                LoopEnd::Question(call, args) => {
                    match self
                        .ask_user(task, &mut conversation, call, args, control)
                        .await?
                    {
                        AfterCalls::Continue => {}
                        AfterCalls::End(end) => return Ok(end),
                    }
                }
                LoopEnd::Cancelled => {
                    return Ok(RunEnd::Stopped(
                        control.reason().unwrap_or(StopReason::Shutdown),
                    ));
                }
                LoopEnd::Failed(error) => return Ok(RunEnd::Failed(error)),
                LoopEnd::OverBudget(hit) => return Ok(RunEnd::OverBudget(hit)),
                LoopEnd::OutOfRounds(_) => {
                    return Err(EngineError::Internal(
                        "a task's loop ran out of rounds without its summary round".into(),
                    ));
                }
            }
        }
    }

    /// The system prompt and the intent, the start of a task's conversation.
    fn begin_conversation(
        &self,
        task: &TaskRecord,
        ctx: &ToolContext,
        conversation: &mut Conversation,
    ) -> Result<(), EngineError> {
        let system = self
            .prompts
            .render(
                PromptName::AgentSystem,
                &json!({
                    "intent": task.intent,
                    "role": ctx.role().as_str(),
                    "platform": task.platform,
                    "stream_id": task.stream_id.as_str(),
                    "now": self.now().to_rfc3339(),
                    "max_rounds": self.config.config().task.max_rounds,
                }),
            )
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        conversation.defer(ChatMessage::system(system));
        conversation.defer(ChatMessage::user(task.intent.clone()));
        Ok(())
    }

    /// A task's round: its calls run in call order, each result checkpointed before the next
    /// call runs (the last one while the model is asked next). `ask_user` is handled last,
    /// after the gates, and suspends the task.
    async fn run_calls(
        &self,
        task: &mut TaskRecord,
        repeats: &mut std::collections::BTreeMap<String, u32>,
        conversation: &mut Conversation,
        calls: Vec<ToolCall>,
        ctx: &ToolContext,
    ) -> Result<Calls, EngineError> {
        let count = calls.len();
        let mut question: Option<(ToolCall, Value)> = None;
        for (index, call) in calls.into_iter().enumerate() {
            if ctx.cancel_token().is_cancelled() {
                return Ok(Calls::End(LoopEnd::Cancelled));
            }
            self.emit(TaskEvent::ToolCall {
                task_id: task.id,
                round: task.metadata.rounds,
                tool: call.name.clone(),
                arguments: head_tail(&call.arguments.to_string(), 300),
            });
            let outcome = if call.name == ASK_USER {
                match self
                    .registry
                    .admit(ASK_USER, ctx.role(), call.arguments.clone())
                {
                    Ok((_, args)) if question.is_none() => {
                        question = Some((call, args));
                        continue;
                    }
                    Ok(_) => ToolOutcome::error(
                        OutcomeKind::Failed,
                        "only one question at a time: ask again after the answer arrives",
                    ),
                    Err(refusal) => refusal,
                }
            } else {
                let config = self.config.config();
                match loop_guard::count(repeats, &config.task, &self.prompts, &call) {
                    Verdict::Run => match self.run_call(&call, ctx).await {
                        Some(outcome) => outcome,
                        None => return Ok(Calls::End(LoopEnd::Cancelled)),
                    },
                    Verdict::Warn(outcome) => outcome,
                    Verdict::Fail(error) => return Ok(Calls::End(LoopEnd::Failed(error))),
                }
            };
            if index + 1 == count && question.is_none() {
                // The round's last result: checkpointed while the model is asked next.
                self.note_result(task, conversation, &call, &outcome);
                return Ok(Calls::Unsaved);
            }
            self.record_result(task, conversation, &call, &outcome)
                .await?;
        }
        Ok(match question {
            Some((call, args)) => Calls::End(LoopEnd::Question(call, args)),
            None => Calls::Done,
        })
    }

    /// Runs one call of a task (discovery calls answered here); `None` when the run was
    /// stopped first. A tool that finished as the stop arrived keeps its result: recording it
    /// means it is not run again on resume.
    async fn run_call(&self, call: &ToolCall, ctx: &ToolContext) -> Option<ToolOutcome> {
        let role = ctx.role();
        if let Some(outcome) =
            discovery::dispatch(&self.registry, &call.name, role, &call.arguments)
        {
            return Some(outcome);
        }
        tokio::select! {
            biased;
            outcome = self.registry.execute(&call.name, role, call.arguments.clone(), ctx) => Some(outcome),
            _ = ctx.cancel_token().cancelled() => None,
        }
    }

    /// Checkpoints one tool result and adds it to the conversation.
    pub(crate) async fn record_result(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
        call: &ToolCall,
        outcome: &ToolOutcome,
    ) -> Result<(), EngineError> {
        self.note_result(task, conversation, call, outcome);
        self.save_unsaved(task, conversation).await
    }

    /// Adds one tool result to the conversation (not checkpointed yet) and reports it.
    fn note_result(
        &self,
        task: &TaskRecord,
        conversation: &mut Conversation,
        call: &ToolCall,
        outcome: &ToolOutcome,
    ) {
        let text = head_tail(&outcome.value.to_string(), MAX_TOOL_RESULT_CHARS);
        self.emit(TaskEvent::ToolResult {
            task_id: task.id,
            round: task.metadata.rounds,
            tool: call.name.clone(),
            ok: outcome.is_ok() && outcome.value.get("success") != Some(&Value::Bool(false)),
            preview: head_tail(&text, 300),
        });
        conversation.defer(ChatMessage::tool_result(call.id.clone(), text));
    }

    /// Checkpoints everything not yet saved: the task and the history entries in one
    /// transaction, only while the task is still `running` as far as the store knows.
    pub(crate) async fn save_unsaved(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
    ) -> Result<(), EngineError> {
        let round = task.metadata.rounds;
        if self
            .save_with_history(task, conversation, round, TaskStatus::Running)
            .await?
        {
            Ok(())
        } else {
            Err(changed_under_loop(task))
        }
    }

    /// Moves the conversation's unsaved messages out as history entries of the current round,
    /// counted in `task` (which is written with them), with the usage records due to be written
    /// with them (see [`crate::usage::Meter::stage`]).
    pub(crate) fn take_unsaved(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
    ) -> Result<Checkpoint, EngineError> {
        let entries = self.unsaved_entries(conversation, task.metadata.rounds)?;
        conversation.unsaved.clear();
        task.metadata.history_len += entries.len() as u64;
        task.updated_at = self.now();
        let usage = self.meter.stage(task);
        Ok(Checkpoint { entries, usage })
    }

    /// Writes a checkpoint taken by [`Engine::take_unsaved`] (compare-and-set on `running`).
    pub(crate) async fn write_checkpoint(
        &self,
        task: &TaskRecord,
        checkpoint: &Checkpoint,
    ) -> Result<(), EngineError> {
        match self
            .checkpoint_with_usage(task, TaskStatus::Running, checkpoint)
            .await?
        {
            SaveOutcome::Saved => Ok(()),
            SaveOutcome::Conflict { actual } => {
                tracing::debug!(task = %task.id, %actual, "changed concurrently");
                Err(changed_under_loop(task))
            }
        }
    }

    /// Saves `task` (compare-and-set on `expected`) together with the conversation's unsaved
    /// messages; emits a status event when the status changed. Returns whether it was saved.
    pub(crate) async fn save_with_history(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
        round: u32,
        expected: TaskStatus,
    ) -> Result<bool, EngineError> {
        let at = self.now();
        let entries = self.unsaved_entries(conversation, round)?;
        task.metadata.history_len += entries.len() as u64;
        task.updated_at = at;
        let checkpoint = Checkpoint {
            entries,
            usage: self.meter.stage(task),
        };
        match self
            .checkpoint_with_usage(task, expected, &checkpoint)
            .await?
        {
            SaveOutcome::Saved => {
                conversation.unsaved.clear();
                if task.status != expected
                    && let Some(change) = task.status_log.last()
                {
                    self.emit(TaskEvent::Status {
                        task_id: task.id,
                        status: task.status,
                        reason: change.reason.clone(),
                    });
                }
                Ok(true)
            }
            SaveOutcome::Conflict { actual } => {
                tracing::debug!(task = %task.id, %expected, %actual, "changed concurrently");
                Ok(false)
            }
        }
    }

    /// A checkpoint (compare-and-set on `expected`) with the usage records staged for it, in
    /// one transaction; once it is stored the meter forgets them.
    async fn checkpoint_with_usage(
        &self,
        task: &TaskRecord,
        expected: TaskStatus,
        checkpoint: &Checkpoint,
    ) -> Result<SaveOutcome, EngineError> {
        let Checkpoint { entries, usage } = checkpoint;
        let outcome = if usage.is_empty() {
            self.store.checkpoint(task, Some(expected), entries).await?
        } else {
            self.store
                .checkpoint_with_usage(task, Some(expected), entries, usage)
                .await?
        };
        if outcome == SaveOutcome::Saved {
            self.meter.written(task.id, usage);
        }
        Ok(outcome)
    }

    /// The conversation's messages not checkpointed yet, as history entries of `round`.
    pub(crate) fn unsaved_entries(
        &self,
        conversation: &Conversation,
        round: u32,
    ) -> Result<Vec<NewHistoryEntry>, EngineError> {
        let at = self.now();
        conversation
            .unsaved
            .iter()
            .map(|message| {
                Ok(NewHistoryEntry {
                    round,
                    kind: HistoryKind::Message,
                    payload: serde_json::to_value(message)
                        .map_err(|e| EngineError::Internal(e.to_string()))?,
                    at,
                })
            })
            .collect()
    }

    /// Reads instructions injected since the loop last looked (only when there are some).
    pub(crate) async fn read_injections(
        &self,
        task: &TaskRecord,
        conversation: &mut Conversation,
    ) -> Result<(), EngineError> {
        if !self.schedule.take_injected(task.id) {
            return Ok(());
        }
        let from = conversation
            .last_seq
            .map_or(task.metadata.history_from, |seq| seq + 1);
        for entry in self.store.history(task.id, from).await? {
            conversation.last_seq = Some(entry.seq);
            if entry.kind == HistoryKind::Injection {
                let message: ChatMessage = serde_json::from_value(entry.payload)
                    .map_err(|e| EngineError::Internal(format!("bad injection entry: {e}")))?;
                conversation.pending_injections.push(message);
            }
        }
        Ok(())
    }
}

fn changed_under_loop(task: &TaskRecord) -> EngineError {
    EngineError::Internal(format!(
        "task {} changed while its loop was running",
        task.id.short()
    ))
}
