//! The planner board (see docs/design.md, "The planner"): the context block a host asks for before each planner
//! request. Once per session it carries a short introduction of what background sub-agents can
//! do; whenever it changed, the list of this stream's tasks waiting for the user (oldest first,
//! at most `[planner_board] max_waiting`, each with its 8-character id). Nothing else: running
//! and finished tasks are pulled with the planner tools.
//!
//! What each session was shown is remembered in a bounded `BoardMemory` (`board_memory.rs`).

use serde_json::json;

use mai_core::ids::StreamId;
use mai_core::store::TaskFilter;
use mai_core::task::TaskStatus;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::prompts::PromptName;

impl Engine {
    /// The board for `stream` in the host's `session`, or `None` when there is nothing new to
    /// say (the introduction was given and the waiting list is unchanged) or the board is off.
    pub async fn planner_board(
        &self,
        stream: &StreamId,
        session: &str,
    ) -> Result<Option<String>, EngineError> {
        let config = self.config.config();
        if !config.planner_board.enabled {
            return Ok(None);
        }
        let filter = TaskFilter {
            stream_id: Some(stream.clone()),
            statuses: vec![TaskStatus::WaitingInput],
            ..TaskFilter::default()
        };
        let mut waiting: Vec<_> = self
            .store
            .list(&filter)
            .await?
            .into_iter()
            .filter_map(|task| {
                let question = task.metadata.waiting.clone()?;
                Some((
                    question.asked_at,
                    task.id.short(),
                    task.title,
                    question.question,
                ))
            })
            .collect();
        waiting.sort_by_key(|(asked_at, ..)| *asked_at);
        waiting.truncate(config.planner_board.max_waiting as usize);
        let tasks: Vec<_> = waiting
            .into_iter()
            .map(|(asked_at, short_id, title, question)| {
                json!({
                    "short_id": short_id,
                    "title": title,
                    "question": question,
                    "waiting_since": asked_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                })
            })
            .collect();
        let list = self
            .prompts
            .render(PromptName::PlannerBoardWaiting, &json!({"tasks": tasks}))
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        let key = (stream.clone(), session.to_owned());
        let previous = self.board_shown(key, list.clone());
        let mut parts = Vec::new();
        if previous.is_none() {
            parts.push(
                self.prompts
                    .render(PromptName::PlannerBoardIntro, &json!({}))
                    .map_err(|e| EngineError::Internal(e.to_string()))?,
            );
        }
        if previous.as_deref() != Some(list.as_str()) {
            parts.push(list);
        }
        Ok((!parts.is_empty()).then(|| parts.join("\n\n")))
    }
}
