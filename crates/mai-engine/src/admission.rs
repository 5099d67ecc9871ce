//! The caps of `[limits]` on task creation: how deep sub-tasks nest, how many children one task
//! makes, how many unfinished and recurring tasks one requester and one stream may have.
//!
//! Owns the check. It holds under concurrency because the final count is taken by the store in
//! the transaction that inserts (`TaskStore::insert_admitted`): the store's one writer runs
//! creations one after another, so 32 `create_subtask` calls of one round cannot all pass a
//! count of 0, and creations in other streams never wait for one another here.
//! Reply tasks do not come through here: they deliver a result and are never refused.
//! Must not: decide roles or ownership (the facade does), or write anything but the admitted
//! task.

use mai_core::config::LimitsConfig;
use mai_core::store::{CountQuery, TaskCounts};
use mai_core::task::{TaskRecord, Trigger};

use crate::deps::Deps;
use crate::error::EngineError;

fn count_query(task: &TaskRecord) -> CountQuery<'_> {
    CountQuery {
        requester: task.requester(),
        stream: &task.stream_id,
        created_by: task.metadata.parent_task_id,
        recurring: matches!(task.trigger, Trigger::Cron { .. }),
    }
}

/// Refuses `task` when it would exceed a cap now (an early answer, e.g. before a model call
/// names the task; [`insert`] checks again when it writes).
pub(crate) async fn check(engine: &Deps, task: &TaskRecord) -> Result<(), EngineError> {
    let limits = engine.config.config().limits.clone();
    let counts = engine.store.counts(&count_query(task)).await?;
    refuse_over_limits(&limits, task, &counts)
}

/// Inserts `task` unless it would exceed a cap, counted in the inserting transaction.
pub(crate) async fn insert(engine: &Deps, task: &TaskRecord) -> Result<(), EngineError> {
    let limits = engine.config.config().limits.clone();
    let candidate = task.clone();
    let admit: mai_core::store::Admit =
        Box::new(
            move |counts| match over_limits(&limits, &candidate, counts) {
                Some(reason) => Err(reason),
                None => Ok(()),
            },
        );
    engine
        .store
        .insert_admitted(task, &count_query(task), admit)
        .await?
        .map_err(EngineError::LimitReached)
}

/// The first cap `task` would exceed, as an error naming the limit, the figure and what to do.
pub(crate) fn refuse_over_limits(
    limits: &LimitsConfig,
    task: &TaskRecord,
    counts: &TaskCounts,
) -> Result<(), EngineError> {
    match over_limits(limits, task, counts) {
        Some(reason) => Err(EngineError::LimitReached(reason)),
        None => Ok(()),
    }
}

/// What [`refuse_over_limits`] says, or `None` when `task` is within every cap.
fn over_limits(limits: &LimitsConfig, task: &TaskRecord, counts: &TaskCounts) -> Option<String> {
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
            return Some(format!(
                "[limits] {key} = {max}: {what} (an operator can raise {key} in [limits])"
            ));
        }
    }
    None
}
