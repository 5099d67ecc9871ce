//! The host capability (SYSTEM.md §9): where messages go and where chat context comes from.
//!
//! The engine talks to every host (the embedded one, a MaiBot bridge, a test double) through this
//! trait only. Methods the host cannot serve return empty answers, never made-up data.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::StreamId;

/// A host call that failed, with what was being done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("host could not {action}: {detail}")]
pub struct HostError {
    pub action: String,
    pub detail: String,
}

impl HostError {
    pub fn new(action: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        HostError {
            action: action.into(),
            detail: detail.to_string(),
        }
    }
}

/// What a send reported. A host that answers without an error but did not deliver says
/// `Rejected`; the reply path counts that as a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Sent,
    Rejected(String),
}

/// One stored chat message, for context (polish, fetch_history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatLine {
    pub sender: String,
    pub text: String,
    pub at: DateTime<Utc>,
}

/// A slang term of a stream and what it means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jargon {
    pub term: String,
    pub meaning: String,
}

/// How the bot speaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Persona {
    pub bot_name: String,
    pub personality: String,
    pub reply_style: String,
}

impl Default for Persona {
    fn default() -> Self {
        Persona {
            bot_name: "mai".into(),
            personality: "helpful, friendly and concise".into(),
            reply_style: "short chat messages, no markdown headings".into(),
        }
    }
}

/// The host capabilities the engine uses.
#[async_trait]
pub trait Host: Send + Sync + 'static {
    /// Sends `text` to a stream as the bot.
    async fn send_text(&self, stream: &StreamId, text: &str) -> Result<Delivery, HostError>;

    /// Appends a note to the stream's context that the planner sees and people do not.
    async fn append_context(&self, stream: &StreamId, note: &str) -> Result<(), HostError>;

    /// The latest `limit` messages of a stream, oldest first.
    async fn recent_messages(
        &self,
        stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ChatLine>, HostError>;

    /// Slang of the stream that occurs in `text`.
    async fn jargon(&self, stream: &StreamId, text: &str) -> Result<Vec<Jargon>, HostError>;

    /// How the bot speaks.
    async fn persona(&self) -> Persona;
}
