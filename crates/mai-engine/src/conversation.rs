//! Rebuilding an agent conversation from its checkpointed history, so a task continues where it
//! stopped (after a restart, a pause, or an answered question) instead of starting over.
//!
//! History holds the conversation messages in order, plus injected instructions at the position
//! they arrived. An injection is applied before the next model call, so on rebuild it is placed
//! just before the next assistant message (or left pending at the end), which is exactly where
//! the live loop put it.

use mai_core::model::{ChatMessage, MessageRole};
use mai_core::store::{HistoryEntry, HistoryKind};

/// A conversation as far as it was checkpointed.
#[derive(Debug, Default)]
pub(crate) struct Conversation {
    pub messages: Vec<ChatMessage>,
    /// Injections received after the last model call; applied before the next one.
    pub pending_injections: Vec<ChatMessage>,
    /// The highest history sequence number seen.
    pub last_seq: Option<u64>,
    /// The tail of `messages` not yet checkpointed: a model reply that called tools waits for
    /// its first result, so a tool round costs one store write, not two.
    pub unsaved: Vec<ChatMessage>,
}

/// Where the conversation stands.
#[derive(Debug, PartialEq)]
pub(crate) enum Tail {
    /// Nothing yet: the first round has not been checkpointed.
    Empty,
    /// The model spoke last without calling tools: this is the final answer.
    Answered(String),
    /// The last assistant message called tools; these calls have no result yet (in call order).
    Unfinished(Vec<mai_core::model::ToolCall>),
    /// Every call has its result: the next step is a model call.
    ReadyForModel,
}

impl Conversation {
    pub(crate) fn rebuild(entries: &[HistoryEntry]) -> Result<Conversation, String> {
        let mut conversation = Conversation::default();
        for entry in entries {
            conversation.last_seq = Some(entry.seq);
            let message = || {
                serde_json::from_value::<ChatMessage>(entry.payload.clone())
                    .map_err(|e| format!("history entry {} is not a chat message: {e}", entry.seq))
            };
            match entry.kind {
                HistoryKind::Note => {}
                HistoryKind::Injection => conversation.pending_injections.push(message()?),
                HistoryKind::Message => {
                    let message = message()?;
                    if message.role == MessageRole::Assistant {
                        conversation.apply_injections();
                    }
                    conversation.messages.push(message);
                }
            }
        }
        Ok(conversation)
    }

    /// Adds a message that will be checkpointed with the next one.
    pub(crate) fn defer(&mut self, message: ChatMessage) {
        self.unsaved.push(message.clone());
        self.messages.push(message);
    }

    /// Moves pending injections into the conversation (before a model call).
    pub(crate) fn apply_injections(&mut self) -> usize {
        let count = self.pending_injections.len();
        self.messages.append(&mut self.pending_injections);
        count
    }

    pub(crate) fn tail(&self) -> Tail {
        let Some(last_assistant) = self
            .messages
            .iter()
            .rposition(|m| m.role == MessageRole::Assistant)
        else {
            return if self.messages.is_empty() {
                Tail::Empty
            } else {
                Tail::ReadyForModel
            };
        };
        let assistant = &self.messages[last_assistant];
        if assistant.tool_calls.is_empty() {
            return if self.pending_injections.is_empty()
                && last_assistant == self.messages.len() - 1
            {
                Tail::Answered(assistant.content.clone())
            } else {
                Tail::ReadyForModel
            };
        }
        let answered: Vec<&str> = self.messages[last_assistant + 1..]
            .iter()
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        let missing: Vec<_> = assistant
            .tool_calls
            .iter()
            .filter(|call| !answered.contains(&call.id.as_str()))
            .cloned()
            .collect();
        if missing.is_empty() {
            Tail::ReadyForModel
        } else {
            Tail::Unfinished(missing)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use mai_core::model::ToolCall;
    use serde_json::json;

    fn entries(items: Vec<(HistoryKind, ChatMessage)>) -> Vec<HistoryEntry> {
        items
            .into_iter()
            .enumerate()
            .map(|(seq, (kind, message))| HistoryEntry {
                seq: seq as u64,
                round: 0,
                kind,
                payload: serde_json::to_value(message).unwrap(),
                at: Utc::now(),
            })
            .collect()
    }

    #[test]
    fn injections_land_before_the_next_model_reply() {
        use HistoryKind::*;
        let call = ToolCall::new("c1", "read", json!({}));
        let history = entries(vec![
            (Message, ChatMessage::system("sys")),
            (Message, ChatMessage::user("intent")),
            (
                Message,
                ChatMessage::assistant_with_tool_calls("", vec![call.clone()]),
            ),
            (Injection, ChatMessage::user("also check /tmp")),
            (Message, ChatMessage::tool_result("c1", "ok")),
            (Message, ChatMessage::assistant("done")),
            (Injection, ChatMessage::user("one more thing")),
        ]);
        let conversation = Conversation::rebuild(&history).unwrap();
        let texts: Vec<&str> = conversation
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(
            texts,
            ["sys", "intent", "", "ok", "also check /tmp", "done"]
        );
        assert_eq!(conversation.pending_injections.len(), 1);
        assert_eq!(
            conversation.tail(),
            Tail::ReadyForModel,
            "a pending injection needs a model call"
        );
        assert_eq!(conversation.last_seq, Some(6));
    }

    #[test]
    fn tail_reports_unfinished_calls_in_order_and_final_answers() {
        use HistoryKind::*;
        let calls = vec![
            ToolCall::new("a", "x", json!({})),
            ToolCall::new("b", "y", json!({})),
            ToolCall::new("c", "z", json!({})),
        ];
        let mut history = vec![
            (Message, ChatMessage::user("go")),
            (
                Message,
                ChatMessage::assistant_with_tool_calls("", calls.clone()),
            ),
            (Message, ChatMessage::tool_result("b", "done")),
        ];
        let conversation = Conversation::rebuild(&entries(history.clone())).unwrap();
        assert_eq!(
            conversation.tail(),
            Tail::Unfinished(vec![calls[0].clone(), calls[2].clone()])
        );
        history.push((Message, ChatMessage::tool_result("a", "1")));
        history.push((Message, ChatMessage::tool_result("c", "2")));
        let conversation = Conversation::rebuild(&entries(history.clone())).unwrap();
        assert_eq!(conversation.tail(), Tail::ReadyForModel);
        history.push((Message, ChatMessage::assistant("all good")));
        let conversation = Conversation::rebuild(&entries(history)).unwrap();
        assert_eq!(conversation.tail(), Tail::Answered("all good".into()));
        assert_eq!(Conversation::rebuild(&[]).unwrap().tail(), Tail::Empty);
    }
}
