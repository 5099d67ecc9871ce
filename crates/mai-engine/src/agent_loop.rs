//! The agent loop: each round presents every tool the task's role may use, applies injected
//! instructions, asks the model, runs its tool calls through the registry's gates, and
//! checkpoints before the next model call. It stops with an honest final answer at
//! `max_rounds`, and it honours cancellation at every await.
//!
//! Unknown tools, bad arguments, tool failures and over-long outputs go back to the model as
//! tool results; nothing the model does can kill the loop.

use std::sync::Arc;

use serde_json::{Value, json};

use mai_core::model::{ChatMessage, ChatRequest, ModelPurpose, ToolCall, ToolSpec};
use mai_core::role::Role;
use mai_core::store::{HistoryKind, NewHistoryEntry, SaveOutcome};
use mai_core::task::{TaskRecord, TaskStatus};
use mai_core::tool::{
    MAX_ARGUMENT_BYTES, OutcomeKind, ToolContext, ToolDefinition, ToolOutcome, ToolRegistry,
    discovery,
};

use crate::builtin_tools::ASK_USER;
use crate::conversation::{Conversation, Tail};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::events::TaskEvent;
use crate::prompts::PromptName;
use crate::run::{RunControl, RunEnd, StopReason};
use crate::truncate::head_tail;

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
pub(crate) fn bound_tool_calls(message: &mut ChatMessage) {
    let total = message.tool_calls.len();
    if total > MAX_TOOL_CALLS_PER_ROUND {
        message.tool_calls.truncate(MAX_TOOL_CALLS_PER_ROUND);
        let note = format!(
            "[mai-agent: this reply asked for {total} tool calls; only the first \
             {MAX_TOOL_CALLS_PER_ROUND} were run and the other {} were dropped. Ask for at most \
             {MAX_TOOL_CALLS_PER_ROUND} per reply.]",
            total - MAX_TOOL_CALLS_PER_ROUND
        );
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
            call.arguments = Value::String(format!(
                "(mai-agent dropped these arguments: {size} bytes, over the limit of \
                 {MAX_ARGUMENT_BYTES} bytes per tool call)"
            ));
        }
    }
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

/// What the loop does after running a batch of tool calls.
pub(crate) enum AfterCalls {
    Continue,
    /// Continue; the round's last result is in the conversation but not checkpointed yet: its
    /// write overlaps the next model call, and is durable before anything else happens.
    ContinueUnsaved,
    End(RunEnd),
}

/// What a model call came back with.
enum Called {
    End(RunEnd),
    Reply {
        message: ChatMessage,
        round: u32,
        last_round: bool,
    },
}

impl Engine {
    pub(crate) async fn run_agent(&self, task: &mut TaskRecord, control: &RunControl) -> RunEnd {
        match self.agent_loop(task, control).await {
            Ok(end) => end,
            Err(error) => match control.reason() {
                Some(reason) => RunEnd::Stopped(reason),
                None => RunEnd::Failed(error.to_string()),
            },
        }
    }

    async fn agent_loop(
        &self,
        task: &mut TaskRecord,
        control: &RunControl,
    ) -> Result<RunEnd, EngineError> {
        // Everything injected so far is in the history read below.
        self.schedule.take_injected(task.id);
        let history = self
            .store
            .history(task.id, task.metadata.history_from)
            .await?;
        let mut conversation = Conversation::rebuild(&history).map_err(EngineError::Internal)?;
        let ctx = self.tool_context(task, control.token.clone());
        if conversation.messages.is_empty() {
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
        }
        let mut tools = ToolsCache::default();
        let mut checkpoint_due = false;
        loop {
            if let Some(reason) = control.reason() {
                if checkpoint_due {
                    self.save_unsaved(task, &mut conversation).await?;
                }
                return Ok(RunEnd::Stopped(reason));
            }
            match conversation.tail() {
                Tail::Answered(text) => {
                    // Written with the completion (one write instead of two).
                    let history = self.unsaved_entries(&conversation, task.metadata.rounds)?;
                    return Ok(RunEnd::Answer { text, history });
                }
                Tail::Unfinished(calls) => {
                    match self
                        .run_calls(task, &mut conversation, calls, &ctx, control)
                        .await?
                    {
                        AfterCalls::Continue => {}
                        AfterCalls::ContinueUnsaved => checkpoint_due = true,
                        AfterCalls::End(end) => return Ok(end),
                    }
                }
                Tail::Empty | Tail::ReadyForModel => {
                    let due = std::mem::take(&mut checkpoint_due);
                    if let Some(end) = self
                        .model_round(task, &mut conversation, &mut tools, &ctx, control, due)
                        .await?
                    {
                        return Ok(end);
                    }
                }
            }
        }
    }

    /// One model call. Returns `Some` when the loop must end.
    ///
    /// With `checkpoint_due`, the previous round's last tool result is written while the model
    /// is asked (see docs/design.md, "The agent loop and checkpoints"): the write is awaited, and
    /// its failure ends the loop as before, ahead of anything the reply leads to — the next
    /// round's tools, a question, the final answer's delivery.
    async fn model_round(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
        tools_cache: &mut ToolsCache,
        ctx: &ToolContext,
        control: &RunControl,
        checkpoint_due: bool,
    ) -> Result<Option<RunEnd>, EngineError> {
        let entries = if checkpoint_due {
            self.take_unsaved(task, conversation)?
        } else {
            Vec::new()
        };
        let task_now: &TaskRecord = task;
        let write = async {
            if entries.is_empty() {
                return Ok(());
            }
            self.write_checkpoint(task_now, &entries).await
        };
        let call = self.call_model(task_now, conversation, tools_cache, ctx, control);
        let (written, called) = tokio::join!(write, call);
        written?;
        let (mut message, round, last_round) = match called? {
            Called::End(end) => return Ok(Some(end)),
            Called::Reply {
                message,
                round,
                last_round,
            } => (message, round, last_round),
        };
        if last_round {
            message.tool_calls.clear();
        }
        bound_tool_calls(&mut message);
        if message.tool_calls.is_empty() && message.content.trim().is_empty() {
            message.content = "(the agent finished without writing an answer)".to_owned();
        }
        task.metadata.rounds = round;
        // A reply that calls tools is saved with its first result; the final answer with the
        // task's completion.
        conversation.defer(message);
        Ok(None)
    }

    /// Applies injections, presents the round's tools and asks the model (stopping with the
    /// run's control).
    async fn call_model(
        &self,
        task: &TaskRecord,
        conversation: &mut Conversation,
        tools_cache: &mut ToolsCache,
        ctx: &ToolContext,
        control: &RunControl,
    ) -> Result<Called, EngineError> {
        self.read_injections(task, conversation).await?;
        conversation.apply_injections();
        let round = task.metadata.rounds + 1;
        let max_rounds = self.config.config().task.max_rounds;
        let last_round = round > max_rounds;
        let tools = if last_round {
            // Out of rounds: no tools, and an explicit request for an honest summary.
            let note = self
                .prompts
                .render(
                    PromptName::MaxRoundsReached,
                    &json!({"max_rounds": max_rounds}),
                )
                .map_err(|e| EngineError::Internal(e.to_string()))?;
            conversation.defer(ChatMessage::user(note));
            Vec::new()
        } else {
            tools_cache.take(&self.registry, ctx.role())
        };
        self.emit(TaskEvent::Round {
            task_id: task.id,
            round,
        });
        // The conversation and the tool list move into the request and back: no per-round copy
        // of a history that grows every round.
        let mut request = ChatRequest::new(
            ModelPurpose::Agent,
            std::mem::take(&mut conversation.messages),
        )
        .with_tools(tools);
        let response = tokio::select! {
            _ = control.token.cancelled() => None,
            response = self.model.complete(&request) => Some(response),
        };
        conversation.messages = std::mem::take(&mut request.messages);
        if !last_round {
            tools_cache.put_back(std::mem::take(&mut request.tools));
        }
        let Some(response) = response else {
            return Ok(Called::End(RunEnd::Stopped(
                control.reason().unwrap_or(StopReason::Shutdown),
            )));
        };
        Ok(match response {
            Ok(response) => Called::Reply {
                message: response.message,
                round,
                last_round,
            },
            Err(error) => Called::End(RunEnd::Failed(format!("model call failed: {error}"))),
        })
    }

    /// Runs the unanswered calls of the last model reply, in call order. `ask_user` is handled
    /// last, after the gates, and suspends the task.
    async fn run_calls(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
        calls: Vec<ToolCall>,
        ctx: &ToolContext,
        control: &RunControl,
    ) -> Result<AfterCalls, EngineError> {
        let round = task.metadata.rounds;
        let count = calls.len();
        let mut question: Option<(ToolCall, Value)> = None;
        for (index, call) in calls.into_iter().enumerate() {
            if let Some(reason) = control.reason() {
                return Ok(AfterCalls::End(RunEnd::Stopped(reason)));
            }
            let role = ctx.role();
            self.emit(TaskEvent::ToolCall {
                task_id: task.id,
                round,
                tool: call.name.clone(),
                arguments: head_tail(&call.arguments.to_string(), 300),
            });
            let outcome = if call.name == ASK_USER {
                match self.registry.admit(ASK_USER, role, call.arguments.clone()) {
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
            } else if let Some(outcome) =
                discovery::dispatch(&self.registry, &call.name, role, &call.arguments)
            {
                outcome
            } else {
                // A tool that finished as the stop arrived keeps its result: recording it means
                // it is not run again on resume.
                tokio::select! {
                    biased;
                    outcome = self.registry.execute(&call.name, role, call.arguments.clone(), ctx) => outcome,
                    _ = control.token.cancelled() => {
                        return Ok(AfterCalls::End(RunEnd::Stopped(
                            control.reason().unwrap_or(StopReason::Shutdown),
                        )));
                    }
                }
            };
            if index + 1 == count && question.is_none() {
                // The round's last result: checkpointed while the model is asked next.
                self.note_result(task, conversation, &call, &outcome);
                return Ok(AfterCalls::ContinueUnsaved);
            }
            self.record_result(task, conversation, &call, &outcome)
                .await?;
        }
        match question {
            Some((call, args)) => self.ask_user(task, conversation, call, args, control).await,
            None => Ok(AfterCalls::Continue),
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
    async fn save_unsaved(
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
    /// counted in `task` (which is written with them).
    fn take_unsaved(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
    ) -> Result<Vec<NewHistoryEntry>, EngineError> {
        let entries = self.unsaved_entries(conversation, task.metadata.rounds)?;
        conversation.unsaved.clear();
        task.metadata.history_len += entries.len() as u64;
        task.updated_at = self.now();
        Ok(entries)
    }

    /// Writes a checkpoint taken by [`Engine::take_unsaved`] (compare-and-set on `running`).
    async fn write_checkpoint(
        &self,
        task: &TaskRecord,
        entries: &[NewHistoryEntry],
    ) -> Result<(), EngineError> {
        match self
            .store
            .checkpoint(task, Some(TaskStatus::Running), entries)
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
        match self
            .store
            .checkpoint(task, Some(expected), &entries)
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
    async fn read_injections(
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

    /// The tool list of one round for `role`: essential, then discoverable.
    pub(crate) fn tool_specs(&self, role: Role) -> Vec<ToolSpec> {
        self.registry
            .presented(role)
            .iter()
            .map(|tool| tool.spec())
            .collect()
    }
}

fn changed_under_loop(task: &TaskRecord) -> EngineError {
    EngineError::Internal(format!(
        "task {} changed while its loop was running",
        task.id.short()
    ))
}
