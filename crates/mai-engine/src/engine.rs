//! The engine value: what it owns, how it starts (registering its own tools, recovering every
//! active task from the store) and how it stops (running tasks persisted as paused-by-stop).
//!
//! One `Engine` owns the store, model, host, registry, config and the scheduling state; front
//! ends call the facade in `tasks.rs`, never the store directly.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use mai_core::clock::Clock;
use mai_core::config::ConfigSnapshot;
use mai_core::config::LiveConfig;
use mai_core::host::Host;
use mai_core::ids::PersonId;
use mai_core::model::ChatModel;
use mai_core::permission::Speaker;
use mai_core::role::Role;
use mai_core::store::TaskStore;
use mai_core::task::{PauseCause, TaskId, TaskRecord, TaskStatus};
use mai_core::tool::{RoleProvider, ToolContext, ToolRegistry};

use crate::board_memory::BoardMemory;
use crate::cluster::Taking;
use crate::deps::Deps;
use crate::error::EngineError;
use crate::events::{Events, TaskEvent};
use crate::prompts::Prompts;
use crate::run::StopReason;
use crate::run::lock;
use crate::schedule::LoadFigures;
use crate::schedule::Schedule;

/// What the engine is built from.
pub struct EngineDeps {
    pub store: Arc<dyn TaskStore>,
    pub model: Arc<dyn ChatModel>,
    pub host: Arc<dyn Host>,
    pub registry: Arc<ToolRegistry>,
    pub config: Arc<LiveConfig>,
    pub prompts: Arc<Prompts>,
    pub clock: Arc<dyn Clock>,
    /// The root of the file tools' sandbox (`<data_dir>/files`); `None` registers no file tools.
    pub files_root: Option<std::path::PathBuf>,
}

/// The role a task runs with: the role its door fixed (the API token's: admin; the terminal
/// operator's choice), else its requester's role in the task's stream, else (a planner task
/// without a speaker) `[planner] default_role`. Re-resolved from the live
/// config on every call, so a permission change applies to running tasks.
struct TaskRole {
    config: Arc<LiveConfig>,
    requester: Option<PersonId>,
    fixed_role: Option<Role>,
    group_id: Option<String>,
}

impl TaskRole {
    fn of(config: Arc<LiveConfig>, task: &TaskRecord) -> Self {
        TaskRole {
            config,
            requester: task.requester().cloned(),
            fixed_role: task.metadata.fixed_role,
            group_id: task.metadata.group_id.clone(),
        }
    }

    fn resolve(&self, snapshot: &ConfigSnapshot) -> Role {
        match (self.fixed_role, &self.requester) {
            (Some(role), _) => role,
            (None, Some(person)) => snapshot.permissions.resolve(&Speaker {
                platform: &person.platform,
                user_id: &person.user_id,
                group_id: self.group_id.as_deref(),
            }),
            (None, None) => snapshot.config.planner.default_role,
        }
    }
}

impl RoleProvider for TaskRole {
    fn role(&self) -> Role {
        self.resolve(&self.config.load())
    }
}

/// The engine as its own tools reach it. The registry holding those tools is one of the
/// engine's dependencies, so this is a cycle while the engine runs; [`Engine::stop`] empties the
/// slot, which ends it (a tool called after that answers that the engine is stopping).
pub(crate) type ToolSlot = Arc<Mutex<Option<Engine>>>;

/// The engine: a cheap handle (clones share one engine). Front ends call its facade
/// (`tasks.rs`); what it owns is in [`EngineCore`].
#[derive(Clone)]
pub struct Engine(Arc<EngineCore>);

/// What one engine owns: its dependencies, its scheduling state, and what it needs to stop.
pub struct EngineCore {
    pub(crate) deps: Arc<Deps>,
    /// Who is queued, running, due, waiting and injected.
    pub(crate) schedule: Schedule,
    /// What each planner session was last shown on its board.
    board: Mutex<BoardMemory>,
    events: Events,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// Set by [`Engine::start`]; before that nothing is dispatched (CLI task commands use an
    /// engine that only reads and writes the store).
    started: std::sync::atomic::AtomicBool,
    /// Where the engine's own tools find it; emptied on stop (see [`ToolSlot`]).
    tool_slot: ToolSlot,
}

impl std::ops::Deref for Engine {
    type Target = EngineCore;
    fn deref(&self) -> &EngineCore {
        &self.0
    }
}

impl std::ops::Deref for EngineCore {
    type Target = Deps;
    fn deref(&self) -> &Deps {
        &self.deps
    }
}

impl Engine {
    /// The engine over `deps`, its own tools not registered yet (see `wiring.rs`).
    pub(crate) fn assemble(deps: Deps) -> Engine {
        let engine = Engine(Arc::new(EngineCore {
            schedule: Schedule::new(deps.clock.clone()),
            deps: Arc::new(deps),
            board: Mutex::new(BoardMemory::default()),
            events: Events::new(),
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
            started: std::sync::atomic::AtomicBool::new(false),
            tool_slot: Arc::new(Mutex::new(None)),
        }));
        *lock(&engine.tool_slot) = Some(engine.clone());
        engine
    }

    /// The slot the engine's own tools reach it through: filled from the start, emptied on stop.
    pub(crate) fn tool_slot(&self) -> &ToolSlot {
        &self.tool_slot
    }

    /// Recovers every active task from the store and starts timers and dispatching.
    pub async fn start(&self) -> Result<(), EngineError> {
        use std::sync::atomic::Ordering;
        if self.started.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.start_timers();
        let notices = self.listen().await?;
        self.take_up_all(Taking::Start).await?;
        self.start_cluster(notices);
        self.dispatch();
        Ok(())
    }

    /// Subscribe to task events (progress output, tests, metrics).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<TaskEvent> {
        self.events.subscribe()
    }

    pub fn registry(&self) -> &Arc<ToolRegistry> {
        &self.registry
    }

    /// The host replies and questions go through (front doors send command replies with it, so
    /// they reach the chat the same way).
    pub fn host(&self) -> &Arc<dyn Host> {
        &self.host
    }

    pub fn config(&self) -> &Arc<LiveConfig> {
        &self.config
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The zone a cron expression is read in: the task's own, else `[task] timezone` (read live,
    /// so a reload moves every task that has none), else the system's.
    pub(crate) fn cron_zone(&self, task_zone: Option<&str>) -> Result<chrono_tz::Tz, String> {
        let config = self.config.config();
        match task_zone.or(config.task.timezone.as_deref()) {
            Some(name) => mai_core::time_zone::parse_time_zone(name),
            None => Ok(self.system_zone.0),
        }
    }

    /// The zone cron expressions without their own are read in, and where it comes from (for
    /// the start-up line).
    pub fn default_time_zone(&self) -> (chrono_tz::Tz, &'static str) {
        match self.cron_zone(None) {
            Ok(zone) if self.config.config().task.timezone.is_some() => (zone, "[task] timezone"),
            _ => self.system_zone,
        }
    }

    /// Remembers that a planner `session` was shown `board`; returns what it was shown before.
    pub(crate) fn board_shown(
        &self,
        session: (mai_core::ids::StreamId, String),
        board: String,
    ) -> Option<String> {
        lock(&self.board).remember(session, board)
    }

    /// Whether the engine is stopping (nothing new starts).
    /// Cancelled when the service stops: a wait (a send's retry) selects on it to end at once.
    pub(crate) fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub(crate) fn stopping(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    pub(crate) fn emit(&self, event: TaskEvent) {
        self.events.emit(event);
    }

    fn start_timers(&self) {
        // The timer loops hold the engine until it stops (they end with `shutdown`).
        let (due, timeout) = (self.clone(), self.clone());
        self.schedule.start_timers(
            self.shutdown.clone(),
            move |id| {
                let engine = due.clone();
                async move { engine.on_due(id).await }
            },
            move |id| {
                let engine = timeout.clone();
                async move { engine.on_question_timeout(id).await }
            },
        );
    }

    /// The context a task's tool calls run with: acting for its requester, with its role.
    pub(crate) fn tool_context(&self, task: &TaskRecord, cancel: CancellationToken) -> ToolContext {
        ToolContext::new(
            task.id,
            task.owner.clone(),
            task.stream_id.clone(),
            task.platform.clone(),
            Arc::new(TaskRole::of(self.config.clone(), task)),
            cancel,
            self.config.config(),
        )
        .with_requester(task.requester().cloned())
    }

    /// The role `person` has in a stream of `group_id` (a private chat: `None`) right now.
    pub fn role_in(&self, person: &PersonId, group_id: Option<&str>) -> Role {
        self.config.load().permissions.resolve(&Speaker {
            platform: &person.platform,
            user_id: &person.user_id,
            group_id,
        })
    }

    /// The role `task` runs with right now (see [`TaskRole`]).
    pub fn task_role(&self, task: &TaskRecord) -> Role {
        TaskRole::of(self.config.clone(), task).role()
    }

    /// Tells the timers the clock jumped (a test clock was advanced, or the wall clock was set).
    pub fn clock_changed(&self) {
        self.schedule.clock_changed();
    }

    /// Counts for status output and metrics.
    pub fn load_figures(&self) -> LoadFigures {
        self.schedule.figures()
    }

    /// Takes up every active task of the store (see docs/design.md, "Persistence and
    /// recovery"): at start-up, and after notices may have been lost.
    pub(crate) async fn take_up_all(&self, taking: Taking) -> Result<(), EngineError> {
        for task in self.store.list_active().await? {
            let id = task.id;
            if taking == Taking::Notice && self.schedule.control(id).is_some() {
                continue;
            }
            // One unreadable task must not keep the service from starting.
            if let Err(error) = self.take_up(task, taking).await {
                tracing::error!(task = %id, %error, "could not recover a task; it is left as it is");
            }
        }
        Ok(())
    }

    /// Puts a task read from the store where it can go on from here: a timer for a scheduled
    /// one, the queue for a pending one, a question for a waiting one; a running one (only at
    /// start-up or when its lease expired) back to pending from its last checkpoint; a finished
    /// or user-paused one out of every local place.
    pub(crate) async fn take_up(
        &self,
        task: TaskRecord,
        taking: Taking,
    ) -> Result<(), EngineError> {
        let now = self.now();
        match task.status {
            TaskStatus::Scheduled => {
                self.schedule
                    .arm_due(task.id, task.scheduled_at.unwrap_or(now));
            }
            TaskStatus::Pending => {
                self.schedule.queue(task.id, task.priority);
            }
            TaskStatus::Running if taking != Taking::Notice => self.recover_running(task).await?,
            TaskStatus::WaitingInput => self.recover_waiting(&task, taking).await?,
            TaskStatus::Paused if task.metadata.pause_cause == Some(PauseCause::Budget) => {
                self.arm_budget_resume(&task);
            }
            TaskStatus::Paused if task.metadata.pause_cause == Some(PauseCause::Stop) => {
                self.resume_after_stop(task, now).await?;
            }
            TaskStatus::Running => {}
            _ => self.schedule.withdraw(task.id),
        }
        Ok(())
    }

    /// A task found running that runs nowhere here: back to pending (it resumes from its last
    /// checkpoint) and queued. On a shared store the write is fenced by the task's lease, so a
    /// task another instance still runs is left alone. The usage records its run saved in its
    /// record but had not written to the usage table yet are written once it is taken back.
    async fn recover_running(&self, task: TaskRecord) -> Result<(), EngineError> {
        let (id, actor) = (task.id, self.actor("recovery"));
        let now = self.now();
        let unwritten = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let taken = unwritten.clone();
        let recovered: mai_core::store::Change = Box::new(move |task| {
            if task.status != TaskStatus::Running {
                return false;
            }
            task.force(TaskStatus::Pending, &actor, "recovered from running", now);
            *crate::run::lock(&taken) = std::mem::take(&mut task.metadata.usage_unwritten);
            true
        });
        if let Some(task) = self.store.update(id, recovered).await? {
            // A crash before this write loses these few records; writing them twice (a
            // recovery that runs again) stores them once.
            let records = std::mem::take(&mut *crate::run::lock(&unwritten));
            if let Err(error) = self.store.record_usage(&records).await {
                tracing::error!(task = %id, %error, "could not record the model usage a recovered task carried");
            }
            self.emit_changes(&task, 1);
            self.schedule.queue(task.id, task.priority);
        }
        Ok(())
    }

    /// A task paused because its instance stopped: pending again, and queued.
    async fn resume_after_stop(
        &self,
        mut task: TaskRecord,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        task.transition(
            TaskStatus::Pending,
            &self.actor("recovery"),
            "resumed after stop",
            now,
        )?;
        task.metadata.pause_cause = None;
        if self.save_status(&task, TaskStatus::Paused).await? {
            self.schedule.queue(task.id, task.priority);
        }
        Ok(())
    }

    /// The status-log actor of what this engine does on its own as `role` (`scheduler`,
    /// `recovery`): on a shared store it names the instance too (`scheduler@box-42`).
    pub(crate) fn actor(&self, role: &str) -> String {
        if self.store.shared() {
            format!("{role}@{}", self.instance)
        } else {
            role.to_owned()
        }
    }

    /// The name this instance gives itself (`[server] instance_id`).
    pub fn instance_id(&self) -> &str {
        &self.instance
    }

    /// Saves a status change made by the engine itself; a conflict means someone else changed
    /// the task first, which is logged and otherwise fine (they won).
    pub(crate) async fn save_status(
        &self,
        task: &TaskRecord,
        expected: TaskStatus,
    ) -> Result<bool, EngineError> {
        match self.store.save(task, Some(expected)).await? {
            mai_core::store::SaveOutcome::Saved => {
                if let Some(change) = task.status_log.last() {
                    self.emit(TaskEvent::Status {
                        task_id: task.id,
                        status: task.status,
                        reason: change.reason.clone(),
                    });
                }
                Ok(true)
            }
            mai_core::store::SaveOutcome::Conflict { actual } => {
                tracing::debug!(task = %task.id, %expected, %actual, "status changed concurrently");
                Ok(false)
            }
        }
    }

    /// Starts queued tasks while slots are free.
    pub(crate) fn dispatch(&self) {
        if self.shutdown.is_cancelled() || !self.started.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let cap = self.config.config().task.max_concurrent_tasks as usize;
        for id in self.schedule.take_dispatchable(cap) {
            let engine = self.clone();
            self.tracker
                .spawn(async move { engine.run_one(id, false).await });
        }
    }

    /// Queues a task and dispatches.
    pub(crate) fn enqueue(&self, task: &TaskRecord) {
        self.schedule.queue(task.id, task.priority);
        self.dispatch();
    }

    /// A scheduled task is due. With a free slot it is claimed at once (see `run_due`) and
    /// runs; otherwise it moves to `pending` — read and changed in one turn of the store — and
    /// is queued.
    async fn on_due(&self, id: TaskId) {
        let cap = self.config.config().task.max_concurrent_tasks as usize;
        if self.started.load(std::sync::atomic::Ordering::SeqCst)
            && !self.shutdown.is_cancelled()
            && self.schedule.try_reserve(id, cap)
        {
            // The slot is ours; `run_one` frees it whatever happens.
            let engine = self.clone();
            self.tracker
                .spawn(async move { engine.run_one(id, true).await });
            return;
        }
        let (now, actor) = (self.now(), self.actor("scheduler"));
        let due: mai_core::store::Change = Box::new(move |task| {
            let budget_reset = crate::runner::paused_by_budget(task);
            let reason = if budget_reset { "budget reset" } else { "due" };
            let moved = crate::runner::is_due(task, now)
                && task
                    .transition(TaskStatus::Pending, &actor, reason, now)
                    .is_ok();
            if moved {
                task.metadata.pause_cause = None;
                task.metadata.budget_resets_at = None;
            }
            moved
        });
        match self.store.update(id, due).await {
            Ok(Some(task)) => {
                self.emit_changes(&task, 1);
                self.enqueue(&task);
            }
            Ok(None) => {}
            Err(error) => self.retry_due(id, &error.into()),
        }
    }

    /// A due task could not be started: it is tried again shortly rather than left scheduled
    /// with no timer.
    pub(crate) fn retry_due(&self, id: TaskId, error: &EngineError) {
        tracing::error!(task = %id, %error, "could not start a due task; retrying in 5 s");
        self.schedule
            .arm_due(id, self.now() + chrono::Duration::seconds(5));
    }

    /// Emits the last `count` status changes of `task`, just written.
    pub(crate) fn emit_changes(&self, task: &TaskRecord, count: usize) {
        let from = task.status_log.len().saturating_sub(count);
        for change in &task.status_log[from..] {
            self.emit(TaskEvent::Status {
                task_id: task.id,
                status: change.status,
                reason: change.reason.clone(),
            });
        }
    }

    /// Graceful stop: running tasks stop at their next await and are persisted as
    /// paused-by-stop; nothing new starts.
    pub async fn stop(&self) {
        self.shutdown.cancel();
        self.schedule.stop_all(&StopReason::Shutdown);
        self.tracker.close();
        self.tracker.wait().await;
        // Ends the cycle through the engine's own tools (see [`ToolSlot`]).
        lock(&self.tool_slot).take();
    }
}
