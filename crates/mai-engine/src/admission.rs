//! The caps of `[limits]` on task creation: how deep sub-tasks nest, how many children one task
//! makes, how many unfinished and recurring tasks one requester and one stream may have.
//!
//! Owns the check and the lock that makes it hold under concurrency: creations that count
//! against the same stream or requester take their locks (in a fixed order) between the final
//! count and the insert, so 32 `create_subtask` calls of one round cannot all pass a count of 0.
//! Reply tasks do not come through here: they deliver a result and are never refused.
//! Must not: decide roles or ownership (the facade does), or write anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use mai_core::config::LimitsConfig;
use mai_core::store::{CountQuery, TaskCounts};
use mai_core::task::{TaskRecord, Trigger};

use crate::engine::{Engine, lock};
use crate::error::EngineError;

/// The admission locks, one per stream and per requester currently creating.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held from the final count to the insert.
pub(crate) struct Admitted {
    _guards: Vec<OwnedMutexGuard<()>>,
}

impl Admission {
    /// Takes the locks of `task`'s stream and requester, in a fixed order (no deadlock).
    pub(crate) async fn enter(&self, task: &TaskRecord) -> Admitted {
        let mut keys = vec![format!("stream {}", task.stream_id)];
        if let Some(person) = task.requester() {
            keys.push(format!("person {person}"));
        }
        keys.sort();
        let mut guards = Vec::with_capacity(keys.len());
        for key in keys {
            let slot = {
                let mut slots = lock(&self.slots);
                // Slots nobody holds or waits for are dropped, so the map stays small.
                slots.retain(|_, slot| Arc::strong_count(slot) > 1);
                slots.entry(key).or_default().clone()
            };
            guards.push(slot.lock_owned().await);
        }
        Admitted { _guards: guards }
    }

    /// Refuses `task` when it would exceed a cap of the live `[limits]`.
    pub(crate) async fn check(
        &self,
        engine: &Engine,
        task: &TaskRecord,
    ) -> Result<(), EngineError> {
        let limits = engine.config.config().limits.clone();
        let counts = engine
            .store
            .counts(&CountQuery {
                requester: task.requester(),
                stream: &task.stream_id,
                created_by: task.metadata.parent_task_id,
            })
            .await?;
        refuse_over_limits(&limits, task, &counts)
    }
}

/// The first cap `task` would exceed, as an error naming the limit, the figure and what to do.
pub(crate) fn refuse_over_limits(
    limits: &LimitsConfig,
    task: &TaskRecord,
    counts: &TaskCounts,
) -> Result<(), EngineError> {
    let recurring = matches!(task.trigger, Trigger::Cron { .. });
    let sub_task = task.metadata.parent_task_id.is_some();
    let who = task
        .requester()
        .map(ToString::to_string)
        .unwrap_or_else(|| "this requester".into());
    let caps: [(bool, u64, u32, &str, String); 6] = [
        (
            sub_task,
            u64::from(task.metadata.depth),
            limits.max_depth,
            "max_depth",
            "sub-tasks may nest this deep; do the work in this task instead".into(),
        ),
        (
            sub_task,
            counts.children + 1,
            limits.max_children,
            "max_children",
            "this task may create this many sub-tasks; do the rest in this task".into(),
        ),
        (
            task.requester().is_some(),
            counts.unfinished_by_requester + 1,
            limits.max_active_per_requester,
            "max_active_per_requester",
            format!(
                "{who} may have this many unfinished tasks; wait for one to finish or cancel one"
            ),
        ),
        (
            true,
            counts.unfinished_in_stream + 1,
            limits.max_active_per_stream,
            "max_active_per_stream",
            "this chat may have this many unfinished tasks; wait for one to finish or cancel one"
                .into(),
        ),
        (
            recurring && task.requester().is_some(),
            counts.recurring_by_requester + 1,
            limits.max_cron_per_requester,
            "max_cron_per_requester",
            format!("{who} may have this many recurring tasks; cancel one first"),
        ),
        (
            recurring,
            counts.recurring_in_stream + 1,
            limits.max_cron_per_stream,
            "max_cron_per_stream",
            "this chat may have this many recurring tasks; cancel one first".into(),
        ),
    ];
    for (applies, would_be, max, key, what) in caps {
        if applies && would_be > u64::from(max) {
            return Err(EngineError::LimitReached(format!(
                "[limits] {key} = {max}: {what} (an operator can raise {key} in [limits])"
            )));
        }
    }
    Ok(())
}
