//! The planner board (see docs/design.md, "The planner"): the context block a host asks for before each planner
//! request. Once per session it carries a short introduction of what background sub-agents can
//! do; whenever it changed, the list of this stream's tasks waiting for the user (oldest first,
//! at most `[planner_board] max_waiting`, each with its 8-character id). Nothing else: running
//! and finished tasks are pulled with the planner tools.
//!
//! What each session was shown is remembered in [`BoardMemory`], bounded: past
//! [`BoardMemory::CAPACITY`] sessions the least recently served is forgotten (it gets the
//! introduction again if it ever comes back).

use std::collections::{BTreeMap, HashMap};

use serde_json::json;

use mai_core::ids::StreamId;
use mai_core::store::TaskFilter;
use mai_core::task::TaskStatus;

use crate::engine::{Engine, lock};
use crate::error::EngineError;
use crate::prompts::PromptName;

type Session = (StreamId, String);

/// What a session was last shown, per (stream, session); at most `capacity` sessions, the least
/// recently served dropped first.
#[derive(Debug)]
pub(crate) struct BoardMemory {
    /// The board last shown and when (a counter, not a time) it was served.
    shown: HashMap<Session, (String, u64)>,
    /// The sessions by when they were last served, oldest first.
    by_use: BTreeMap<u64, Session>,
    next_use: u64,
    capacity: usize,
}

impl Default for BoardMemory {
    fn default() -> Self {
        BoardMemory::with_capacity(BoardMemory::CAPACITY)
    }
}

impl BoardMemory {
    /// How many sessions are remembered by default: far more than a host keeps open at once.
    pub(crate) const CAPACITY: usize = 10_000;

    pub(crate) fn with_capacity(capacity: usize) -> Self {
        BoardMemory {
            shown: HashMap::new(),
            by_use: BTreeMap::new(),
            next_use: 0,
            capacity: capacity.max(1),
        }
    }

    /// Remembers that `session` was shown `board`; returns what it was shown before.
    pub(crate) fn remember(&mut self, session: Session, board: String) -> Option<String> {
        let used = self.next_use;
        self.next_use += 1;
        let previous = self.shown.insert(session.clone(), (board, used));
        if let Some((_, last_used)) = &previous {
            self.by_use.remove(last_used);
        }
        self.by_use.insert(used, session);
        while self.shown.len() > self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.shown.remove(&oldest);
        }
        previous.map(|(board, _)| board)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shown.len()
    }
}

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
        let previous = lock(&self.board).remember(key, list.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn session(n: usize) -> Session {
        (
            StreamId::new(format!("s{n}")).unwrap(),
            "session".to_owned(),
        )
    }

    #[test]
    fn the_board_memory_never_holds_more_sessions_than_its_capacity() {
        let mut memory = BoardMemory::with_capacity(3);
        for n in 0..100 {
            memory.remember(session(n), format!("board {n}"));
            assert!(memory.len() <= 3);
        }
        assert_eq!(memory.len(), 3);
        assert_eq!(memory.shown.len(), memory.by_use.len());
    }

    #[test]
    fn the_least_recently_served_session_is_forgotten_first() {
        let mut memory = BoardMemory::with_capacity(2);
        memory.remember(session(1), "one".into());
        memory.remember(session(2), "two".into());
        // Session 1 is served again: session 2 is now the oldest.
        assert_eq!(
            memory.remember(session(1), "one'".into()),
            Some("one".into())
        );
        memory.remember(session(3), "three".into());
        assert_eq!(memory.remember(session(2), "two".into()), None);
        assert_eq!(
            memory.remember(session(3), "three".into()),
            Some("three".into())
        );
    }
}
