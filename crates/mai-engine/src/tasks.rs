//! The task facade (`Engine`'s task methods): the only API front ends (CLI, HTTP, MCP, chat
//! commands, tools) use to create, read and steer tasks.
//!
//! Every method takes the caller's identity and checks it here: guests only read what they may
//! see, users create and manage their own tasks, admins manage any. A task reference (full id,
//! unique prefix, unique title) is resolved first, then the ownership check runs on the result.

use std::time::Duration;

use chrono::Utc;
use serde::Serialize;
use serde_json::json;

use mai_core::ids::{Owner, PersonId, StreamId};
use mai_core::model::{ChatMessage, ChatRequest, ModelPurpose};
use mai_core::role::{Role, require};
use mai_core::store::{HistoryEntry, HistoryKind, NewHistoryEntry, Resolved, TaskFilter};
use mai_core::task::{
    NewTask, PauseCause, StatusChange, TaskLevel, TaskRecord, TaskStatus, Trigger,
};
use mai_core::usage::UsageRecord;

use crate::cron::next_fire_blocking;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::events::TaskEvent;
use crate::prompts::PromptName;
use crate::run::StopReason;

/// Longest intent accepted.
const MAX_INTENT_CHARS: usize = 8_000;
/// Longest instruction or answer accepted through `inject`/`answer` (it goes into every later
/// model request of the task; a megabyte would fail the task later with a provider error).
const MAX_INSTRUCTION_CHARS: usize = 8_000;

/// Refuses a text longer than `max` characters, saying which and how long.
fn check_length(what: &str, text: &str, max: usize) -> Result<(), EngineError> {
    if text.chars().count() > max {
        return Err(EngineError::Invalid(format!(
            "the {what} is longer than {max} characters; shorten it"
        )));
    }
    Ok(())
}
/// How long a title may take before the intent's first words are used.
const TITLE_TIMEOUT: Duration = Duration::from_secs(15);

/// Which door a caller came through: it decides who the tasks it creates act for, and whether
/// a guest may create one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// A person speaking for themselves: a chat message, `/mt`, the HTTP API with a `user_id`,
    /// the CLI's operator. Guests cannot create tasks.
    Person,
    /// The host's planner in a stream, acting for the person it speaks with (if the host named
    /// one). It may create a task for a guest speaker: the task then runs with guest tools.
    Planner,
    /// A program holding the API token, naming no person: admin, and so are its tasks.
    Token,
    /// The operator at the terminal (`mai-agent run`, `mai-agent task`): the role it names is
    /// the role of its tasks, whatever `[permission]` says about the console.
    Local,
    /// An agent task's own tools (`create_subtask`, `inject_task`, …), acting for the task's
    /// requester with the task's role.
    Task,
}

/// Who is asking, from where, and for whom.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The owner of the tasks this caller creates.
    pub owner: Owner,
    /// The person this caller acts for: who the tasks it creates act for, and whose tasks it
    /// may change. `None` for the token door and a planner call without a speaker.
    pub requester: Option<PersonId>,
    /// The caller's role where it acts from.
    pub role: Role,
    pub stream_id: StreamId,
    pub platform: String,
    /// The group of the caller's stream (`None` = private chat).
    pub group_id: Option<String>,
    pub door: Door,
}

impl Caller {
    /// A person speaking for themselves with `role` in `stream_id`.
    pub fn person(
        person: PersonId,
        role: Role,
        stream_id: StreamId,
        group_id: Option<String>,
    ) -> Caller {
        Caller {
            owner: Owner::Person(person.clone()),
            platform: person.platform.clone(),
            requester: Some(person),
            role,
            stream_id,
            group_id,
            door: Door::Person,
        }
    }

    /// A token holder acting in `stream_id` without naming a person: admin.
    pub fn token(stream_id: StreamId, platform: String, group_id: Option<String>) -> Caller {
        Caller {
            owner: Owner::planner(stream_id.clone()),
            requester: None,
            role: Role::Admin,
            stream_id,
            platform,
            group_id,
            door: Door::Token,
        }
    }

    /// An admin that reads every task for a front door (the HTTP API's reads, metrics); its
    /// owner `planner:{name}` only names the reader.
    pub fn admin_reader(name: &str) -> Result<Caller, mai_core::ids::IdError> {
        Ok(Caller::token(StreamId::new(name)?, String::new(), None))
    }

    /// The actor string written into status logs: the person, else the owner.
    fn actor(&self) -> String {
        match &self.requester {
            Some(person) => person.to_string(),
            None => self.owner.to_string(),
        }
    }

    /// Whether `task` acts for the same person as this caller (a task acting for nobody is
    /// the caller's when the caller acts for nobody either and owns it — unless its door fixed
    /// its role: the API token's tasks share the planner's owner but are admin's alone).
    pub fn is_requester_of(&self, task: &TaskRecord) -> bool {
        match (&self.requester, task.requester()) {
            (Some(mine), Some(theirs)) => mine == theirs,
            (None, None) => task.owner == self.owner && task.metadata.fixed_role.is_none(),
            _ => false,
        }
    }

    /// Whether the caller may see `task` at all (admins: every task).
    pub(crate) fn may_see(&self, task: &TaskRecord) -> bool {
        self.role == Role::Admin || self.is_requester_of(task)
    }
}

/// What a change does to a task: steering (an instruction, an answer, a resume) can make it act;
/// stopping (cancel, pause) cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Steer,
    Stop,
}

/// A request to create a task.
#[derive(Debug, Clone)]
pub struct CreateTask {
    pub intent: String,
    pub level: TaskLevel,
    pub trigger: Trigger,
    pub priority: i32,
    pub reply_stream_id: Option<StreamId>,
    /// A title chosen by the caller; otherwise the model writes one.
    pub title: Option<String>,
    pub max_runtime_min: Option<u32>,
    /// The task whose `create_subtask` makes this one: the new task acts for the same person
    /// and counts against the parent's `[limits]`.
    pub parent_task_id: Option<mai_core::task::TaskId>,
}

impl CreateTask {
    /// An agent task that runs now.
    pub fn agent(intent: impl Into<String>) -> Self {
        CreateTask {
            intent: intent.into(),
            level: TaskLevel::Agent,
            trigger: Trigger::Now,
            priority: 0,
            reply_stream_id: None,
            title: None,
            max_runtime_min: None,
            parent_task_id: None,
        }
    }
}

/// A task's timeline: its status log and its agent history.
#[derive(Debug, Clone, Serialize)]
pub struct TaskHistory {
    pub task: TaskRecord,
    pub status_log: Vec<StatusChange>,
    pub entries: Vec<HistoryEntry>,
}

impl Engine {
    /// Creates a task: guests are refused (but the planner may create one for a guest speaker);
    /// the caps of `[limits]` are checked; the record is persisted, then scheduled.
    pub async fn create(
        &self,
        caller: &Caller,
        request: CreateTask,
    ) -> Result<TaskRecord, EngineError> {
        if caller.door != Door::Planner {
            require(caller.role, Role::User).map_err(|_| guest_refused(caller))?;
        }
        if self.stopping() {
            return Err(EngineError::Stopping);
        }
        let intent = request.intent.trim().to_owned();
        if intent.is_empty() {
            return Err(EngineError::Invalid(
                "the intent is empty; say what the task should do".into(),
            ));
        }
        check_length("intent", &intent, MAX_INTENT_CHARS)?;
        let now = self.now();
        let (status, scheduled_at) = first_run(self, &request.trigger, now).await?;
        let parent = match request.parent_task_id {
            Some(id) => Some(
                self.store
                    .get(id)
                    .await?
                    .ok_or_else(|| EngineError::NotFound(id.short()))?,
            ),
            None => None,
        };
        let mut task = TaskRecord::new(
            NewTask {
                title: String::new(),
                intent,
                level: request.level,
                owner: caller.owner.clone(),
                stream_id: caller.stream_id.clone(),
                platform: caller.platform.clone(),
                reply_stream_id: request.reply_stream_id,
                trigger: request.trigger,
                priority: request.priority,
                max_runtime_min: request.max_runtime_min.unwrap_or(0),
            },
            status,
            &caller.actor(),
            now,
        );
        task.scheduled_at = scheduled_at;
        task.metadata.group_id = caller.group_id.clone();
        acts_for(&mut task, caller, parent.as_ref());
        // Checked when the task is inserted; when the title costs a model call, before it too.
        // The title call's usage is written with the task (one write).
        let mut usage = None;
        task.title = match request.title.filter(|t| !t.trim().is_empty()) {
            Some(title) => title.trim().chars().take(80).collect(),
            None => {
                crate::admission::check(self, &task).await?;
                let (title, record) = self.title_for(&task).await;
                usage = record;
                title
            }
        };
        self.admit_and_schedule(&task, usage.as_slice()).await?;
        Ok(task)
    }

    /// Inserts a new task within `[limits]` (with the usage of the calls that made it), then
    /// arms or queues it.
    async fn admit_and_schedule(
        &self,
        task: &TaskRecord,
        usage: &[UsageRecord],
    ) -> Result<(), EngineError> {
        // Marked before the insert, so no run of it can start before the mark (on a shared store
        // an instruction may reach it from another instance unseen here: never marked).
        if task.level == TaskLevel::Agent && !self.store.shared() {
            self.schedule.mark_fresh(task.id);
        }
        if let Err(error) = crate::admission::insert(self, task, usage).await {
            self.schedule.take_fresh(task.id);
            return Err(error);
        }
        self.emit(TaskEvent::Created {
            task_id: task.id,
            title: task.title.clone(),
            parent_task_id: task.metadata.parent_task_id,
        });
        match task.scheduled_at {
            Some(at) => self.schedule.arm_due(task.id, at),
            None => self.enqueue(task),
        }
        Ok(())
    }

    /// A short title from the model, or the intent's first 40 characters. The call's usage is
    /// recorded for `task`.
    async fn title_for(&self, task: &TaskRecord) -> (String, Option<UsageRecord>) {
        let intent = task.intent.as_str();
        let fallback = || intent.chars().take(40).collect::<String>();
        let Ok(prompt) = self
            .prompts
            .render(PromptName::Title, &json!({"intent": intent}))
        else {
            return (fallback(), None);
        };
        let request = ChatRequest::new(ModelPurpose::Title, vec![ChatMessage::user(prompt)]);
        let started = std::time::Instant::now();
        let Ok(Ok(response)) =
            tokio::time::timeout(TITLE_TIMEOUT, self.model.complete(&request)).await
        else {
            return (fallback(), None);
        };
        let record = crate::usage::record_of(
            self,
            &crate::usage::Served::task(task),
            mai_core::usage::UsagePurpose::Title,
            &request,
            &response,
            started,
        );
        let title = response.message.content.lines().next().unwrap_or_default();
        let title = title
            .trim()
            .trim_matches(['"', '“', '”', '「', '」'])
            .trim();
        let title = if title.is_empty() {
            fallback()
        } else {
            title.chars().take(80).collect()
        };
        (title, Some(record))
    }

    /// Tasks the caller may see: admins any (as filtered), others those acting for them.
    pub async fn list(
        &self,
        caller: &Caller,
        mut filter: TaskFilter,
    ) -> Result<Vec<TaskRecord>, EngineError> {
        if caller.role == Role::Admin {
            return Ok(self.store.list(&filter).await?);
        }
        match &caller.requester {
            Some(person) => {
                filter.requester = Some(person.clone());
                Ok(self.store.list(&filter).await?)
            }
            None => {
                filter.owner = Some(caller.owner.clone());
                let mut tasks = self.store.list(&filter).await?;
                tasks.retain(|task| caller.may_see(task));
                Ok(tasks)
            }
        }
    }

    /// How many of the tasks the caller may see are in each of `statuses` (an admin's: one
    /// grouped read over those statuses only, however many other tasks are kept).
    pub async fn count_in_states(
        &self,
        caller: &Caller,
        statuses: &[TaskStatus],
    ) -> Result<Vec<(TaskStatus, u64)>, EngineError> {
        if caller.role == Role::Admin {
            return Ok(self.store.count_in_states(statuses).await?);
        }
        let mut counts = self.count_by_status(caller, TaskFilter::default()).await?;
        counts.retain(|(status, _)| statuses.contains(status));
        Ok(counts)
    }

    /// How many of the tasks the caller may see match `filter`, per status (its statuses and
    /// limit aside): one grouped read in the store, except for a caller whose tasks the store
    /// cannot tell apart (no requester), whose visible tasks are read and counted.
    pub async fn count_by_status(
        &self,
        caller: &Caller,
        mut filter: TaskFilter,
    ) -> Result<Vec<(TaskStatus, u64)>, EngineError> {
        if caller.role == Role::Admin {
            return Ok(self.store.count_by_status(&filter).await?);
        }
        if let Some(person) = &caller.requester {
            filter.requester = Some(person.clone());
            return Ok(self.store.count_by_status(&filter).await?);
        }
        filter.statuses.clear();
        filter.limit = None;
        let mut counts: Vec<(TaskStatus, u64)> = Vec::new();
        for task in self.list(caller, filter).await? {
            match counts.iter_mut().find(|(status, _)| *status == task.status) {
                Some((_, n)) => *n += 1,
                None => counts.push((task.status, 1)),
            }
        }
        Ok(counts)
    }

    /// Every task of the planner's stream, whoever it acts for: a planner may see that they
    /// exist (what it may see of each is the planner tools' business, see `may_see`).
    pub(crate) async fn list_stream(
        &self,
        caller: &Caller,
        mut filter: TaskFilter,
    ) -> Result<Vec<TaskRecord>, EngineError> {
        if caller.door != Door::Planner {
            return self.list(caller, filter).await;
        }
        filter.stream_id = Some(caller.stream_id.clone());
        Ok(self.store.list(&filter).await?)
    }

    /// Resolves a reference (full id, unique id prefix, unique title), then checks that the
    /// caller may see the task.
    pub async fn resolve(
        &self,
        caller: &Caller,
        reference: &str,
    ) -> Result<TaskRecord, EngineError> {
        let reference = reference.trim();
        match self.store.resolve(reference).await? {
            Resolved::Found(task) if caller.may_see(&task) => Ok(*task),
            Resolved::NotFound => Err(not_found(caller, reference)),
            Resolved::Ambiguous(ids) if caller.role == Role::Admin => Err(EngineError::Ambiguous {
                reference: reference.to_owned(),
                candidates: ids
                    .iter()
                    .map(|id| id.short())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
            // The match (or one of the matches) is someone else's task: decide among the
            // caller's own tasks alone, so other people's tasks neither show their ids in a
            // "which one?" answer nor hide the caller's own task behind an ambiguity.
            Resolved::Found(_) | Resolved::Ambiguous(_) => {
                let own = self.list(caller, TaskFilter::default()).await?;
                resolve_among(own, reference)
            }
        }
    }

    /// The caller's task for a change: resolved, visible, and the change allowed.
    async fn resolve_for_change(
        &self,
        caller: &Caller,
        reference: &str,
        change: Change,
    ) -> Result<TaskRecord, EngineError> {
        let task = self.resolve(caller, reference).await?;
        self.check_change(caller, &task, change)?;
        Ok(task)
    }

    /// The one rule for changing a task: only its requester or an admin; and steering it (an
    /// instruction, an answer, a resume) only from where the caller's role is at least the
    /// role the task runs with — the same person in a chat where they have less cannot steer
    /// their own more powerful task from there. Stopping it can escalate nothing and is
    /// allowed to the requester from anywhere.
    fn check_change(
        &self,
        caller: &Caller,
        task: &TaskRecord,
        change: Change,
    ) -> Result<(), EngineError> {
        if caller.role != Role::Admin && !caller.is_requester_of(task) {
            return Err(EngineError::PermissionDenied(format!(
                "task {} acts for someone else; only they or an admin can change it",
                task.id.short()
            )));
        }
        if change == Change::Steer {
            let runs_as = self.task_role(task);
            require(caller.role, runs_as).map_err(|_| steer_refused(caller, task, runs_as))?;
        }
        Ok(())
    }

    /// The status log and agent history of a task.
    pub async fn history(
        &self,
        caller: &Caller,
        reference: &str,
    ) -> Result<TaskHistory, EngineError> {
        let task = self.resolve(caller, reference).await?;
        self.history_of(task).await
    }

    /// [`Engine::history`] of a task already resolved (the planner resolves in its stream).
    pub(crate) async fn history_of(&self, task: TaskRecord) -> Result<TaskHistory, EngineError> {
        let entries = self.store.history(task.id, 0).await?;
        Ok(TaskHistory {
            status_log: task.status_log.clone(),
            task,
            entries,
        })
    }

    /// Adds an instruction to a running task (applied before its next model call) or answers a
    /// waiting one.
    pub async fn inject(
        &self,
        caller: &Caller,
        reference: &str,
        instruction: &str,
    ) -> Result<TaskRecord, EngineError> {
        let task = self.resolve(caller, reference).await?;
        self.inject_into(caller, task, instruction).await
    }

    /// [`Engine::inject`] into a task already resolved (the planner resolves in its stream).
    pub(crate) async fn inject_into(
        &self,
        caller: &Caller,
        task: TaskRecord,
        instruction: &str,
    ) -> Result<TaskRecord, EngineError> {
        let instruction = instruction.trim();
        if instruction.is_empty() {
            return Err(EngineError::Invalid("the instruction is empty".into()));
        }
        check_length("instruction", instruction, MAX_INSTRUCTION_CHARS)?;
        self.check_change(caller, &task, Change::Steer)?;
        match task.status {
            TaskStatus::WaitingInput => {
                if self
                    .answer_task(task.id, instruction, &caller.actor())
                    .await?
                {
                    return Ok(task);
                }
                // Already answered and about to resume: add it as an instruction instead.
                self.append_injection(&task, caller, instruction).await?;
                Ok(task)
            }
            TaskStatus::Running | TaskStatus::Pending if task.level == TaskLevel::Agent => {
                self.append_injection(&task, caller, instruction).await?;
                Ok(task)
            }
            status => Err(EngineError::WrongState {
                short: task.id.short(),
                status,
                what: "instructions can only be added to running or waiting agent tasks",
            }),
        }
    }

    async fn append_injection(
        &self,
        task: &TaskRecord,
        caller: &Caller,
        instruction: &str,
    ) -> Result<(), EngineError> {
        let text = self
            .prompts
            .render(
                PromptName::Injection,
                &json!({"instruction": instruction, "source": caller.actor()}),
            )
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        let entry = NewHistoryEntry {
            round: task.metadata.rounds,
            kind: HistoryKind::Injection,
            payload: serde_json::to_value(ChatMessage::user(text))
                .map_err(|e| EngineError::Internal(e.to_string()))?,
            at: Utc::now(),
        };
        self.store.append_history(task.id, &[entry]).await?;
        self.schedule.mark_injected(task.id);
        Ok(())
    }

    /// Answers a waiting task (`/maitask ask <id> …`).
    pub async fn answer(
        &self,
        caller: &Caller,
        reference: &str,
        text: &str,
    ) -> Result<TaskRecord, EngineError> {
        check_length("answer", text, MAX_INSTRUCTION_CHARS)?;
        let task = self
            .resolve_for_change(caller, reference, Change::Steer)
            .await?;
        if task.status != TaskStatus::WaitingInput {
            return Err(EngineError::WrongState {
                short: task.id.short(),
                status: task.status,
                what: "only a task waiting for an answer can be answered",
            });
        }
        if !self.answer_task(task.id, text, &caller.actor()).await? {
            return Err(EngineError::WrongState {
                short: task.id.short(),
                status: task.status,
                what: "its question was already answered",
            });
        }
        Ok(task)
    }

    /// Cancels a task: at once when it is not running; cooperatively (at its next await) when
    /// it is. Returns the task as it is after the request.
    pub async fn cancel(
        &self,
        caller: &Caller,
        reference: &str,
    ) -> Result<TaskRecord, EngineError> {
        let task = self.resolve(caller, reference).await?;
        self.cancel_task(caller, task).await
    }

    /// [`Engine::cancel`] of a task already resolved (the planner resolves in its stream).
    pub(crate) async fn cancel_task(
        &self,
        caller: &Caller,
        task: TaskRecord,
    ) -> Result<TaskRecord, EngineError> {
        self.check_change(caller, &task, Change::Stop)?;
        self.stop_task(
            task,
            StopReason::Cancel {
                actor: caller.actor(),
            },
            TaskStatus::Cancelled,
        )
        .await
    }

    /// Pauses a task; a running one pauses at its next await and resumes from its checkpoint; a
    /// scheduled one (delayed or cron, waiting for its time) stops waiting: its timer is
    /// withdrawn until it is resumed.
    pub async fn pause(&self, caller: &Caller, reference: &str) -> Result<TaskRecord, EngineError> {
        let task = self
            .resolve_for_change(caller, reference, Change::Stop)
            .await?;
        self.stop_task(
            task,
            StopReason::Pause {
                actor: caller.actor(),
            },
            TaskStatus::Paused,
        )
        .await
    }

    async fn stop_task(
        &self,
        mut task: TaskRecord,
        reason: StopReason,
        to: TaskStatus,
    ) -> Result<TaskRecord, EngineError> {
        let actor = match &reason {
            StopReason::Cancel { actor } | StopReason::Pause { actor } => actor.clone(),
            _ => "engine".to_owned(),
        };
        loop {
            let from = task.status;
            if from == TaskStatus::Running {
                let control = self.schedule.control(task.id);
                if let Some(control) = control {
                    control.stop(reason);
                    return Ok(task);
                }
                if self.stop_elsewhere(task.id, &reason).await? {
                    return Ok(task);
                }
            }
            if !from.can_become(to) {
                return Err(EngineError::WrongState {
                    short: task.id.short(),
                    status: from,
                    what: if to == TaskStatus::Cancelled {
                        "it can no longer be cancelled"
                    } else {
                        "only scheduled, pending, running or waiting tasks can be paused"
                    },
                });
            }
            let verb = if to == TaskStatus::Cancelled {
                "cancelled"
            } else {
                "paused"
            };
            task.transition(to, &actor, verb, self.now())?;
            if to == TaskStatus::Paused {
                task.metadata.pause_cause = Some(PauseCause::User);
            }
            if self.save_status(&task, from).await? {
                self.schedule.withdraw(task.id);
                // A run still sending the question it now waits on stops too, so the send
                // stops retrying.
                if let Some(control) = self.schedule.control(task.id) {
                    control.stop(reason);
                }
                return Ok(task);
            }
            // It changed under us (dispatched, answered, finished): look again.
            task = match self.store.get(task.id).await? {
                Some(current) => current,
                None => return Err(EngineError::NotFound(task.id.short())),
            };
        }
    }

    /// On a shared store, a task running on another instance is stopped by leaving it a stop
    /// request (that instance acts on it at once, or an instance adopting the task does);
    /// `false` when it is not running anywhere, or the store is not shared.
    async fn stop_elsewhere(
        &self,
        id: mai_core::task::TaskId,
        reason: &StopReason,
    ) -> Result<bool, EngineError> {
        let Some(request) = reason.request().filter(|_| self.store.shared()) else {
            return Ok(false);
        };
        Ok(self.store.request_stop(id, &request).await?)
    }

    /// Resumes a paused task from its checkpoint: back to `scheduled` (its timer armed again)
    /// when its due time is still ahead — a delayed or cron task paused while it waited —
    /// otherwise queued (`pending`).
    pub async fn resume(
        &self,
        caller: &Caller,
        reference: &str,
    ) -> Result<TaskRecord, EngineError> {
        let mut task = self
            .resolve_for_change(caller, reference, Change::Steer)
            .await?;
        if task.status != TaskStatus::Paused {
            return Err(EngineError::WrongState {
                short: task.id.short(),
                status: task.status,
                what: "only paused tasks can be resumed",
            });
        }
        let now = self.now();
        let due = task.scheduled_at.filter(|at| *at > now);
        let (to, reason) = match due {
            Some(_) => (TaskStatus::Scheduled, "resumed: waits for its time"),
            None => (TaskStatus::Pending, "resumed"),
        };
        task.transition(to, &caller.actor(), reason, now)?;
        task.metadata.pause_cause = None;
        if self.save_status(&task, TaskStatus::Paused).await? {
            match due {
                Some(at) => self.schedule.arm_due(task.id, at),
                None => self.enqueue(&task),
            }
        }
        Ok(task)
    }

    /// A task by id, for the caller.
    pub async fn get(
        &self,
        caller: &Caller,
        id: mai_core::task::TaskId,
    ) -> Result<TaskRecord, EngineError> {
        match self.store.get(id).await? {
            Some(task) if caller.may_see(&task) => Ok(task),
            _ => Err(not_found(caller, &id.to_string())),
        }
    }
}

/// A guest's refusal to create a task: who they are, and the `[permission]` entry that would
/// let them.
fn guest_refused(caller: &Caller) -> EngineError {
    let Some(person) = &caller.requester else {
        return EngineError::PermissionDenied("guests cannot create tasks".into());
    };
    EngineError::PermissionDenied(format!(
        "{person} is a guest here; guests cannot create tasks — {} to allow it",
        admitting(person, caller.group_id.as_deref(), Role::User)
    ))
}

/// A refusal to steer a task that runs with more rights than the caller has here: who the
/// caller is, where they may steer it, and the `[permission]` entry that would let them here.
fn steer_refused(caller: &Caller, task: &TaskRecord, runs_as: Role) -> EngineError {
    let (you, admit) = match &caller.requester {
        Some(person) => (
            format!("you ({person}) are"),
            format!(
                ", or {}",
                admitting(person, caller.group_id.as_deref(), runs_as)
            ),
        ),
        None => ("you are".to_owned(), String::new()),
    };
    EngineError::PermissionDenied(format!(
        "task {} runs with {runs_as} rights and {you} {} here; instruct, answer or resume it \
         from a chat where you are {runs_as} (e.g. the one it runs in){admit}",
        task.id.short(),
        caller.role
    ))
}

/// The `[permission]` entry that would give `person` the role `role` where they speak
/// (`group`: the group chat, `None`: a private chat), as "add … to [permission] …".
fn admitting(person: &PersonId, group: Option<&str>, role: Role) -> String {
    let group = group.map(|group| format!("{}:group:{group}", person.platform));
    match (role, group) {
        (Role::Admin, None) => format!("add \"{person}\" to [permission] admins"),
        (Role::Admin, Some(group)) => format!(
            "add \"{group}\" to [permission] admin_groups (everyone in this group becomes \
             admin), or put \"{person}\" in admins with admin_in_group_chats = true"
        ),
        (_, None) => format!("add \"{person}\" to [permission] users"),
        (_, Some(group)) => format!(
            "add \"{person}\" to [permission] users (or \"{group}\" to user_groups, for \
             everyone in this group)"
        ),
    }
}

/// "Nothing matches `reference`", said as the caller sees it: a too-short id prefix is told
/// to give more; someone who sees every task is not told "of yours".
fn not_found(caller: &Caller, reference: &str) -> EngineError {
    if is_short_id(reference) {
        EngineError::ShortReference(reference.to_owned())
    } else if caller.role == Role::Admin {
        EngineError::NoSuchTask(reference.to_owned())
    } else {
        EngineError::NotFound(reference.to_owned())
    }
}

/// Hex digits (dashes aside), but fewer than the 4 an id prefix needs.
fn is_short_id(reference: &str) -> bool {
    let hex: Vec<char> = reference.chars().filter(|c| *c != '-').collect();
    (1..4).contains(&hex.len()) && hex.iter().all(char::is_ascii_hexdigit)
}

/// Whether `task` is what `reference` names: a prefix of its id (with or without dashes, any
/// case) or exactly its title.
pub(crate) fn names_task(task: &TaskRecord, reference: &str) -> bool {
    let wanted = reference.to_ascii_lowercase();
    task.id.0.simple().to_string().starts_with(&wanted)
        || task.id.to_string().starts_with(&wanted)
        || task.title == reference
}

/// Resolves `reference` among `candidates` only (the tasks a caller may see).
pub(crate) fn resolve_among(
    candidates: Vec<TaskRecord>,
    reference: &str,
) -> Result<TaskRecord, EngineError> {
    let mut matches: Vec<TaskRecord> = candidates
        .into_iter()
        .filter(|task| names_task(task, reference))
        .collect();
    match matches.len() {
        0 if is_short_id(reference) => Err(EngineError::ShortReference(reference.to_owned())),
        0 => Err(EngineError::NotFound(reference.to_owned())),
        1 => Ok(matches.remove(0)),
        _ => Err(EngineError::Ambiguous {
            reference: reference.to_owned(),
            candidates: matches
                .iter()
                .map(|t| t.id.short())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The status a new task starts in and when it first runs.
async fn first_run(
    engine: &Engine,
    trigger: &Trigger,
    now: chrono::DateTime<Utc>,
) -> Result<(TaskStatus, Option<chrono::DateTime<Utc>>), EngineError> {
    match trigger {
        Trigger::Now => Ok((TaskStatus::Pending, None)),
        Trigger::Delay { seconds } => {
            let due = i64::try_from(*seconds)
                .ok()
                .and_then(chrono::Duration::try_seconds)
                .and_then(|delay| now.checked_add_signed(delay))
                .ok_or_else(|| {
                    EngineError::Invalid(format!(
                        "a delay of {seconds} seconds is too far in the future"
                    ))
                })?;
            Ok((TaskStatus::Scheduled, Some(due)))
        }
        Trigger::Cron { expr, timezone } => {
            let zone = engine
                .cron_zone(timezone.as_deref())
                .map_err(|e| EngineError::Invalid(format!("timezone: {e}")))?;
            let next = next_fire_blocking(expr, zone, now)
                .await
                .map_err(|detail| EngineError::InvalidCron {
                    expr: expr.clone(),
                    detail,
                })?;
            Ok((TaskStatus::Scheduled, Some(next)))
        }
    }
}

/// Who a new task acts for: a sub-task inherits its parent's requester and fixed role and
/// nests one level deeper; a planner's task acts for the speaker; a token holder's task acts
/// for nobody, as admin; a person's task acts for its owner; the terminal operator's tasks run
/// with the role it chose.
fn acts_for(task: &mut TaskRecord, caller: &Caller, parent: Option<&TaskRecord>) {
    if let Some(parent) = parent {
        task.metadata.parent_task_id = Some(parent.id);
        task.metadata.depth = parent.metadata.depth.saturating_add(1);
        task.metadata.requester = parent.metadata.requester.clone();
        task.metadata.fixed_role = parent.metadata.fixed_role;
        return;
    }
    if matches!(caller.owner, Owner::Planner(_)) {
        task.metadata.requester = caller.requester.clone();
    }
    if matches!(caller.door, Door::Token | Door::Local) {
        task.metadata.fixed_role = Some(caller.role);
    }
}
