//! The task record and its state machine (docs/design.md, "Tasks and their states").
//!
//! A record is plain data: everything here serializes and round-trips, and no runtime object
//! (channel, future, token) ever lives in it. Every status change goes through
//! [`TaskRecord::transition`] (checked against the table) or [`TaskRecord::force`] (the escape
//! hatch for recovery, cron re-arm and fallbacks); both append to the status log.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ids::{Owner, PersonId, StreamId};

/// A task's id: a random UUID (v4). Random, not time-ordered (v7), because people address tasks
/// by their first 8 characters, and v7 ids created within a minute share those.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(pub Uuid);

impl TaskId {
    pub fn new() -> Self {
        TaskId(Uuid::new_v4())
    }

    /// The 8-character prefix shown to people (`/maitask status 0192ab3c`).
    pub fn short(&self) -> String {
        self.0.simple().to_string()[..8].to_owned()
    }
}

impl Default for TaskId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for TaskId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(TaskId)
    }
}

/// How much machinery a task gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TaskLevel {
    /// One action, no model loop (deliver a message, a reminder).
    Instant,
    /// An autonomous agent loop.
    #[default]
    Agent,
}

/// When a task runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Trigger {
    Now,
    Delay {
        seconds: u64,
    },
    /// A recurring run: `expr` read in `timezone` (an IANA name), or in `[task] timezone` when
    /// the task was created without one.
    Cron {
        expr: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
}

/// The lifecycle state of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Scheduled,
    Pending,
    Running,
    WaitingInput,
    Paused,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Scheduled,
        TaskStatus::Pending,
        TaskStatus::Running,
        TaskStatus::WaitingInput,
        TaskStatus::Paused,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Scheduled => "scheduled",
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::WaitingInput => "waiting_input",
            TaskStatus::Paused => "paused",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// The transition table of docs/design.md, "Tasks and their states".
    pub fn can_become(self, next: TaskStatus) -> bool {
        use TaskStatus::*;
        match self {
            Scheduled => matches!(next, Pending | Paused | Cancelled),
            Pending => matches!(next, Running | Cancelled | Scheduled | Failed),
            Running => matches!(next, WaitingInput | Paused | Completed | Failed | Cancelled),
            WaitingInput => matches!(next, Running | Paused | Cancelled | Failed),
            Paused => matches!(next, Pending | Scheduled | Cancelled),
            Completed | Failed | Cancelled => false,
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown task status `{0}`: expected one of scheduled, pending, running, waiting_input, \
     paused, completed, failed, cancelled"
)]
pub struct UnknownStatus(pub String);

impl FromStr for TaskStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// One line of the append-only status log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusChange {
    pub at: DateTime<Utc>,
    pub status: TaskStatus,
    /// Who caused it: `scheduler`, `recovery`, an owner string, `planner:…`.
    pub actor: String,
    pub reason: String,
}

/// A refused transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal task transition {from} -> {to}")]
pub struct IllegalTransition {
    pub from: TaskStatus,
    pub to: TaskStatus,
}

/// Why a task is paused; decides what recovery does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseCause {
    /// Paused by a person: stays paused across restarts.
    User,
    /// Paused by a graceful stop: re-queued on the next start.
    Stop,
    /// Paused because its requester or stream used up a daily budget of `[limits.budgets]`:
    /// resumed when the budget resets (`budget_resets_at`) or when `[limits]` is reloaded.
    Budget,
}

/// The question a `waiting_input` task asked, and the tool call the answer will complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingQuestion {
    /// The id of the model's `ask_user` call; the answer becomes its tool result.
    pub call_id: String,
    pub question: String,
    pub asked_at: DateTime<Utc>,
    /// Saved with the waiting state and cleared once the question reached the chat, so a crash
    /// in between (e.g. during its polish) re-sends it on start-up instead of leaving the task
    /// waiting for an answer to a question nobody saw. Absent in older records: sent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsent: bool,
}

/// Progress of delivering a reply, so a restart neither loses nor repeats parts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryProgress {
    /// The final (polished, split) parts, fixed before the first is sent.
    pub parts: Vec<String>,
    /// How many parts were sent.
    pub sent: usize,
}

/// Typed metadata of a task: everything the engine remembers about it beyond the core fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskMetadata {
    /// The group of the task's stream (`None` = a private chat); the requester's role is resolved
    /// per stream, so it is needed on every tool call.
    pub group_id: Option<String>,
    /// Set while paused; `Stop` means "paused by stop".
    pub pause_cause: Option<PauseCause>,
    /// The final answer of an agent task, or the text an instant task delivers.
    pub answer: Option<String>,
    /// Deliver `answer` as is: failure notices and command replies are never polished.
    pub raw: bool,
    /// Why the task failed, for people.
    pub error: Option<String>,
    /// The task that created this one (`create_subtask`, reply tasks).
    pub parent_task_id: Option<TaskId>,
    /// Agent rounds run so far.
    pub rounds: u32,
    /// Number of conversation messages checkpointed in the current run (the resume watermark).
    pub history_len: u64,
    /// First history sequence number of the current run: each cron run starts a fresh
    /// conversation after the previous runs' history.
    pub history_from: u64,
    /// Set while `waiting_input`.
    pub waiting: Option<WaitingQuestion>,
    /// Set while an instant task delivers its text.
    pub delivery: Option<DeliveryProgress>,
    /// How many times a cron task has fired.
    pub cron_runs: u32,
    /// Seconds spent running so far (paused and waiting time excluded).
    pub runtime_secs: u64,
    /// The person the task acts for, when it is not its owner: the speaker of a planner task
    /// (the host's `user_id`), inherited by its sub-tasks and reply tasks; `None` for a person's
    /// task (it acts for its owner, see [`TaskRecord::requester`]) and for a planner task made
    /// without a speaker (it runs at `[planner] default_role`). A task runs with its
    /// requester's role in its stream; only their reply in that stream answers its questions.
    pub requester: Option<PersonId>,
    /// How deep in a chain of sub-tasks this task is: 0 for a task a person or the planner
    /// created, its parent's depth + 1 for a `create_subtask` child.
    #[serde(skip_serializing_if = "is_zero")]
    pub depth: u32,
    /// The role the door that made the task fixed for it, whatever `[permission]` says: the API
    /// token's tasks (no requester) are admin; `mai-agent run --role` chooses one. Without it a
    /// task runs with its requester's role, or `[planner] default_role` when it has none.
    /// Sub-tasks and reply tasks inherit it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed_role: Option<crate::role::Role>,
    /// A reply task: it delivers the result of `parent_task_id` (it was not created by it as a
    /// sub-task, so it counts against no limit).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_reply: bool,
    /// Set while paused by a budget: when that budget resets and the task resumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_resets_at: Option<DateTime<Utc>>,
    /// Who recorded the answer a waiting task resumes with, when a door named one (`mai-agent
    /// task ask`, the dashboard, `/maitask ask`): the status-log line of the resume names them
    /// instead of the scheduler. Cleared when that run starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    /// The model calls of this run not yet in the usage table: a running task's usage rows are
    /// written a few rounds at a time, and until then they are saved here, with every
    /// checkpoint, so a crash loses none of them (the run that resumes the task writes them).
    /// Stored compactly (see [`crate::usage::carried`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "crate::usage::carried"
    )]
    pub usage_unwritten: Vec<crate::usage::UsageRecord>,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// The persisted unit of work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub id: TaskId,
    pub title: String,
    pub intent: String,
    pub level: TaskLevel,
    pub status: TaskStatus,
    pub owner: Owner,
    pub stream_id: StreamId,
    pub platform: String,
    /// Where the answer goes; falls back to `stream_id`.
    pub reply_stream_id: Option<StreamId>,
    pub trigger: Trigger,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub priority: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    /// 0 = unlimited.
    pub max_runtime_min: u32,
    pub metadata: TaskMetadata,
    /// Defaults to empty when decoding: the store keeps the log in its own table.
    #[serde(default)]
    pub status_log: Vec<StatusChange>,
}

/// What a new task needs; the rest is filled in by [`TaskRecord::new`].
#[derive(Debug, Clone)]
pub struct NewTask {
    pub title: String,
    pub intent: String,
    pub level: TaskLevel,
    pub owner: Owner,
    pub stream_id: StreamId,
    pub platform: String,
    pub reply_stream_id: Option<StreamId>,
    pub trigger: Trigger,
    pub priority: i32,
    pub max_runtime_min: u32,
}

impl TaskRecord {
    /// The person the task acts for: the one in [`TaskMetadata::requester`], else the owner
    /// of a person's task; `None` for a planner task made without a speaker.
    pub fn requester(&self) -> Option<&PersonId> {
        match (&self.metadata.requester, &self.owner) {
            (Some(person), _) | (None, Owner::Person(person)) => Some(person),
            (None, Owner::Planner(_)) => None,
        }
    }

    /// A new task in `initial` status (`pending` for `now`, `scheduled` otherwise), its creation
    /// logged with `actor`.
    pub fn new(spec: NewTask, initial: TaskStatus, actor: &str, now: DateTime<Utc>) -> Self {
        TaskRecord {
            id: TaskId::new(),
            title: spec.title,
            intent: spec.intent,
            level: spec.level,
            status: initial,
            owner: spec.owner,
            stream_id: spec.stream_id,
            platform: spec.platform,
            reply_stream_id: spec.reply_stream_id,
            trigger: spec.trigger,
            scheduled_at: None,
            priority: spec.priority,
            created_at: now,
            updated_at: now,
            started_at: None,
            max_runtime_min: spec.max_runtime_min,
            metadata: TaskMetadata::default(),
            status_log: vec![StatusChange {
                at: now,
                status: initial,
                actor: actor.to_owned(),
                reason: "created".to_owned(),
            }],
        }
    }

    /// The stream replies go to.
    pub fn reply_stream(&self) -> &StreamId {
        self.reply_stream_id.as_ref().unwrap_or(&self.stream_id)
    }

    /// A checked status change; refused changes leave the record untouched.
    pub fn transition(
        &mut self,
        to: TaskStatus,
        actor: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), IllegalTransition> {
        if !self.status.can_become(to) {
            return Err(IllegalTransition {
                from: self.status,
                to,
            });
        }
        self.force(to, actor, reason, now);
        Ok(())
    }

    /// An unchecked status change for recovery, cron re-arm and fallbacks; still logged.
    pub fn force(&mut self, to: TaskStatus, actor: &str, reason: &str, now: DateTime<Utc>) {
        self.status = to;
        self.updated_at = now;
        if to == TaskStatus::Running && self.started_at.is_none() {
            self.started_at = Some(now);
        }
        self.status_log.push(StatusChange {
            at: now,
            status: to,
            actor: actor.to_owned(),
            reason: reason.to_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    pub(crate) fn sample(now: DateTime<Utc>) -> TaskRecord {
        TaskRecord::new(
            NewTask {
                title: "disk".into(),
                intent: "check the disk usage".into(),
                level: TaskLevel::Agent,
                owner: "qq:1".parse().unwrap(),
                stream_id: StreamId::new("s1").unwrap(),
                platform: "qq".into(),
                reply_stream_id: None,
                trigger: Trigger::Cron {
                    expr: "0 18 * * *".into(),
                    timezone: None,
                },
                priority: 0,
                max_runtime_min: 0,
            },
            Pending,
            "qq:1",
            now,
        )
    }

    #[test]
    fn every_transition_follows_the_table() {
        let legal: &[(TaskStatus, &[TaskStatus])] = &[
            (Scheduled, &[Pending, Paused, Cancelled]),
            (Pending, &[Running, Cancelled, Scheduled, Failed]),
            (
                Running,
                &[WaitingInput, Paused, Completed, Failed, Cancelled],
            ),
            (WaitingInput, &[Running, Paused, Cancelled, Failed]),
            (Paused, &[Pending, Scheduled, Cancelled]),
            (Completed, &[]),
            (Failed, &[]),
            (Cancelled, &[]),
        ];
        let now = Utc::now();
        for &(from, allowed) in legal {
            for to in TaskStatus::ALL {
                let mut task = sample(now);
                task.force(from, "test", "setup", now);
                let before = task.clone();
                let result = task.transition(to, "tester", "because", now);
                if allowed.contains(&to) {
                    assert!(result.is_ok(), "{from} -> {to} must be legal");
                    assert_eq!(task.status, to);
                    let last = task.status_log.last().unwrap();
                    assert_eq!(
                        (last.status, &*last.actor, &*last.reason),
                        (to, "tester", "because")
                    );
                    assert_eq!(task.status_log.len(), before.status_log.len() + 1);
                } else {
                    assert_eq!(
                        result,
                        Err(IllegalTransition { from, to }),
                        "{from} -> {to}"
                    );
                    assert_eq!(task, before, "a refused transition changes nothing");
                }
            }
        }
    }

    #[test]
    fn force_bypasses_the_table_but_is_logged() {
        let t0 = Utc::now();
        let mut task = sample(t0);
        task.force(Completed, "scheduler", "done", t0);
        let t1 = t0 + chrono::Duration::seconds(5);
        assert!(task.transition(Scheduled, "cron", "re-arm", t1).is_err());
        task.force(Scheduled, "cron", "re-arm", t1);
        assert_eq!(task.status, Scheduled);
        assert_eq!(task.updated_at, t1);
        let log: Vec<_> = task
            .status_log
            .iter()
            .map(|c| (c.status, c.actor.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            log,
            [
                (Pending, "qq:1", "created"),
                (Completed, "scheduler", "done"),
                (Scheduled, "cron", "re-arm")
            ]
        );
    }

    #[test]
    fn records_round_trip_through_json() {
        let now = Utc::now();
        let mut task = sample(now);
        task.transition(Running, "scheduler", "dispatched", now)
            .unwrap();
        task.metadata.pause_cause = Some(PauseCause::Stop);
        task.metadata.parent_task_id = Some(TaskId::new());
        task.metadata.answer = Some("42 %".into());
        task.reply_stream_id = Some(StreamId::new("other").unwrap());
        let json = serde_json::to_string(&task).unwrap();
        let back: TaskRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, task);
        assert_eq!(back.started_at, Some(now));
        assert_eq!(back.reply_stream().as_str(), "other");
    }

    #[test]
    fn statuses_parse_and_short_ids_are_prefixes() {
        for status in TaskStatus::ALL {
            assert_eq!(status.as_str().parse::<TaskStatus>(), Ok(status));
        }
        assert!("done".parse::<TaskStatus>().is_err());
        let id = TaskId::new();
        assert_eq!(id.short().len(), 8);
        assert!(id.to_string().starts_with(&id.short()));
    }
}
