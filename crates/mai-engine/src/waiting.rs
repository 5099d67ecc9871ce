//! `ask_user` (see docs/design.md, "Asking the user"): suspending a task on a question and waking it with the answer.
//!
//! A waiting task holds no slot and no live future: its conversation is in the history, and
//! memory keeps only an index entry and a timer. The answer (or the timeout) is appended to the
//! history as the result of the `ask_user` call and the task is queued; the loop then continues
//! from the rebuilt conversation — the same path a restart takes.

use chrono::Duration;
use serde_json::{Value, json};

use mai_core::ids::{PersonId, StreamId};
use mai_core::model::{ChatMessage, ToolCall};
use mai_core::store::{HistoryKind, NewHistoryEntry, SaveOutcome, TaskWrite};
use mai_core::task::{TaskId, TaskRecord, TaskStatus, WaitingQuestion};
use mai_core::tool::{OutcomeKind, ToolOutcome};

use crate::agent_loop::AfterCalls;
use crate::cluster::Taking;
use crate::conversation::Conversation;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::events::TaskEvent;
use crate::prompts::PromptName;
use crate::run::{RunControl, RunEnd};

impl Engine {
    /// Suspends the task on `call`'s question. Order matters: the resume signal is registered
    /// before the state change, the state is persisted before the question is sent.
    pub(crate) async fn ask_user(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
        call: ToolCall,
        args: Value,
        control: &RunControl,
    ) -> Result<AfterCalls, EngineError> {
        let question = args
            .get("question")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_owned();
        let asked_at = self.now();
        let timeout = Duration::minutes(self.config.config().task.default_timeout_min.into());
        // 1. The resume signal.
        self.schedule.await_answer(task, asked_at + timeout);
        // 2. The state change, persisted.
        task.metadata.waiting = Some(WaitingQuestion {
            call_id: call.id.clone(),
            question: question.clone(),
            asked_at,
            unsent: true,
        });
        task.transition(
            TaskStatus::WaitingInput,
            "agent",
            "asked the user",
            asked_at,
        )?;
        // The running time so far goes with the waiting state (waiting time does not count).
        control.add_runtime(task, asked_at);
        // The model's reply with the question is saved with the state change, so the answer can
        // later complete its call.
        let round = task.metadata.rounds;
        if !self
            .save_with_history(task, conversation, round, TaskStatus::Running)
            .await?
        {
            self.forget_question(task.id);
            return Ok(AfterCalls::End(RunEnd::Waiting));
        }
        // Register again now that the state is saved: a message that arrived during the save
        // took the signal but could not answer a question not yet asked (both are idempotent).
        self.schedule.await_answer(task, asked_at + timeout);
        // 3. The question, polished, into the task's stream.
        let stream = task.stream_id.clone();
        let key = question_key(task.id, &call.id);
        let to = crate::reply::mention_of(task);
        if let Err(error) = self
            .deliver(
                &crate::usage::Served::task(task),
                task.id,
                &stream,
                &question,
                &key,
                to.as_ref(),
            )
            .await
        {
            return self
                .question_not_delivered(task, conversation, &call, &error)
                .await;
        }
        // 4. Sent: a restart must not ask again.
        self.mark_question_sent(task).await;
        // 5. The invisible note, so the planner knows a task is waiting and for what.
        self.announce_question(task, question).await;
        Ok(AfterCalls::End(RunEnd::Waiting))
    }

    /// The question could not be sent: unless someone answered meanwhile, the task runs on and
    /// the model gets the failure as the call's result.
    async fn question_not_delivered(
        &self,
        task: &mut TaskRecord,
        conversation: &mut Conversation,
        call: &ToolCall,
        error: &str,
    ) -> Result<AfterCalls, EngineError> {
        if !self.forget_question(task.id) {
            // Someone answered meanwhile: the answer is in the history and the task is
            // queued; let that resume it.
            return Ok(AfterCalls::End(RunEnd::Waiting));
        }
        task.metadata.waiting = None;
        task.transition(
            TaskStatus::Running,
            "agent",
            "question not delivered",
            self.now(),
        )?;
        if !self.save_status(task, TaskStatus::WaitingInput).await? {
            return Ok(AfterCalls::End(RunEnd::Waiting));
        }
        let outcome = ToolOutcome::error(
            OutcomeKind::Failed,
            format!(
                "could not deliver the question to the user: {error}; continue without the answer or give up"
            ),
        );
        self.record_result(task, conversation, call, &outcome)
            .await?;
        Ok(AfterCalls::Continue)
    }

    /// Clears the question's `unsent` mark. A compare-and-set on the question: an answer that
    /// came first cleared it, and wins. A failure only means a restart asks again.
    async fn mark_question_sent(&self, task: &mut TaskRecord) {
        let Some(waiting) = task.metadata.waiting.as_mut() else {
            return;
        };
        waiting.unsent = false;
        let call_id = waiting.call_id.clone();
        let saved = self
            .store
            .write(&[TaskWrite::Save {
                task,
                expected: Some(TaskStatus::WaitingInput),
                expected_question: Some(&call_id),
                history: &[],
            }])
            .await;
        if let Err(error) = saved {
            tracing::warn!(task = %task.id, %error, "could not record that the question was sent; a restart asks it again");
        }
    }

    /// Start-up: a question saved with the waiting state but never sent (the service died
    /// before it reached the chat) is sent now, so the user can answer it.
    pub(crate) async fn resend_question(&self, mut task: TaskRecord) {
        let Some((question, key)) = task
            .metadata
            .waiting
            .as_ref()
            .map(|w| (w.question.clone(), question_key(task.id, &w.call_id)))
        else {
            return;
        };
        let stream = task.stream_id.clone();
        let to = crate::reply::mention_of(&task);
        if let Err(error) = self
            .deliver(
                &crate::usage::Served::task(&task),
                task.id,
                &stream,
                &question,
                &key,
                to.as_ref(),
            )
            .await
        {
            // The task keeps waiting; the question's timeout tells the model nobody answered.
            tracing::warn!(task = %task.id, %error, "could not send the question again after a restart");
            return;
        }
        self.mark_question_sent(&mut task).await;
        self.announce_question(&task, question).await;
    }

    /// The invisible note for the planner, and the event.
    async fn announce_question(&self, task: &TaskRecord, question: String) {
        let stream = task.stream_id.clone();
        match self.prompts.render(
            PromptName::NoteWaiting,
            &json!({"short_id": task.id.short(), "title": task.title, "question": question}),
        ) {
            Ok(note) => {
                if let Err(error) = self.host.append_context(&stream, &note).await {
                    tracing::warn!(task = %task.id, %error, "could not add the waiting note");
                }
            }
            Err(error) => tracing::warn!(%error, "note_waiting template failed"),
        }
        self.emit(TaskEvent::Question {
            task_id: task.id,
            question,
        });
    }

    /// Drops a task's resume signal; returns whether it was still registered.
    pub(crate) fn forget_question(&self, id: TaskId) -> bool {
        self.schedule.forget_question(id)
    }

    /// A message from `person` in `stream`: wakes the oldest task acting for them that waits
    /// there. Returns the woken task, if any.
    pub async fn handle_user_reply(
        &self,
        person: &PersonId,
        stream: &StreamId,
        text: &str,
    ) -> Result<Option<TaskId>, EngineError> {
        // Oldest first; an entry that no longer waits (answered or cancelled elsewhere) is
        // skipped so the reply still reaches a task that does.
        loop {
            let Some(id) = self.schedule.take_answerable(person, stream) else {
                return Ok(None);
            };
            match self
                .resume_with(
                    id,
                    json!({"success": true, "answer": text}),
                    Some(&person.to_string()),
                )
                .await
            {
                Ok(true) => return Ok(Some(id)),
                Ok(false) => continue,
                Err(error) => {
                    // Not recorded: keep the task reachable for the next reply.
                    self.schedule
                        .put_back_answerable(id, person.clone(), stream.clone());
                    return Err(error);
                }
            }
        }
    }

    /// Answers a specific waiting task (`/maitask ask`, `subagent_modify`, the CLI). Works from
    /// the store alone, so a process that does not run the task can answer it too. Returns false
    /// if it was not waiting for an answer (or already has one).
    /// `by` is the actor the resume's status-log line names.
    pub(crate) async fn answer_task(
        &self,
        id: TaskId,
        text: &str,
        by: &str,
    ) -> Result<bool, EngineError> {
        self.forget_question(id);
        self.resume_with(id, json!({"success": true, "answer": text}), Some(by))
            .await
    }

    pub(crate) async fn on_question_timeout(&self, id: TaskId) {
        if !self.schedule.question_expired(id) {
            return;
        }
        let result: Result<(), EngineError> = async {
            let Some(task) = self.store.get(id).await? else {
                return Ok(());
            };
            let question = task
                .metadata
                .waiting
                .as_ref()
                .map(|w| w.question.clone())
                .unwrap_or_default();
            let minutes = self.config.config().task.default_timeout_min;
            let message = self
                .prompts
                .render(
                    PromptName::AskUserTimeout,
                    &json!({"minutes": minutes, "question": question}),
                )
                .map_err(|e| EngineError::Internal(e.to_string()))?;
            self.resume_with(
                id,
                json!({"success": false, "timed_out": true, "error": message}),
                None,
            )
            .await
            .map(drop)
        }
        .await;
        if let Err(error) = result {
            tracing::error!(task = %id, %error, "could not time out a question");
        }
    }

    /// Records `result` as the `ask_user` call's result and queues the task to continue.
    /// Returns false if the task is not waiting or its question already has a result.
    ///
    /// The record is a compare-and-set on the waiting state: the write clears the question and
    /// lands only if the stored task still waits on it, so of two answers racing (in this
    /// process or another) exactly one is recorded.
    async fn resume_with(
        &self,
        id: TaskId,
        result: Value,
        answered_by: Option<&str>,
    ) -> Result<bool, EngineError> {
        let Some(mut task) = self.store.get(id).await? else {
            return Ok(false);
        };
        let (TaskStatus::WaitingInput, Some(waiting)) =
            (task.status, task.metadata.waiting.clone())
        else {
            return Ok(false);
        };
        if self.question_answered(&task).await? {
            // Answered already (its result is in the history): make sure it runs; queueing is
            // idempotent.
            self.enqueue(&task);
            return Ok(false);
        }
        let message = ChatMessage::tool_result(waiting.call_id.clone(), result.to_string());
        let now = self.now();
        let entry = NewHistoryEntry {
            round: task.metadata.rounds,
            kind: HistoryKind::Message,
            payload: serde_json::to_value(&message)
                .map_err(|e| EngineError::Internal(e.to_string()))?,
            at: now,
        };
        task.metadata.waiting = None;
        task.metadata.answered_by = answered_by.map(str::to_owned);
        task.metadata.history_len += 1;
        task.updated_at = now;
        let outcome = self
            .store
            .write(&[TaskWrite::Save {
                task: &task,
                expected: Some(TaskStatus::WaitingInput),
                expected_question: Some(&waiting.call_id),
                history: &[entry],
            }])
            .await?;
        if outcome != SaveOutcome::Saved {
            // Someone else answered (or cancelled) first.
            return Ok(false);
        }
        self.enqueue(&task);
        Ok(true)
    }

    /// Start-up (or a change seen from another instance): a waiting task either has its answer
    /// already (queue it) or waits again, with the time it has left.
    pub(crate) async fn recover_waiting(
        &self,
        task: &TaskRecord,
        taking: Taking,
    ) -> Result<(), EngineError> {
        if self.question_answered(task).await? {
            self.schedule.queue(task.id, task.priority);
            return Ok(());
        }
        // At start-up only: a change seen from another instance may be a question that instance
        // is sending right now.
        if taking == Taking::Start && task.metadata.waiting.as_ref().is_some_and(|w| w.unsent) {
            // In the background: channels may connect after start-up, and sends retry.
            let engine = self.clone();
            let task = task.clone();
            tokio::spawn(async move { engine.resend_question(task).await });
        }
        let timeout = Duration::minutes(self.config.config().task.default_timeout_min.into());
        let asked_at = task
            .metadata
            .waiting
            .as_ref()
            .map_or(task.updated_at, |w| w.asked_at);
        self.schedule.await_answer(task, asked_at + timeout);
        Ok(())
    }
}

/// What the part ids of a question start with: the task and the `ask_user` call, so the same
/// question sent again after a restart carries the same ids and a host that remembers them shows
/// it once.
fn question_key(task: TaskId, call_id: &str) -> String {
    format!("{task}:ask:{call_id}")
}
