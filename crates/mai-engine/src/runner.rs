//! Running one dispatched task from its slot to its next resting state: claim it with a
//! compare-and-set, run the agent loop or the delivery, then persist how it ended (completed
//! with a reply task, failed with a notice, waiting, paused, cancelled) and re-arm cron tasks.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use mai_core::config::Config;
use mai_core::store::{Claim, NewHistoryEntry, SaveOutcome, StoreError, TaskWrite};
use mai_core::task::{
    DeliveryProgress, NewTask, PauseCause, TaskId, TaskLevel, TaskRecord, TaskStatus, Trigger,
};

use crate::conversation::{Conversation, Tail};
use crate::cron::next_fire_blocking;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::events::TaskEvent;
use crate::reply::fix_parts_unpolished;
use crate::run::{RunControl, RunEnd, StopReason};

const ACTOR: &str = "scheduler";

/// Whether `task` as stored is due at `now`: scheduled for then or earlier, or paused by a
/// budget (its timer fired). A timer armed for an earlier fire time of a cron task that another
/// instance already ran (and armed again for later) finds it not due: each fire time runs once.
pub(crate) fn is_due(task: &TaskRecord, now: DateTime<Utc>) -> bool {
    paused_by_budget(task)
        || (task.status == TaskStatus::Scheduled && task.scheduled_at.is_none_or(|at| at <= now))
}

/// The claim of a due task, applied to the record as stored: `scheduled → pending → running`,
/// an instant task's parts fixed when no polish is needed. `false` (nothing written) when it is
/// no longer due (see [`is_due`]).
fn claim_due(config: &Config, task: &mut TaskRecord, now: DateTime<Utc>, actor: &str) -> bool {
    let budget_reset = paused_by_budget(task);
    let reason = if budget_reset { "budget reset" } else { "due" };
    if !is_due(task, now)
        || task
            .transition(TaskStatus::Pending, actor, reason, now)
            .is_err()
        || task
            .transition(TaskStatus::Running, actor, "dispatched", now)
            .is_err()
    {
        return false;
    }
    task.metadata.budget_resets_at = None;
    now_running(config, task);
    true
}

/// What every claim does to the record it moved into `running`: no question or pause cause
/// left, and an instant task's parts fixed when no polish is needed (in the claim, not in a
/// write of their own).
fn now_running(config: &Config, task: &mut TaskRecord) {
    task.metadata.waiting = None;
    task.metadata.pause_cause = None;
    if task.level == TaskLevel::Instant && task.metadata.delivery.is_none() {
        fix_parts_unpolished(config, task);
    }
}

/// The claim of a queued task, applied to the record as stored: `from → running`, by whoever
/// answered its question if someone did, an instant task's parts fixed when no polish is
/// needed. `false` (nothing written) when it is no longer `from`.
fn claim_queued(
    config: &Config,
    task: &mut TaskRecord,
    from: TaskStatus,
    now: DateTime<Utc>,
    actor: &str,
) -> bool {
    if task.status != from {
        return false;
    }
    let reason = if from == TaskStatus::WaitingInput {
        "resumed with the answer"
    } else {
        "dispatched"
    };
    // An answer recorded through a door names who gave it; otherwise the scheduler.
    let actor = task
        .metadata
        .answered_by
        .take()
        .unwrap_or_else(|| actor.to_owned());
    if task
        .transition(TaskStatus::Running, &actor, reason, now)
        .is_err()
    {
        return false;
    }
    now_running(config, task);
    true
}

/// What claiming a queued task came to.
enum Queued {
    Claimed(Box<TaskRecord>),
    /// Not in the state the claim expected (nothing written).
    Declined,
    /// The cluster runs as many tasks as it may; the task waits for a slot.
    Parked,
}

/// Whether `task` is paused because a daily budget was used up (a timer resumes it).
pub(crate) fn paused_by_budget(task: &TaskRecord) -> bool {
    task.status == TaskStatus::Paused && task.metadata.pause_cause == Some(PauseCause::Budget)
}

impl Engine {
    /// Runs a dispatched task, then frees its slot and dispatches more. `due`: a scheduled task
    /// whose slot was reserved the moment it became due (still `scheduled` in the store).
    pub(crate) async fn run_one(&self, id: TaskId, due: bool) {
        let result = if due {
            self.run_due(id).await
        } else {
            self.run_claimed(id).await
        };
        if let Err(error) = result {
            tracing::error!(task = %id, %error, "task run failed inside the engine");
        }
        // What the run's checkpoints did not carry (its last model call, mostly).
        self.flush_usage(id).await;
        self.schedule.slot_freed(id);
        self.dispatch();
    }

    /// Claims a queued task and runs it. A pending task (nearly every one) is claimed in one
    /// write, its change applied to the record as stored, with no read before it; a task
    /// queued because its question was answered (or timed out) is read first, to check that.
    async fn run_claimed(&self, id: TaskId) -> Result<(), EngineError> {
        let started = self.now();
        // Register the control before claiming, so a cancel that sees `running` finds it.
        let control = RunControl::starting_at(started);
        self.schedule.run_started(id, control.clone());
        // A stop that collected the controls just before this one was added must still win.
        if self.stopping() {
            return Ok(());
        }
        let task = match self.claim_queued(id, TaskStatus::Pending, started).await? {
            Queued::Claimed(task) => *task,
            Queued::Parked => return Ok(()),
            Queued::Declined => {
                let Some(task) = self.store.get(id).await? else {
                    return Ok(());
                };
                if task.status != TaskStatus::WaitingInput || !self.question_answered(&task).await?
                {
                    return Ok(());
                }
                match self
                    .claim_queued(id, TaskStatus::WaitingInput, started)
                    .await?
                {
                    Queued::Claimed(task) => *task,
                    Queued::Parked | Queued::Declined => return Ok(()),
                }
            }
        };
        self.emit_changes(&task, 1);
        self.run_claimed_task(task, &control).await
    }

    /// The claim, a compare-and-set on what the store holds (so a concurrent cancel wins):
    /// `from → running` (see [`claim_queued`]). A claim the cluster's cap refuses parks the task
    /// until a slot frees anywhere.
    async fn claim_queued(
        &self,
        id: TaskId,
        from: TaskStatus,
        started: DateTime<Utc>,
    ) -> Result<Queued, EngineError> {
        let (config, actor) = (self.config.config(), self.actor(ACTOR));
        let ends = self.schedule.cluster_ends();
        let claim: mai_core::store::Change =
            Box::new(move |task| claim_queued(&config, task, from, started, &actor));
        let queued = match self.store.claim(id, claim, self.cluster_cap()).await? {
            Claim::Claimed(task) => Queued::Claimed(task),
            Claim::Declined => Queued::Declined,
            Claim::Full => {
                self.park_refused(id, ends).await;
                Queued::Parked
            }
        };
        Ok(queued)
    }

    /// Parks a task whose claim found the cluster full, at its stored priority; at 0 when it
    /// cannot be read (a task lost from here would wait for a restart); not when it is gone.
    async fn park_refused(&self, id: TaskId, ends: u64) {
        let priority = match self.store.get(id).await {
            Ok(Some(task)) => task.priority,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(task = %id, %error, "parked at priority 0: could not read it");
                0
            }
        };
        self.schedule.park(id, priority, ends);
    }

    /// Claims a task the moment it fell due, in the slot reserved for it: `scheduled → pending
    /// → running` in one store update — the read, the check that it is still `scheduled` and
    /// the write in one turn of the store's writer, so a cancel or edit either came first (and
    /// the claim sees it) or comes after (and sees `running`) — then runs it.
    async fn run_due(&self, id: TaskId) -> Result<(), EngineError> {
        let started = self.now();
        // Register the control before claiming, so a cancel that sees `running` finds it.
        let control = RunControl::starting_at(started);
        self.schedule.run_started(id, control.clone());
        // A stop that collected the controls just before this one was added must still win.
        if self.stopping() {
            // Never claimed: still `scheduled` in the store, so the next start arms it again.
            self.schedule.arm_due(id, started);
            return Ok(());
        }
        let (config, actor) = (self.config.config(), self.actor(ACTOR));
        let claim: mai_core::store::Change =
            Box::new(move |task| claim_due(&config, task, started, &actor));
        let task = match self.store.claim(id, claim, self.cluster_cap()).await {
            Ok(Claim::Claimed(task)) => *task,
            // No longer scheduled (cancelled, paused or edited first): nothing to run.
            Ok(Claim::Declined) => return Ok(()),
            // Due, but the cluster runs as many as it may: pending, in the queue like a task
            // that found no free slot here.
            Ok(Claim::Full) => {
                self.queue_due(id).await;
                return Ok(());
            }
            Err(error) => {
                self.retry_due(id, &error.into());
                return Ok(());
            }
        };
        self.emit_changes(&task, 2);
        self.run_claimed_task(task, &control).await
    }

    /// Runs a claimed task's work and persists how it ended (its running time included).
    async fn run_claimed_task(
        &self,
        mut task: TaskRecord,
        control: &RunControl,
    ) -> Result<(), EngineError> {
        let end = self.run_with_deadline(&mut task, control).await;
        control.add_runtime(&mut task, self.now());
        self.finish_run(task, end, control.reason()).await
    }

    /// Runs the task's work, asking it to stop once `max_runtime_min` (running time only) is
    /// used up.
    async fn run_with_deadline(&self, task: &mut TaskRecord, control: &RunControl) -> RunEnd {
        let minutes = if task.max_runtime_min > 0 {
            task.max_runtime_min
        } else {
            self.config.config().task.max_runtime_min
        };
        let budget = (minutes > 0).then(|| {
            Duration::from_secs(
                (u64::from(minutes) * 60).saturating_sub(task.metadata.runtime_secs),
            )
        });
        let level = task.level;
        let work = async {
            match level {
                TaskLevel::Agent => self.run_agent(task, control).await,
                TaskLevel::Instant => self.run_instant(task, control).await,
            }
        };
        tokio::pin!(work);
        match budget {
            None => work.await,
            Some(budget) => {
                tokio::select! {
                    end = &mut work => end,
                    _ = tokio::time::sleep(budget) => {
                        control.stop(StopReason::Timeout { minutes });
                        work.await
                    }
                }
            }
        }
    }

    /// Persists how a run ended. `stop` is a stop requested during the run, which may have
    /// arrived after the loop's last check (e.g. while a question was being set up).
    async fn finish_run(
        &self,
        mut task: TaskRecord,
        end: RunEnd,
        stop: Option<StopReason>,
    ) -> Result<(), EngineError> {
        let now = self.now();
        match end {
            RunEnd::Waiting => self.apply_stop_to_waiting(task.id, stop).await,
            RunEnd::Answer {
                text,
                history,
                parts,
            } => self.complete_answer(task, text, history, parts).await,
            RunEnd::Delivered => self.complete(task, "delivered").await.map(drop),
            RunEnd::Failed(error) => self.fail(task, &error).await,
            RunEnd::OverBudget(hit) => self.stop_for_budget(task, hit).await,
            RunEnd::Stopped(StopReason::Timeout { minutes }) => {
                self.fail(
                    task,
                    &format!("ran longer than its limit of {minutes} minutes"),
                )
                .await
            }
            RunEnd::Stopped(StopReason::Cancel { actor }) => {
                task.transition(
                    TaskStatus::Cancelled,
                    &actor,
                    "cancelled while running",
                    now,
                )?;
                self.save_status(&task, TaskStatus::Running).await.map(drop)
            }
            RunEnd::Stopped(StopReason::Pause { actor }) => {
                task.metadata.pause_cause = Some(PauseCause::User);
                task.transition(TaskStatus::Paused, &actor, "paused", now)?;
                self.save_status(&task, TaskStatus::Running).await.map(drop)
            }
            RunEnd::Stopped(StopReason::StoreLost) => {
                tracing::warn!(
                    task = %task.id,
                    "the database is out of reach: this run stops without writing; the task \
                     resumes from its last checkpoint, here or on another instance, once the \
                     database answers again"
                );
                Ok(())
            }
            RunEnd::Stopped(StopReason::Shutdown) => {
                task.metadata.pause_cause = Some(PauseCause::Stop);
                task.transition(TaskStatus::Paused, "shutdown", "paused by stop", now)?;
                self.save_status(&task, TaskStatus::Running).await.map(drop)
            }
        }
    }

    /// An agent's answer: the answer, the completion and the reply task in one write (a cron
    /// task's takes its own path), then the reply runs in the slot its parent frees.
    async fn complete_answer(
        &self,
        mut task: TaskRecord,
        text: String,
        history: Vec<NewHistoryEntry>,
        parts: Option<Vec<String>>,
    ) -> Result<(), EngineError> {
        let now = self.now();
        task.metadata.answer = Some(text.clone());
        if matches!(task.trigger, Trigger::Cron { .. }) {
            return self.complete_cron_answer(task, text, history).await;
        }
        // The answer, the completion and the reply task in one write: a concurrent
        // cancel wins (nothing is written and no reply goes out).
        task.transition(TaskStatus::Completed, ACTOR, "answered", now)?;
        task.metadata.history_len += history.len() as u64;
        let mut reply = self.reply_task(&task, &text, false, now);
        reply.metadata.delivery = parts.map(|parts| DeliveryProgress { parts, sent: 0 });
        // The reply runs in the slot its parent frees, claimed in the write that
        // creates it: it outranks its parent's peers anyway (priority + 1), and so an
        // answer costs a read, a write and a dispatch less. Its control is registered
        // before the stop check, as a claim's is, so a stop either finds it or is seen.
        let control = RunControl::starting_at(now);
        self.schedule.run_started(reply.id, control.clone());
        let inline = !self.stopping();
        if inline {
            reply.transition(TaskStatus::Running, ACTOR, "dispatched", now)?;
            if reply.metadata.delivery.is_none() {
                self.fix_parts_unpolished(&mut reply);
            }
        } else {
            self.schedule.run_ended(reply.id);
        }
        let outcome = self.end_with_reply(&mut task, &history, &reply).await?;
        if let SaveOutcome::Conflict { actual } = outcome {
            self.schedule.run_ended(reply.id);
            tracing::debug!(task = %task.id, %actual, "changed before it could complete");
            return Ok(());
        }
        self.emit(TaskEvent::Answer {
            task_id: task.id,
            text: text.clone(),
        });
        self.emit(TaskEvent::Status {
            task_id: task.id,
            status: TaskStatus::Completed,
            reason: "answered".to_owned(),
        });
        if !inline {
            self.reply_announced(&task, &reply, &text, true).await;
            return Ok(());
        }
        self.reply_announced(&task, &reply, &text, false).await;
        self.emit(TaskEvent::Status {
            task_id: reply.id,
            status: TaskStatus::Running,
            reason: "dispatched".to_owned(),
        });
        let reply_id = reply.id;
        let finished = Box::pin(self.run_claimed_task(reply, &control)).await;
        self.schedule.run_ended(reply_id);
        finished
    }

    pub(crate) async fn fail_task(&self, task: TaskRecord, error: &str) -> Result<(), EngineError> {
        self.fail(task, error).await
    }

    async fn fail(&self, mut task: TaskRecord, error: &str) -> Result<(), EngineError> {
        task.metadata.error = Some(error.to_owned());
        task.transition(TaskStatus::Failed, ACTOR, error, self.now())?;
        if task.level != TaskLevel::Agent {
            return self.save_status(&task, TaskStatus::Running).await.map(drop);
        }
        // The failure and its notice in one write.
        let notice = format!(
            "Task \"{}\" ({}) failed: {error}",
            task.title,
            task.id.short()
        );
        let reply = self.reply_task(&task, &notice, true, self.now());
        let outcome = self.end_with_reply(&mut task, &[], &reply).await?;
        if outcome == SaveOutcome::Saved {
            if let Some(change) = task.status_log.last() {
                self.emit(TaskEvent::Status {
                    task_id: task.id,
                    status: task.status,
                    reason: change.reason.clone(),
                });
            }
            self.reply_announced(&task, &reply, &notice, true).await;
        }
        Ok(())
    }

    /// Writes how a running task ended with `history` and the reply that delivers it, in one
    /// transaction (a compare-and-set on `running`, so a concurrent cancel wins).
    async fn end_with_reply(
        &self,
        task: &mut TaskRecord,
        history: &[NewHistoryEntry],
        reply: &TaskRecord,
    ) -> Result<SaveOutcome, EngineError> {
        self.save_running_with_usage(task, history, Some(reply))
            .await
    }

    /// Saves `task` (a compare-and-set on `running`) with `history`, `also` inserted beside it,
    /// and the usage records the meter stages for the save (see `usage::Meter::stage`), in one
    /// write; once it is stored the meter forgets them.
    async fn save_running_with_usage(
        &self,
        task: &mut TaskRecord,
        history: &[NewHistoryEntry],
        also: Option<&TaskRecord>,
    ) -> Result<SaveOutcome, EngineError> {
        let usage = self.meter.stage(task);
        let mut writes = vec![TaskWrite::Save {
            task,
            expected: Some(TaskStatus::Running),
            expected_question: None,
            history,
        }];
        writes.extend(also.map(TaskWrite::InsertIfAbsent));
        writes.push(TaskWrite::Usage(&usage));
        let outcome = self.store.write(&writes).await?;
        if outcome == SaveOutcome::Saved {
            self.meter.written(task.id, &usage);
        }
        Ok(outcome)
    }

    /// A cron task's answer: checkpointed first, so the next run's conversation starts after
    /// it, then the reply and the completion with its re-arm.
    async fn complete_cron_answer(
        &self,
        mut task: TaskRecord,
        text: String,
        history: Vec<NewHistoryEntry>,
    ) -> Result<(), EngineError> {
        if !history.is_empty() {
            task.metadata.history_len += history.len() as u64;
            let outcome = self
                .save_running_with_usage(&mut task, &history, None)
                .await?;
            if outcome != SaveOutcome::Saved {
                return Ok(());
            }
        }
        let reply = reply_task_id(&task);
        self.create_reply(&task, &text, false).await?;
        self.emit(TaskEvent::Answer {
            task_id: task.id,
            text,
        });
        if !self.complete(task, "answered").await? {
            // Changed by someone else meanwhile (another process cancelled it): the reply
            // must not go out.
            self.cancel_reply(reply).await;
        }
        Ok(())
    }

    /// The instant task that delivers `text` for `task`'s current run, created `at`. Its id is
    /// derived from the task and its run, so creating it twice (after a crash) is a no-op and the
    /// reply is sent once. A reply claimed in the write that creates it passes the claim's time,
    /// so its status log reads `pending/created` then `running`, never the other way round.
    fn reply_task(
        &self,
        task: &TaskRecord,
        text: &str,
        raw: bool,
        at: DateTime<Utc>,
    ) -> TaskRecord {
        let mut reply = TaskRecord::new(
            NewTask {
                title: format!("reply: {}", task.title),
                intent: format!("deliver the result of task {}", task.id.short()),
                level: TaskLevel::Instant,
                owner: task.owner.clone(),
                stream_id: task.reply_stream().clone(),
                platform: task.platform.clone(),
                reply_stream_id: None,
                trigger: Trigger::Now,
                priority: task.priority.saturating_add(1),
                max_runtime_min: 0,
            },
            TaskStatus::Pending,
            ACTOR,
            at,
        );
        reply.id = reply_task_id(task);
        reply.metadata.answer = Some(text.to_owned());
        reply.metadata.raw = raw;
        reply.metadata.parent_task_id = Some(task.id);
        reply.metadata.is_reply = true;
        reply.metadata.requester = task.metadata.requester.clone();
        reply.metadata.fixed_role = task.metadata.fixed_role;
        reply.metadata.group_id = if task.reply_stream_id.is_some() {
            None
        } else {
            task.metadata.group_id.clone()
        };
        reply
    }

    /// A reply task was written: announce it, queue it when `queue` (not when it runs in its
    /// parent's slot), and leave the cross-stream note.
    async fn reply_announced(
        &self,
        task: &TaskRecord,
        reply: &TaskRecord,
        text: &str,
        queue: bool,
    ) {
        self.emit(TaskEvent::Created {
            task_id: reply.id,
            title: reply.title.clone(),
            parent_task_id: reply.metadata.parent_task_id,
        });
        if queue {
            self.enqueue(reply);
        }
        if task.reply_stream_id.is_some() && task.reply_stream_id.as_ref() != Some(&task.stream_id)
        {
            self.note_cross_stream(task, text).await;
        }
    }

    /// Turns an agent's answer into an instant reply task to its reply stream, in a write of
    /// its own (the cron path).
    async fn create_reply(
        &self,
        task: &TaskRecord,
        text: &str,
        raw: bool,
    ) -> Result<(), EngineError> {
        let reply = self.reply_task(task, text, raw, self.now());
        match self.store.insert(&reply).await {
            Ok(()) => {
                self.reply_announced(task, &reply, text, true).await;
                Ok(())
            }
            Err(StoreError::Duplicate(_)) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Completes a running task in one write (compare-and-set on `running`, so a concurrent
    /// cancel wins). A cron task is re-armed in that same write: its log shows `completed` and
    /// then `scheduled` at the next fire time, so no crash can leave it completed for good.
    /// Returns whether the write happened.
    async fn complete(&self, mut task: TaskRecord, reason: &str) -> Result<bool, EngineError> {
        let now = self.now();
        task.transition(TaskStatus::Completed, ACTOR, reason, now)?;
        let next = match &task.trigger {
            Trigger::Cron { expr, timezone } => {
                let next = match self.cron_zone(timezone.as_deref()) {
                    Ok(zone) => next_fire_blocking(expr, zone, now).await,
                    Err(e) => Err(format!("timezone: {e}")),
                };
                next.map_err(|detail| {
                    tracing::error!(task = %task.id, %detail, "cron task cannot be re-armed");
                })
                .ok()
            }
            _ => None,
        };
        if let Some(next) = next {
            // The next run starts a fresh conversation after everything recorded so far.
            let history_from = self
                .store
                .history(task.id, task.metadata.history_from)
                .await?
                .last()
                .map_or(task.metadata.history_from, |e| e.seq + 1);
            task.force(
                TaskStatus::Scheduled,
                ACTOR,
                &format!("cron: next run at {}", next.to_rfc3339()),
                now,
            );
            task.scheduled_at = Some(next);
            task.metadata.cron_runs += 1;
            task.metadata.rounds = 0;
            task.metadata.answer = None;
            task.metadata.delivery = None;
            task.metadata.history_len = 0;
            task.metadata.runtime_secs = 0;
            task.metadata.history_from = history_from;
        }
        // The run's model calls not written yet are recorded in the same write.
        match self.save_running_with_usage(&mut task, &[], None).await? {
            mai_core::store::SaveOutcome::Saved => {
                self.emit(TaskEvent::Status {
                    task_id: task.id,
                    status: TaskStatus::Completed,
                    reason: reason.to_owned(),
                });
                if let Some(next) = next {
                    let reason = task
                        .status_log
                        .last()
                        .map(|c| c.reason.clone())
                        .unwrap_or_default();
                    self.emit(TaskEvent::Status {
                        task_id: task.id,
                        status: TaskStatus::Scheduled,
                        reason,
                    });
                    self.schedule.arm_due(task.id, next);
                }
                Ok(true)
            }
            mai_core::store::SaveOutcome::Conflict { actual } => {
                tracing::debug!(task = %task.id, %actual, "changed before it could complete");
                Ok(false)
            }
        }
    }

    /// Withdraws a reply that must not be sent (best effort: it may already be on its way).
    async fn cancel_reply(&self, reply: TaskId) {
        let result: Result<(), EngineError> = async {
            if let Some(mut task) = self.store.get(reply).await?
                && task.status == TaskStatus::Pending
            {
                task.transition(
                    TaskStatus::Cancelled,
                    ACTOR,
                    "its task was cancelled",
                    self.now(),
                )?;
                if self.save_status(&task, TaskStatus::Pending).await? {
                    self.schedule.unqueue(reply);
                }
            }
            Ok(())
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(task = %reply, %error, "could not withdraw a reply");
        }
    }

    /// A cancel or pause that arrived while the run was suspending on a question: apply it to
    /// the now waiting task instead of losing it.
    async fn apply_stop_to_waiting(
        &self,
        id: TaskId,
        stop: Option<StopReason>,
    ) -> Result<(), EngineError> {
        let (to, actor, reason) = match stop {
            Some(StopReason::Cancel { actor }) => (TaskStatus::Cancelled, actor, "cancelled"),
            Some(StopReason::Pause { actor }) => (TaskStatus::Paused, actor, "paused"),
            // A waiting task keeps waiting across a stop, and waiting time is not runtime.
            _ => return Ok(()),
        };
        let Some(mut task) = self.store.get(id).await? else {
            return Ok(());
        };
        if task.status != TaskStatus::WaitingInput {
            return Ok(());
        }
        task.transition(to, &actor, reason, self.now())?;
        if to == TaskStatus::Paused {
            task.metadata.pause_cause = Some(PauseCause::User);
        }
        if self.save_status(&task, TaskStatus::WaitingInput).await? {
            self.schedule.withdraw_waiting(id);
        }
        Ok(())
    }

    /// Whether a waiting task's question has its answer (or timeout) in the history.
    pub(crate) async fn question_answered(&self, task: &TaskRecord) -> Result<bool, EngineError> {
        let Some(waiting) = &task.metadata.waiting else {
            // Waiting without a question on record: nothing to wait for; let it run.
            return Ok(true);
        };
        let history = self
            .store
            .history(task.id, task.metadata.history_from)
            .await?;
        let conversation = Conversation::rebuild(&history).map_err(EngineError::Internal)?;
        Ok(match conversation.tail() {
            Tail::Unfinished(calls) => !calls.iter().any(|c| c.id == waiting.call_id),
            _ => true,
        })
    }
}

/// The id of the reply task of `task`'s current run: derived, so it is created at most once.
pub fn reply_task_id(task: &TaskRecord) -> TaskId {
    let seed = format!("{}:{}:reply", task.id, task.metadata.cron_runs);
    TaskId(Uuid::new_v5(&Uuid::NAMESPACE_OID, seed.as_bytes()))
}
