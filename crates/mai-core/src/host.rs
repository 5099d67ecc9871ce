//! The host capability (docs/design.md, "Hosts and bridges"): where messages go and where chat
//! context comes from.
//!
//! The engine talks to every host (the embedded one, a MaiBot bridge, a test double) through this
//! trait only. Methods the host cannot serve return empty answers, never made-up data.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{PersonId, StreamId};

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

/// Whether a stream is a group chat or a private chat, and with whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChatTarget {
    Group { group_id: String },
    Private { user_id: String },
}

/// What the host knows about one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    pub stream_id: StreamId,
    pub platform: String,
    pub target: ChatTarget,
    /// Group name or the person's display name.
    pub name: String,
}

/// A person the host knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    pub name: String,
    pub aliases: Vec<String>,
    /// `(platform, user_id)` pairs.
    pub accounts: Vec<(String, String)>,
    /// Free-form facts the host keeps about them.
    pub notes: Vec<String>,
}

/// A `search_users` request: any keyword may match (OR); filler characters are tolerated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserQuery {
    pub keywords: Vec<String>,
    /// `group` or `private`; `None` = both.
    pub chat_type: Option<String>,
    pub platform: Option<String>,
    pub limit: usize,
}

/// One `search_users` hit: a stream that can be targeted by `send_message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserHit {
    pub stream: StreamInfo,
    /// Why it matched (the name or alias that matched).
    pub matched: String,
}

/// How `search_memory` searches (docs/host.md); each mode is documented by the host.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MemoryMode {
    /// Full-text match, best first.
    Search,
    /// Messages in a time window, oldest first.
    Time,
    /// Full-text match ranked together with recency.
    #[default]
    Hybrid,
    /// The conversation episodes (bursts of messages) around the matches.
    Episode,
    /// Counts per person and per day of the matches, not the messages.
    Aggregate,
}

/// A `search_memory` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryQuery {
    pub query: String,
    pub stream: Option<StreamId>,
    pub mode: MemoryMode,
    pub person_name: Option<String>,
    pub time_start: Option<DateTime<Utc>>,
    pub time_end: Option<DateTime<Utc>>,
    pub limit: usize,
}

/// A host plugin API that may be exposed as a `call_*` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginApi {
    /// e.g. `weather.today`.
    pub name: String,
    pub description: String,
    /// The plugin that provides it; mai-agent's own endpoints are never exposed.
    pub plugin: String,
}

/// The host capabilities the engine and the tools use. Methods a host cannot serve keep their
/// default: an empty answer, never made-up data.
#[async_trait]
pub trait Host: Send + Sync + 'static {
    /// Sends `text` to a stream as the bot.
    async fn send_text(&self, stream: &StreamId, text: &str) -> Result<Delivery, HostError>;

    /// Sends one part of a reply or a question. `part_id` names the part stably — the same part
    /// of the same reply has the same id after a retry or a restart — so a host that remembers
    /// the ids it delivered can drop a resend. A host that cannot remember keeps the default,
    /// which ignores the id.
    async fn send_part(
        &self,
        stream: &StreamId,
        text: &str,
        _part_id: &str,
    ) -> Result<Delivery, HostError> {
        self.send_text(stream, text).await
    }

    /// Sends the first part of a reply or a question meant for `to` in a group stream, so the
    /// group sees whom it answers. A host whose channel can mention people (the embedded host's
    /// OneBot channel: an `at` segment before the text) does; the default sends the part as
    /// [`Host::send_part`] does.
    async fn send_part_to(
        &self,
        stream: &StreamId,
        _to: &PersonId,
        text: &str,
        part_id: &str,
    ) -> Result<Delivery, HostError> {
        self.send_part(stream, text, part_id).await
    }

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

    /// What the host knows about a stream.
    async fn stream_info(&self, _stream: &StreamId) -> Result<Option<StreamInfo>, HostError> {
        Ok(None)
    }

    /// Whether `person` belongs to `stream`: a private chat belongs to exactly its person; a group
    /// to the people the host has seen in it (they wrote there, or are known as members). The
    /// answer gates what a non-admin task may read and send to, so a host that cannot tell keeps
    /// the default: no.
    async fn is_member(&self, _person: &PersonId, _stream: &StreamId) -> Result<bool, HostError> {
        Ok(false)
    }

    /// The name `person` goes by on their platform (their latest display name), if known.
    async fn display_name(&self, _person: &PersonId) -> Result<Option<String>, HostError> {
        Ok(None)
    }

    /// Finds (or opens) the stream of a group or a private chat on a platform.
    async fn open_stream(
        &self,
        platform: &str,
        target: &ChatTarget,
    ) -> Result<StreamId, HostError> {
        Err(HostError::new(
            format!("open a {platform} chat for {target:?}"),
            "this host cannot open chats",
        ))
    }

    /// Known streams, most recently active first.
    async fn list_streams(&self, _limit: usize) -> Result<Vec<StreamInfo>, HostError> {
        Ok(Vec::new())
    }

    /// A person by exact name or alias.
    async fn find_person(&self, _name: &str) -> Result<Option<Person>, HostError> {
        Ok(None)
    }

    /// People and groups matching any keyword, as targets for `send_message`.
    async fn search_users(&self, _query: &UserQuery) -> Result<Vec<UserHit>, HostError> {
        Ok(Vec::new())
    }

    /// Long-term memory / knowledge search. The result shape depends on the mode.
    async fn search_memory(&self, _query: &MemoryQuery) -> Result<serde_json::Value, HostError> {
        Ok(serde_json::Value::Array(Vec::new()))
    }

    /// The bot's current talk-frequency value in a stream, if the host has one.
    async fn talk_frequency(&self, _stream: &StreamId) -> Result<Option<f64>, HostError> {
        Ok(None)
    }

    /// Plugin APIs the host offers.
    async fn list_apis(&self) -> Result<Vec<PluginApi>, HostError> {
        Ok(Vec::new())
    }

    /// Calls a plugin API.
    async fn call_api(
        &self,
        name: &str,
        _args: serde_json::Value,
    ) -> Result<serde_json::Value, HostError> {
        Err(HostError::new(
            format!("call plugin API {name}"),
            "this host has no plugin APIs",
        ))
    }
}
