//! A running task that reaches a daily budget (see `admission.rs`): at the round boundary where
//! the check fails — its checkpoint already written — it is paused until the budget resets, or
//! failed (`[limits.budgets] on_exceeded`), and its chat is told which budget and when it
//! resets. A paused one is resumed by a timer at the reset, at start-up when the reset passed,
//! and when `[limits.budgets]` is reloaded (if it is still over, it pauses again at its next
//! round boundary).
//!
//! Must not: decide whether a budget is reached (the gate in `admission.rs` does).

use mai_core::config::BudgetAction;
use mai_core::store::TaskFilter;
use mai_core::task::{PauseCause, TaskRecord, TaskStatus};

use crate::admission::BudgetHit;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::reply::part_id;
use crate::runner::paused_by_budget;

const ACTOR: &str = "budget";

impl Engine {
    /// Ends a run that used up a budget: paused until it resets, or failed, as configured.
    pub(crate) async fn stop_for_budget(
        &self,
        mut task: TaskRecord,
        hit: BudgetHit,
    ) -> Result<(), EngineError> {
        let action = self.config.config().limits.budgets.on_exceeded;
        if action == BudgetAction::Fail {
            return self.fail_task(task, &hit.message).await;
        }
        task.metadata.pause_cause = Some(PauseCause::Budget);
        task.metadata.budget_resets_at = Some(hit.resets_at);
        task.transition(TaskStatus::Paused, ACTOR, &hit.message, self.now())?;
        if !self.save_status(&task, TaskStatus::Running).await? {
            return Ok(());
        }
        self.schedule.arm_due(task.id, hit.resets_at);
        let notice = format!(
            "Task \"{}\" ({}) is paused: {}. It resumes by itself then.",
            task.title,
            task.id.short(),
            hit.message
        );
        let key = format!("{}:budget:{}", task.id, hit.resets_at.timestamp());
        let stream = task.reply_stream().clone();
        for (index, part) in self.notice_parts(&notice).iter().enumerate() {
            if let Err(error) = self
                .send_with_retries(task.id, &stream, part, &part_id(&key, index), None)
                .await
            {
                tracing::warn!(task = %task.id, %error, "could not send the budget notice");
                break;
            }
        }
        Ok(())
    }

    /// Arms the resume of a task paused by a budget (recovery): at its reset, or now.
    pub(crate) fn arm_budget_resume(&self, task: &TaskRecord) {
        let at = task.metadata.budget_resets_at.unwrap_or_else(|| self.now());
        self.schedule.arm_due(task.id, at);
    }

    /// `[limits.budgets]` changed: every task paused by a budget is resumed now; one still over
    /// budget pauses again at its next round boundary.
    pub(crate) async fn budgets_changed(&self) -> Result<(), EngineError> {
        let filter = TaskFilter {
            statuses: vec![TaskStatus::Paused],
            ..TaskFilter::default()
        };
        let now = self.now();
        for task in self.store.list(&filter).await? {
            if paused_by_budget(&task) {
                self.schedule.arm_due(task.id, now);
            }
        }
        Ok(())
    }
}
