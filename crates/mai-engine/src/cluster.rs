//! Several instances on one shared store (PostgreSQL, see docs/scale-out.md): this module owns
//! what an instance does to stay one of many — renewing the leases of the tasks it runs on the
//! heartbeat timer, acting on stop requests left for them, sweeping for tasks whose lease
//! expired (their instance died) and adopting them, and following the store's notices so that
//! tasks created or changed elsewhere are armed, queued or withdrawn here too — and, under a
//! cluster-wide cap (`[task] cluster_max_running`), hearing that a running task ended anywhere,
//! so that the tasks whose claims found the cluster full try again. When the database goes
//! out of reach, it stops the runs here before their leases can lapse (a run that went on
//! while another instance adopted its task would run its tools twice), and adopts them again
//! once the database answers.
//!
//! Every instance knows every active task: scheduled ones are armed everywhere, pending ones
//! queued everywhere, and the claim (a compare-and-set in the store) lets exactly one instance
//! run each. Only a running task is owned, by its lease. Must not: decide what a task does (the
//! runner does), or touch the store's lease columns other than through the `TaskStore` seam. On
//! a store that is not shared nothing here runs.

use std::time::Instant;

use futures::StreamExt;
use mai_core::lease::{Notice, StopKind, StopRequest};
use mai_core::store::Notices;
use mai_core::task::{PauseCause, TaskId, TaskStatus};

use crate::engine::Engine;
use crate::error::EngineError;
use crate::events::TaskEvent;
use crate::run::StopReason;

/// The name this process gives itself: `[server] instance_id`, else its host name and process
/// id.
pub fn instance_id(config: &mai_core::config::Config) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    config.instance_id(&host, std::process::id())
}

/// How a task read from the store is taken up (see [`Engine::take_up`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taking {
    /// At start-up: a running task is adopted if it is ours or its lease expired, a question
    /// never sent is sent.
    Start,
    /// A running task whose lease expired, found by the sweep.
    Adopt,
    /// Another instance changed it: armed, queued or withdrawn here; never adopted.
    Notice,
}

impl From<&StopRequest> for StopReason {
    fn from(request: &StopRequest) -> Self {
        let actor = request.actor.clone();
        match request.kind {
            StopKind::Cancel => StopReason::Cancel { actor },
            StopKind::Pause => StopReason::Pause { actor },
        }
    }
}

impl StopReason {
    /// The request another instance acts on, for a cancel or a pause.
    pub(crate) fn request(&self) -> Option<StopRequest> {
        let (kind, actor) = match self {
            StopReason::Cancel { actor } => (StopKind::Cancel, actor),
            StopReason::Pause { actor } => (StopKind::Pause, actor),
            _ => return None,
        };
        Some(StopRequest {
            kind,
            actor: actor.clone(),
        })
    }
}

impl Engine {
    /// The notices of a shared store, listened to before recovery reads the active tasks so no
    /// change falls between the two; `None` on a store that is not shared.
    pub(crate) async fn listen(&self) -> Result<Option<Notices>, EngineError> {
        if !self.store.shared() {
            return Ok(None);
        }
        Ok(self.store.notices().await?)
    }

    /// Starts the heartbeat (renewals, stop requests, the sweep) and the notice loop; both end
    /// when the engine stops.
    pub(crate) fn start_cluster(&self, notices: Option<Notices>) {
        let Some(notices) = notices else {
            return;
        };
        let terms = self.config.config().lease_terms().unwrap_or_default();
        tracing::info!(
            instance = %self.instance,
            lease_secs = terms.lease.as_secs(),
            heartbeat_secs = terms.heartbeat.as_secs(),
            failover_secs = terms.failover_bound().as_secs(),
            "sharing the task store with other instances"
        );
        let (beating, watching, listening) = (self.clone(), self.clone(), self.clone());
        // When the last renewal that succeeded was sent.
        let renewed = std::sync::Arc::new(tokio::sync::watch::Sender::new(Instant::now()));
        let stop = self.shutdown_token().clone();
        let renewals = renewed.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(terms.heartbeat);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = ticks.tick() => {
                        let sent = Instant::now();
                        if beating.heartbeat().await {
                            renewals.send_replace(sent);
                        }
                    }
                }
            }
        });
        let stop = self.shutdown_token().clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = watching.watch_leases(terms, renewed.subscribe()) => {}
            }
        });
        let stop = self.shutdown_token().clone();
        tokio::spawn(async move {
            let mut notices = notices;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    notice = notices.next() => match notice {
                        Some(notice) => listening.on_notice(notice).await,
                        None => return,
                    },
                }
            }
        });
    }

    /// Stops every run here once no renewal has succeeded for `lease - heartbeat / 2` (the
    /// database is out of reach): soon another instance may adopt those tasks, and a run that
    /// went on would run their tools a second time. The runs end without writing
    /// ([`StopReason::StoreLost`]); the tasks resume from their last checkpoints once the
    /// database answers again — adopted by any instance, this one included (see
    /// [`Engine::heartbeat`]). Runs until `renewed` closes.
    async fn watch_leases(
        &self,
        terms: mai_core::lease::LeaseTerms,
        mut renewed: tokio::sync::watch::Receiver<Instant>,
    ) {
        let grace = terms.lease.saturating_sub(terms.heartbeat / 2);
        loop {
            let deadline = *renewed.borrow_and_update() + grace;
            tokio::select! {
                changed = renewed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep_until(deadline.into()) => {
                    let running = self.schedule.figures().running;
                    if running > 0 {
                        tracing::error!(
                            instance = %self.instance,
                            running,
                            lapsed_secs = grace.as_secs_f64(),
                            "could not renew this instance's task leases: the database is out of \
                             reach; the tasks running here stop without writing and resume from \
                             their last checkpoints once it answers — check the database server \
                             named by [storage] url"
                        );
                        self.schedule.stop_all(&StopReason::StoreLost);
                    }
                    // Once per lapse: the next check waits for a renewal.
                    if renewed.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// One heartbeat: renew this instance's leases, apply the stop requests found on them,
    /// adopt the tasks leased here that no longer run here (their run ended without a write:
    /// the database went away under it), and adopt the running tasks whose lease expired.
    /// Whether the renewal succeeded.
    async fn heartbeat(&self) -> bool {
        let renewed = match self.store.renew_leases().await {
            Ok(renewed) => renewed,
            Err(error) => {
                tracing::warn!(instance = %self.instance, %error, "could not renew this instance's task leases; another instance may adopt its tasks when they expire");
                return false;
            }
        };
        for (id, request) in renewed {
            if self.schedule.control(id).is_some() {
                if let Some(request) = request {
                    self.stop_here(id, &request);
                }
            } else if let Err(error) = self.adopt(id, request).await {
                tracing::error!(task = %id, %error, "could not adopt a task this instance stopped running");
            }
        }
        let expired = match self.store.expired_leases().await {
            Ok(expired) => expired,
            Err(error) => {
                tracing::warn!(%error, "could not look for tasks whose lease expired");
                return true;
            }
        };
        for (id, request) in expired {
            if self.schedule.control(id).is_some() {
                // Ours and still running: the renewal above was late, not lost.
                continue;
            }
            if let Err(error) = self.adopt(id, request).await {
                tracing::error!(task = %id, %error, "could not adopt a task whose lease expired");
            }
        }
        self.dispatch();
        true
    }

    /// Adopts a running task whose instance is gone: a stop left for it is applied, otherwise it
    /// resumes from its last checkpoint here (or wherever a claim wins).
    async fn adopt(&self, id: TaskId, request: Option<StopRequest>) -> Result<(), EngineError> {
        let Some(task) = self.store.get(id).await? else {
            return Ok(());
        };
        match request {
            Some(request) => self.end_adopted(task, &request).await,
            None => self.take_up(task, Taking::Adopt).await,
        }
    }

    /// Cancels or pauses an adopted task as its stop request asked (a compare-and-set: the
    /// store's fence lets only an adopter of an expired lease write it).
    async fn end_adopted(
        &self,
        mut task: mai_core::task::TaskRecord,
        request: &StopRequest,
    ) -> Result<(), EngineError> {
        let (to, verb) = match request.kind {
            StopKind::Cancel => (TaskStatus::Cancelled, "cancelled"),
            StopKind::Pause => (TaskStatus::Paused, "paused"),
        };
        task.force(to, &request.actor, verb, self.now());
        if to == TaskStatus::Paused {
            task.metadata.pause_cause = Some(PauseCause::User);
        }
        self.save_status(&task, TaskStatus::Running).await.map(drop)
    }

    /// Asks the run of `id` to stop, if it runs here.
    fn stop_here(&self, id: TaskId, request: &StopRequest) {
        if let Some(control) = self.schedule.control(id) {
            control.stop(StopReason::from(request));
        }
    }

    async fn on_notice(&self, notice: Notice) {
        let result = match notice {
            Notice::Stop(id, request) => {
                self.stop_here(id, &request);
                Ok(())
            }
            Notice::Injected(id) => {
                // A loop that starts later reads the whole history anyway.
                if self.schedule.control(id).is_some() {
                    self.schedule.mark_injected(id);
                }
                Ok(())
            }
            Notice::Changed(id) => self.follow(id).await,
            Notice::Resync => {
                // An end may have been among the notices lost.
                self.schedule.cluster_slot_freed();
                self.take_up_all(Taking::Notice).await
            }
        };
        if let Err(error) = result {
            tracing::warn!(%error, "could not follow a change made by another instance");
        }
        self.dispatch();
    }

    /// Reads a task another instance changed and takes it up here (unless it runs here: the run
    /// knows best). Under a cluster-wide cap, a task that left `running` — here or anywhere —
    /// frees a slot of the cluster: the tasks parked for one try their claims again. A run that
    /// is ending may have been overtaken — its question answered through another instance
    /// before it finished sending it: a task pending or waiting again is queued to be looked at
    /// once the run's slot is freed (the claim sorts out who runs it).
    async fn follow(&self, id: TaskId) -> Result<(), EngineError> {
        let runs_here = self.schedule.control(id).is_some();
        let task = self.store.get(id).await?;
        if self.cluster_cap().is_some() && task.as_ref().is_none_or(left_running) {
            self.schedule.cluster_slot_freed();
        }
        match task {
            Some(task) if runs_here => {
                if matches!(task.status, TaskStatus::Pending | TaskStatus::WaitingInput) {
                    self.schedule.queue(id, task.priority);
                }
                Ok(())
            }
            Some(task) => {
                // What another instance did shows on this one's event stream too.
                self.emit(TaskEvent::Changed {
                    task_id: id,
                    status: task.status,
                });
                self.take_up(task, Taking::Notice).await
            }
            None if runs_here => Ok(()),
            None => {
                self.schedule.withdraw(id);
                Ok(())
            }
        }
    }
}

/// Whether `task`'s last status change took it out of `running` (it ended, paused, went back to
/// waiting or to its next cron time).
fn left_running(task: &mai_core::task::TaskRecord) -> bool {
    task.status != TaskStatus::Running
        && task
            .status_log
            .iter()
            .rev()
            .nth(1)
            .is_some_and(|change| change.status == TaskStatus::Running)
}
