//! The persistence capability the engine needs, as a trait: SQL lives behind it (`mai-store`).
//!
//! Writes that change a task's status take an *expected status*: the store writes only if the
//! stored status still matches (compare-and-set), so a stale snapshot can never overwrite a
//! concurrent terminal state — or they read and change the task in one step (`update`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{Owner, PersonId, StreamId};
use crate::lease::{Notice, StopRequest};
use crate::task::{TaskId, TaskLevel, TaskRecord, TaskStatus};
use crate::usage::{UsageQuery, UsageRecord, UsageTotals};

/// What one agent-history entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryKind {
    /// One chat message of the agent conversation (system, user, assistant or tool).
    Message,
    /// An instruction injected into a running or waiting task.
    Injection,
    /// A note for people reading the timeline (not sent to the model).
    Note,
}

impl HistoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryKind::Message => "message",
            HistoryKind::Injection => "injection",
            HistoryKind::Note => "note",
        }
    }
}

/// One entry of a task's ordered agent history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Position in the task's history, from 0; assigned by the store on append.
    pub seq: u64,
    /// The agent round the entry belongs to.
    pub round: u32,
    pub kind: HistoryKind,
    pub payload: serde_json::Value,
    pub at: DateTime<Utc>,
}

/// A new history entry, before the store numbers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewHistoryEntry {
    pub round: u32,
    pub kind: HistoryKind,
    pub payload: serde_json::Value,
    pub at: DateTime<Utc>,
}

/// One write of an atomic group ([`TaskStore::write`]).
#[derive(Debug, Clone, Copy)]
pub enum TaskWrite<'a> {
    /// A new task (its whole status log included). A task that already exists with this id is
    /// left as it is: derived ids (reply tasks) make a repeated insert a no-op, not an error.
    InsertIfAbsent(&'a TaskRecord),
    /// [`TaskStore::checkpoint`]: the compare-and-set save of `task` plus `history`.
    Save {
        task: &'a TaskRecord,
        expected: Option<TaskStatus>,
        /// Also require that the stored task is waiting on the question of this `ask_user`
        /// call (`metadata.waiting.call_id`): answering a question is a compare-and-set on the
        /// waiting state, so of two concurrent answers exactly one lands.
        expected_question: Option<&'a str>,
        history: &'a [NewHistoryEntry],
    },
    /// Usage records of model calls (appended; a store keeps them when it prunes tasks). They
    /// ride on a task's checkpoint write, so recording them costs no write of its own.
    Usage(&'a [UsageRecord]),
}

/// Which tasks to list. Empty fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub owner: Option<Owner>,
    /// Tasks acting for this person.
    pub requester: Option<PersonId>,
    pub stream_id: Option<StreamId>,
    /// Any of these statuses (empty = all).
    pub statuses: Vec<TaskStatus>,
    pub level: Option<TaskLevel>,
    /// The tasks this task made: its sub-tasks and its reply tasks.
    pub parent: Option<TaskId>,
    /// Created at or after this time.
    pub created_since: Option<DateTime<Utc>>,
    /// Created before this time.
    pub created_before: Option<DateTime<Utc>>,
    /// A piece of the title (ASCII letters in any case), or the start of the id (hex, dashes
    /// optional).
    pub search: Option<String>,
    /// At most this many, newest first (`None` = no limit).
    pub limit: Option<u32>,
    /// Skip this many matching tasks first (paging; with `limit`).
    pub offset: Option<u64>,
    /// Oldest first instead of newest first.
    pub oldest_first: bool,
}

impl TaskFilter {
    /// Every task in one of `statuses`.
    pub fn in_states(statuses: &[TaskStatus]) -> Self {
        TaskFilter {
            statuses: statuses.to_vec(),
            ..TaskFilter::default()
        }
    }

    /// The id prefix [`TaskFilter::search`] can stand for: its hex digits, lowercase, dashes
    /// dropped (the stored id key's form); `None` when it has anything else or is too long.
    pub fn search_id_prefix(&self) -> Option<String> {
        let text = self.search.as_deref()?.trim();
        let hex: String = text.chars().filter(|c| *c != '-').collect();
        let hex = hex.to_ascii_lowercase();
        (!hex.is_empty() && hex.len() <= 32 && hex.chars().all(|c| c.is_ascii_hexdigit()))
            .then_some(hex)
    }

    /// [`TaskFilter::search`] as the piece of a title to look for (lowercase), if any.
    pub fn search_title(&self) -> Option<String> {
        let text = self.search.as_deref()?.trim();
        (!text.is_empty()).then(|| text.to_ascii_lowercase())
    }
}

/// What the caps on task creation count, in one read ([`TaskStore::counts`]).
#[derive(Debug, Clone, Copy)]
pub struct CountQuery<'a> {
    /// Count this person's unfinished tasks (none: counted as 0).
    pub requester: Option<&'a PersonId>,
    /// Count this stream's unfinished tasks.
    pub stream: &'a StreamId,
    /// Count the sub-tasks this task ever made (none: counted as 0).
    pub created_by: Option<TaskId>,
    /// Count the recurring tasks too (false: counted as 0). Only a recurring task's creation
    /// needs them, and they cost a look into every unfinished task's record.
    pub recurring: bool,
    /// Count the tasks created at or after this time (the daily task budgets), reply tasks
    /// excepted (none: counted as 0).
    pub created_since: Option<DateTime<Utc>>,
}

/// The figures of a [`CountQuery`]. "Unfinished" is every status but completed, failed and
/// cancelled; "recurring" is a cron trigger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCounts {
    pub unfinished_by_requester: u64,
    pub unfinished_in_stream: u64,
    pub recurring_by_requester: u64,
    pub recurring_in_stream: u64,
    pub children: u64,
    /// Tasks acting for the requester created since `created_since`.
    pub created_by_requester_since: u64,
    /// Tasks of the stream created since `created_since`.
    pub created_in_stream_since: u64,
}

/// Decides from the counts of a [`CountQuery`] whether a new task may be created:
/// `Err(reason)` refuses it (see [`TaskStore::insert_admitted`]).
pub type Admit = Box<dyn FnOnce(&TaskCounts) -> Result<(), String> + Send>;

/// Edits a task read by [`TaskStore::update`]; `false` leaves it as stored (nothing is
/// written). Runs wherever the store reads and writes in one step (a store with one writer:
/// on its thread), so it must be quick and must not block.
pub type Change = Box<dyn FnOnce(&mut TaskRecord) -> bool + Send>;

/// The outcome of a compare-and-set write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveOutcome {
    Saved,
    /// The stored status was not the expected one; nothing was written.
    Conflict {
        actual: TaskStatus,
    },
}

/// What a claim of a task into `running` came to ([`TaskStore::claim`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Claimed: the record as written.
    Claimed(Box<TaskRecord>),
    /// Not claimed: the task is gone, no longer claimable (the change declined it), or its
    /// status changed first. Nothing was written.
    Declined,
    /// Not claimed: as many tasks as the cluster-wide cap allows already run, on whichever
    /// instances. Nothing was written; the task stays as it was.
    Full,
}

/// The result of resolving what a person typed as a task reference.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Found(Box<TaskRecord>),
    /// Several tasks match; their ids, for a "which one?" answer.
    Ambiguous(Vec<TaskId>),
    NotFound,
}

/// A storage failure, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("task {0} does not exist")]
    NotFound(TaskId),
    #[error("task {0} already exists")]
    Duplicate(TaskId),
    #[error("stored data is corrupt ({what}): {detail}")]
    Corrupt { what: String, detail: String },
    #[error("database error while {doing}: {source}")]
    Database {
        doing: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The database server could not be reached (down, restarting, cut off): nothing was done,
    /// and the same call may succeed once it is back.
    #[error(
        "the database could not be reached while {doing} ({source}); check that the database \
         server named by [storage] url is running and reachable — nothing was written, and the \
         service picks up by itself once it answers again"
    )]
    Unavailable {
        doing: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// Whether the database could not be reached (try again later), rather than refused.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

/// The wake-ups of a shared store ([`TaskStore::notices`]); ends when the store closes.
pub type Notices = futures::stream::BoxStream<'static, Notice>;

/// Task persistence. Implementations must be safe to call from many tasks at once.
///
/// A *shared* store ([`TaskStore::shared`]) is one several instances use at once: a running
/// task there is leased to the instance that runs it (see `lease`). Its saves are fenced —
/// a save of a running task by an instance that does not hold its lease, while the lease is
/// live, is a `Conflict` — and the lease methods below do their work. On a store used by one
/// instance they are no-ops, so single-instance behaviour and speed are unchanged.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Persist a new task (its whole status log included).
    async fn insert(&self, task: &TaskRecord) -> Result<(), StoreError>;

    /// Persist a new task if `admit` accepts the counts of `query`; `Ok(Err(reason))`: refused,
    /// the task not written. `usage` (the model calls made to create it, e.g. its title) is
    /// appended either way — those calls were made — in the same transaction, so creating a
    /// task costs one write. A store with one writer counts inside the transaction that
    /// inserts, so concurrent creations cannot all pass one count (the caps of `[limits]` hold
    /// exactly). The default counts, then inserts: exact only when creations do not race.
    async fn insert_admitted(
        &self,
        task: &TaskRecord,
        query: &CountQuery<'_>,
        admit: Admit,
        usage: &[UsageRecord],
    ) -> Result<Result<(), String>, StoreError> {
        let counts = self.counts(query).await?;
        let admitted = admit(&counts);
        if admitted.is_ok() {
            self.insert(task).await?;
        }
        if !usage.is_empty() {
            self.record_usage(usage).await?;
        }
        Ok(admitted)
    }

    /// Write `task`; with `expected`, only if the stored status still equals it. Appends the
    /// status-log entries the store does not have yet (the log is append-only).
    async fn save(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
    ) -> Result<SaveOutcome, StoreError>;

    /// [`TaskStore::save`] plus appending `history` to the task's agent history, in one
    /// transaction: both happen or neither. Returns the outcome of the compare-and-set.
    async fn checkpoint(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
    ) -> Result<SaveOutcome, StoreError>;

    /// [`TaskStore::checkpoint`] plus appending usage records. A store with one writer does both
    /// in one transaction ([`TaskWrite::Usage`] beside the save), so recording a round's usage
    /// costs no write of its own; the default checkpoints, then appends the records if the
    /// checkpoint was saved.
    async fn checkpoint_with_usage(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
        usage: &[UsageRecord],
    ) -> Result<SaveOutcome, StoreError> {
        let outcome = self.checkpoint(task, expected, history).await?;
        if outcome == SaveOutcome::Saved {
            self.record_usage(usage).await?;
        }
        Ok(outcome)
    }

    /// Several writes in one transaction: all happen or none. The outcome is `Saved`, or the
    /// `Conflict` of the first save whose expectation (status, question) did not hold.
    async fn write(&self, writes: &[TaskWrite<'_>]) -> Result<SaveOutcome, StoreError>;

    /// Reads task `id`, lets `change` edit it and writes the edit, with nothing written to the
    /// task in between: the record as written, or `None` when the task does not exist or
    /// `change` left it as it was. A store with one writer reads and writes in one turn of it
    /// (one hand-off). The default reads, then saves with a compare-and-set on the status it
    /// read: a concurrent status change makes it write nothing and return `None`.
    async fn update(&self, id: TaskId, change: Change) -> Result<Option<TaskRecord>, StoreError> {
        let Some(mut task) = self.get(id).await? else {
            return Ok(None);
        };
        let read = task.status;
        if !change(&mut task) {
            return Ok(None);
        }
        Ok(match self.save(&task, Some(read)).await? {
            SaveOutcome::Saved => Some(task),
            SaveOutcome::Conflict { .. } => None,
        })
    }

    /// [`TaskStore::update`] for a claim: `change` moves the task into `running`. With `cap`,
    /// a shared store refuses the claim ([`Claim::Full`]) when `cap` tasks already run across
    /// every instance, counted in the claim's own transaction under a lock every capped claim
    /// takes, so two instances cannot both take the last slot. The default — a store one
    /// instance uses, whose own slots already bound what runs — ignores `cap`.
    async fn claim(
        &self,
        id: TaskId,
        change: Change,
        cap: Option<u32>,
    ) -> Result<Claim, StoreError> {
        let _ = cap;
        Ok(match self.update(id, change).await? {
            Some(task) => Claim::Claimed(Box::new(task)),
            None => Claim::Declined,
        })
    }

    async fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError>;

    /// A full id, a unique id prefix (hex, dashes optional), or a unique exact title.
    async fn resolve(&self, reference: &str) -> Result<Resolved, StoreError>;

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError>;

    /// How many tasks match `filter` per status (its statuses and limit aside), in one grouped
    /// read; statuses with no task are left out.
    async fn count_by_status(
        &self,
        filter: &TaskFilter,
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError>;

    /// How many tasks are in each of `statuses` (the others left out, as are statuses with no
    /// task), in one grouped read over those statuses only: what the metrics show, cheap however
    /// many finished tasks are kept.
    async fn count_in_states(
        &self,
        statuses: &[TaskStatus],
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        let mut counts = self.count_by_status(&TaskFilter::default()).await?;
        counts.retain(|(status, _)| statuses.contains(status));
        Ok(counts)
    }

    /// The figures the caps on task creation need.
    async fn counts(&self, query: &CountQuery<'_>) -> Result<TaskCounts, StoreError>;

    /// Appends usage records on their own (most ride on a checkpoint: [`TaskWrite::Usage`]).
    async fn record_usage(&self, records: &[UsageRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        self.write(&[TaskWrite::Usage(records)]).await.map(drop)
    }

    /// The sums of the usage records `query` selects: one per group, ordered by key, or one
    /// over everything (always one, zero when nothing matched) when it groups by nothing.
    async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageTotals>, StoreError>;

    /// Every task in an active status, oldest first (for recovery).
    async fn list_active(&self) -> Result<Vec<TaskRecord>, StoreError>;

    /// The task's agent history in order, from `from_seq` on.
    async fn history(&self, id: TaskId, from_seq: u64) -> Result<Vec<HistoryEntry>, StoreError>;

    /// Append to the agent history without touching the task (injections, notes).
    async fn append_history(
        &self,
        id: TaskId,
        entries: &[NewHistoryEntry],
    ) -> Result<(), StoreError>;

    /// Whether several instances may share this store (leases, fencing and notices are live).
    fn shared(&self) -> bool {
        false
    }

    /// Renews the leases of the running tasks this instance holds; returns each with the stop
    /// request left on it (a notice may have been missed). The holder adopts those it no longer
    /// runs (a run that ended without a write: the database went away under it). Nothing on a
    /// store that is not shared.
    async fn renew_leases(&self) -> Result<Vec<(TaskId, Option<StopRequest>)>, StoreError> {
        Ok(Vec::new())
    }

    /// Running tasks whose lease has expired (or that have none), with the stop request left on
    /// each: their instance is gone, and another may adopt them. A save by the adopter takes
    /// the lease (the fence lets it).
    async fn expired_leases(&self) -> Result<Vec<(TaskId, Option<StopRequest>)>, StoreError> {
        Ok(Vec::new())
    }

    /// Releases the leases `instance` holds, known dead: the process that held this data
    /// directory before (its lock is ours now). Its running tasks are then adopted at once
    /// instead of when their leases expire. How many were released.
    async fn release_leases(&self, instance: &str) -> Result<u64, StoreError> {
        let _ = instance;
        Ok(0)
    }

    /// Leaves `request` on task `id` for the instance running it, and wakes that instance;
    /// `false` when the task is not running (nothing written: stop it directly).
    async fn request_stop(&self, id: TaskId, request: &StopRequest) -> Result<bool, StoreError> {
        let _ = (id, request);
        Ok(false)
    }

    /// The wake-ups other instances' changes send; `None` on a store that is not shared.
    async fn notices(&self) -> Result<Option<Notices>, StoreError> {
        Ok(None)
    }
}
