//! The run vocabulary: how a running task is asked to stop ([`StopReason`], [`RunControl`]) and
//! how a run segment ended ([`RunEnd`]). A leaf: it knows nothing of the engine, the store or
//! the loop, so every part that starts, stops or finishes a run can share these words.

use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use mai_core::store::NewHistoryEntry;
use mai_core::task::TaskRecord;

/// Locks a mutex of the engine's in-memory state.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Engine maps are updated with single inserts/removes that cannot panic half-way, so a
    // poisoned lock still guards consistent data.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why a running task is asked to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StopReason {
    Cancel {
        actor: String,
    },
    Pause {
        actor: String,
    },
    Shutdown,
    Timeout {
        minutes: u32,
    },
    /// The shared database is out of reach: a write failed for it, or this instance could not
    /// renew its leases for nearly a lease's length (another instance may adopt the task soon).
    /// The run ends without writing anything; the task stays `running` in the store and resumes
    /// from its last checkpoint wherever it is adopted once the database answers again.
    StoreLost,
}

/// The handle to one running task: how to ask it to stop, and why.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunControl {
    pub token: CancellationToken,
    reason: Arc<Mutex<Option<StopReason>>>,
    /// Running time is added to the record up to this moment (set when the run starts).
    accounted_until: Arc<Mutex<Option<DateTime<Utc>>>>,
}

impl RunControl {
    /// A control for a run that starts at `started`.
    pub(crate) fn starting_at(started: DateTime<Utc>) -> Self {
        let control = RunControl::default();
        *lock(&control.accounted_until) = Some(started);
        control
    }

    /// Adds the running time since it was last added to `task.metadata.runtime_secs`, so a
    /// write that ends the running (a question, the run's end) carries it.
    pub(crate) fn add_runtime(&self, task: &mut TaskRecord, now: DateTime<Utc>) {
        let mut since = lock(&self.accounted_until);
        if let Some(from) = since.replace(now) {
            task.metadata.runtime_secs += (now - from).num_seconds().max(0) as u64;
        }
    }

    /// Asks the task to stop; the first reason wins.
    pub(crate) fn stop(&self, reason: StopReason) {
        let mut current = lock(&self.reason);
        if current.is_none() {
            *current = Some(reason);
        }
        drop(current);
        self.token.cancel();
    }

    pub(crate) fn reason(&self) -> Option<StopReason> {
        lock(&self.reason).clone()
    }
}

/// How a run segment ended.
#[derive(Debug)]
pub(crate) enum RunEnd {
    /// An agent's final answer, with the conversation's messages not checkpointed yet (the
    /// answer itself): they are written with the completion. `parts` are its reply's final
    /// parts when the run prepared them (polished and split), so the write that creates the
    /// reply fixes them too.
    Answer {
        text: String,
        history: Vec<NewHistoryEntry>,
        parts: Option<Vec<String>>,
    },
    /// An instant task delivered its text.
    Delivered,
    /// The task asked its owner and is now `waiting_input` (already persisted).
    Waiting,
    Stopped(StopReason),
    Failed(String),
    /// A daily budget was used up at a round boundary (the checkpoint is written).
    OverBudget(crate::admission::BudgetHit),
}
