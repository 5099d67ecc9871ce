//! The reply path (see docs/design.md, "Replies and delivery"): polish (optional, never blocking), split, and send with
//! retries; and instant tasks, which deliver one text through it.
//!
//! An instant task fixes its final parts in the record before sending the first, and records
//! each part sent, so a restart neither loses a reply nor sends a part twice (at most the part
//! in flight at the crash). Every part goes out with a stable id ([`part_id`]: the reply task or
//! the question, and the part's position), so a host that remembers ids drops even that resend.

use std::time::Duration;

use serde_json::json;

use mai_core::backoff::Backoff;
use mai_core::config::Config;
use mai_core::host::Delivery;
use mai_core::ids::{PersonId, StreamId};
use mai_core::model::{ChatMessage, ChatRequest, ModelPurpose};
use mai_core::store::SaveOutcome;
use mai_core::task::{DeliveryProgress, TaskId, TaskRecord, TaskStatus, Trigger};

use crate::engine::Engine;
use crate::events::TaskEvent;
use crate::prompts::PromptName;
use crate::run::{RunControl, RunEnd, StopReason};
use crate::splitter;
use crate::usage::{Served, record_of};
use mai_core::usage::UsagePurpose;

/// How long a polish may take before the original text is sent instead.
const POLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest wait between send attempts, as a multiple of `[send] retry_base_ms`.
const MAX_SEND_WAIT_FACTOR: u32 = 1 << 10;

/// When `task`'s text needs no polish (raw, or polish off), splits it into its final parts
/// now, so the claim fixes them in the same write. A function of the config snapshot alone, so
/// a claim can run it where the store reads and writes the task.
pub(crate) fn fix_parts_unpolished(config: &Config, task: &mut TaskRecord) {
    if !task.metadata.raw && config.polish.enabled {
        return;
    }
    let text = task.metadata.answer.as_deref().unwrap_or(&task.intent);
    let parts = split_parts(config, text, true);
    task.metadata.delivery = Some(DeliveryProgress { parts, sent: 0 });
}

/// The parts of a final text: split if asked and enabled; none for a blank text.
fn split_parts(config: &Config, text: &str, split: bool) -> Vec<String> {
    if split && config.splitter.enabled {
        let parts = splitter::split(
            text,
            config.splitter.max_length as usize,
            config.splitter.max_messages as usize,
        );
        if !parts.is_empty() {
            return parts;
        }
    }
    if text.trim().is_empty() {
        Vec::new()
    } else {
        vec![text.to_owned()]
    }
}

impl Engine {
    /// When the text needs no polish (raw, or polish off), splits it into its final parts now,
    /// so the claim fixes them in the same write.
    pub(crate) fn fix_parts_unpolished(&self, task: &mut TaskRecord) {
        fix_parts_unpolished(&self.config.config(), task);
    }

    /// The final parts of the reply to `task`'s answer `text`, prepared (polished, split)
    /// while the task still runs, so the write that completes it fixes them in its reply and
    /// the reply needs no write of its own before its first send. `None` for a cron task,
    /// whose reply is made (and prepared) in a later write; `Err` with the stop when the run
    /// was stopped meanwhile (the answer is then not recorded: a resumed task asks again).
    pub(crate) async fn answer_parts(
        &self,
        task: &TaskRecord,
        text: &str,
        control: &RunControl,
    ) -> Result<Option<Vec<String>>, StopReason> {
        if matches!(task.trigger, Trigger::Cron { .. }) {
            return Ok(None);
        }
        // The polish's usage rides on the write that completes the task.
        let served = Served {
            held: true,
            ..Served::task(task)
        };
        tokio::select! {
            _ = control.token.cancelled() => {
                Err(control.reason().unwrap_or(StopReason::Shutdown))
            }
            parts = self.prepare_parts(&served, task.reply_stream(), text, true, true) => {
                Ok(Some(parts))
            }
        }
    }

    /// Delivers an instant task's text to its reply stream.
    pub(crate) async fn run_instant(&self, task: &mut TaskRecord, control: &RunControl) -> RunEnd {
        let stream = task.reply_stream().clone();
        if task.metadata.delivery.is_none() {
            let text = task
                .metadata
                .answer
                .clone()
                .unwrap_or_else(|| task.intent.clone());
            let polish = !task.metadata.raw;
            let served = Served::task(task);
            let parts = tokio::select! {
                _ = control.token.cancelled() => {
                    return RunEnd::Stopped(control.reason().unwrap_or(StopReason::Shutdown));
                }
                parts = self.prepare_parts(&served, &stream, &text, polish, true) => parts,
            };
            task.metadata.delivery = Some(DeliveryProgress { parts, sent: 0 });
            if let Err(end) = self.save_progress(task).await {
                return end;
            }
        }
        loop {
            let Some(progress) = &task.metadata.delivery else {
                return RunEnd::Failed("delivery progress vanished".into());
            };
            let Some(part) = progress.parts.get(progress.sent).cloned() else {
                return RunEnd::Delivered;
            };
            let id = part_id(&task.id.to_string(), progress.sent);
            // A reply's first part in a group names the person who asked.
            let to = mention_of(task).filter(|_| task.metadata.is_reply && progress.sent == 0);
            if let Some(reason) = control.reason() {
                return RunEnd::Stopped(reason);
            }
            let sent = tokio::select! {
                _ = control.token.cancelled() => {
                    return RunEnd::Stopped(control.reason().unwrap_or(StopReason::Shutdown));
                }
                sent = self.send_with_retries(task.id, &stream, &part, &id, to.as_ref()) => sent,
            };
            if let Err(error) = sent {
                return RunEnd::Failed(error);
            }
            let mut last = false;
            if let Some(progress) = task.metadata.delivery.as_mut() {
                progress.sent += 1;
                last = progress.sent >= progress.parts.len();
            }
            // The last part's progress is saved with the completion (a crash before it resends
            // that part, as a crash right after any send does).
            if last {
                return RunEnd::Delivered;
            }
            if let Err(end) = self.save_progress(task).await {
                return end;
            }
        }
    }

    async fn save_progress(&self, task: &mut TaskRecord) -> Result<(), RunEnd> {
        task.updated_at = self.now();
        match self.store.save(task, Some(TaskStatus::Running)).await {
            Ok(SaveOutcome::Saved) => Ok(()),
            Ok(SaveOutcome::Conflict { actual }) => Err(RunEnd::Failed(format!(
                "task became {actual} while delivering"
            ))),
            Err(error) if error.is_unavailable() => Err(RunEnd::Stopped(StopReason::StoreLost)),
            Err(error) => Err(RunEnd::Failed(format!(
                "could not record delivery progress: {error}"
            ))),
        }
    }

    /// Polishes (if enabled), splits (if enabled), and sends every part; part ids start with
    /// `key`; the first part mentions `to` (see [`mention_of`]). Used for questions, which are
    /// not tasks of their own.
    pub(crate) async fn deliver(
        &self,
        served: &Served,
        task_id: TaskId,
        stream: &StreamId,
        text: &str,
        key: &str,
        to: Option<&PersonId>,
    ) -> Result<(), String> {
        let parts = self.prepare_parts(served, stream, text, true, true).await;
        for (index, part) in parts.iter().enumerate() {
            let to = to.filter(|_| index == 0);
            self.send_with_retries(task_id, stream, part, &part_id(key, index), to)
                .await?;
        }
        Ok(())
    }

    /// The final parts of a text: polished if asked and enabled, split if asked and enabled.
    pub(crate) async fn prepare_parts(
        &self,
        served: &Served,
        stream: &StreamId,
        text: &str,
        polish: bool,
        split: bool,
    ) -> Vec<String> {
        if polish && self.config.config().polish.enabled {
            let text = self.polish(served, stream, text).await;
            self.split_parts(&text, split)
        } else {
            self.split_parts(text, split)
        }
    }

    /// A notice's parts: never polished, split as configured.
    pub(crate) fn notice_parts(&self, text: &str) -> Vec<String> {
        self.split_parts(text, true)
    }

    /// The parts of a final text: split if asked and enabled; none for a blank text.
    fn split_parts(&self, text: &str, split: bool) -> Vec<String> {
        split_parts(&self.config.config(), text, split)
    }

    /// Rewrites machine output into a chat reply in the bot's persona. Any failure returns the
    /// original text: polish never blocks a reply.
    pub(crate) async fn polish(&self, served: &Served, stream: &StreamId, text: &str) -> String {
        let polished = self.try_polish(served, stream, text);
        match tokio::time::timeout(POLISH_TIMEOUT, polished).await {
            Ok(Ok(polished)) if !polished.trim().is_empty() => polished.trim().to_owned(),
            Ok(Ok(_)) => text.to_owned(),
            Ok(Err(error)) => {
                tracing::warn!(%error, "polish failed; sending the original text");
                text.to_owned()
            }
            Err(_) => {
                tracing::warn!("polish timed out; sending the original text");
                text.to_owned()
            }
        }
    }

    async fn try_polish(
        &self,
        served: &Served,
        stream: &StreamId,
        text: &str,
    ) -> Result<String, String> {
        let config = self.config.config();
        let persona = self.host.persona().await;
        let recent = self
            .host
            .recent_messages(stream, 10)
            .await
            .map_err(|e| e.to_string())?;
        let jargon = if config.polish.use_jargon {
            self.host
                .jargon(stream, text)
                .await
                .map_err(|e| e.to_string())?
        } else {
            Vec::new()
        };
        let prompt = self
            .prompts
            .render(
                PromptName::Polish,
                &json!({
                    "text": text,
                    "bot_name": persona.bot_name,
                    "personality": persona.personality,
                    "reply_style": persona.reply_style,
                    "recent_messages": recent,
                    "jargon": jargon,
                    "use_jargon": config.polish.use_jargon,
                }),
            )
            .map_err(|e| e.to_string())?;
        let request = ChatRequest::new(ModelPurpose::Replyer, vec![ChatMessage::user(prompt)]);
        let started = std::time::Instant::now();
        let response = self
            .model
            .complete(&request)
            .await
            .map_err(|e| e.to_string())?;
        let record = record_of(
            self,
            served,
            UsagePurpose::Polish,
            &request,
            &response,
            started,
        );
        if served.held {
            self.meter.hold(record);
        } else {
            self.record_usage_now(record).await;
        }
        Ok(response.message.content)
    }

    /// Sends one part, retrying by the shared [`Backoff`]: `[send] retry_base_ms`, doubling, at
    /// most 1,024 times that. A send the host reports as not delivered counts as a failure.
    /// Every attempt carries the same `part_id`. A host may hold a part while it cannot deliver
    /// (the MaiBot host waits for its bridge): that wait is inside one attempt and costs no
    /// retry. Once the task's run is stopped (cancel, pause, timeout) or the service stops, no
    /// further attempt starts and a wait for one ends at once; an attempt in flight finishes.
    pub(crate) async fn send_with_retries(
        &self,
        task_id: TaskId,
        stream: &StreamId,
        part: &str,
        part_id: &str,
        to: Option<&PersonId>,
    ) -> Result<(), String> {
        let send = self.config.config().send.clone();
        let base = Duration::from_millis(send.retry_base_ms);
        let backoff = Backoff::new(base, base.saturating_mul(MAX_SEND_WAIT_FACTOR));
        let run = self
            .schedule
            .control(task_id)
            .map(|control| control.token.clone())
            .unwrap_or_default();
        let mut last_error = String::new();
        for attempt in 0..=send.max_retries {
            if attempt > 0 {
                let stopped = tokio::select! {
                    () = run.cancelled() => true,
                    () = self.shutdown_token().cancelled() => true,
                    () = tokio::time::sleep(backoff.delay(attempt - 1)) => false,
                };
                if stopped {
                    return Err(format!(
                        "stopped retrying the send to stream {stream} after {attempt} attempts \
                         (the task or the service stopped): {last_error}"
                    ));
                }
            }
            let delivery = match to {
                Some(person) => self.host.send_part_to(stream, person, part, part_id).await,
                None => self.host.send_part(stream, part, part_id).await,
            };
            match delivery {
                Ok(Delivery::Sent) => {
                    if attempt > 0 {
                        tracing::warn!(task = %task_id, stream = %stream, retries = attempt,
                            last_error = %last_error, "sent after retries");
                    }
                    self.emit(TaskEvent::Sent {
                        task_id,
                        stream_id: stream.clone(),
                        text: part.to_owned(),
                    });
                    return Ok(());
                }
                Ok(Delivery::Rejected(reason)) => {
                    last_error = format!("the host did not deliver it: {reason}")
                }
                Err(error) => last_error = error.to_string(),
            }
            tracing::debug!(task = %task_id, stream = %stream, attempt, error = %last_error, "send failed");
        }
        // One line for the whole send, with its count (each attempt is logged at debug).
        tracing::warn!(task = %task_id, stream = %stream, attempts = send.max_retries + 1,
            error = %last_error, "send failed after every retry");
        Err(format!(
            "could not send to stream {stream} after {} attempts: {last_error}",
            send.max_retries + 1
        ))
    }

    /// Cross-stream replies leave an invisible note in the target stream saying why.
    pub(crate) async fn note_cross_stream(&self, task: &TaskRecord, text: &str) {
        let target = task.reply_stream();
        let summary: String = text.chars().take(200).collect();
        match self.prompts.render(
            PromptName::NoteCrossStream,
            &json!({"title": task.title, "origin_stream": task.stream_id.as_str(), "summary": summary}),
        ) {
            Ok(note) => {
                if let Err(error) = self.host.append_context(target, &note).await {
                    tracing::warn!(task = %task.id, %error, "could not add the cross-stream note");
                }
            }
            Err(error) => tracing::warn!(%error, "note_cross_stream template failed"),
        }
    }
}

/// The id of the `index`th part of what `key` names (a reply task's id, or a question's
/// [`crate::waiting`] key): derived, never random, so the same part sent again — after a retry
/// or a restart of either side — carries the same id.
pub fn part_id(key: &str, index: usize) -> String {
    format!("{key}:{index}")
}

/// Whom a task's reply or question names in its chat: its requester, when the task belongs to a
/// group chat (in a private chat it is obvious).
pub(crate) fn mention_of(task: &TaskRecord) -> Option<PersonId> {
    task.metadata.group_id.as_ref()?;
    task.requester().cloned()
}
