//! What each planner session was last shown on its board, bounded: past
//! [`BoardMemory::CAPACITY`] sessions the least recently served is forgotten (it gets the
//! board's introduction again if it ever comes back). A leaf: memory only, no engine.

use std::collections::{BTreeMap, HashMap};

use mai_core::ids::StreamId;

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
