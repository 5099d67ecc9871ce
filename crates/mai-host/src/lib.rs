//! The embedded host (SYSTEM.md §9): mai-agent's own chat store in SQLite — streams, messages,
//! people, jargon, knowledge notes, talk frequency and invisible context notes — with full-text
//! memory search, and the registry of outbound channels `send_text` hands messages to.
//!
//! [`EmbeddedHost`] implements [`mai_core::host::Host`]. Channels (console, HTTP ingestion,
//! OneBot) feed it through [`EmbeddedHost::ingest_message`] and deliver through a registered
//! [`ChannelSender`]; the OneBot v11 channel ([`OneBotChannel`]) lives here. The five `search_memory` modes are defined in [`memory`] and docs/host.md.
//!
//! Its tables are prefixed `host_` and its migrations are recorded in their own table, so it can
//! share the task database file (`<data_dir>/mai-agent.db`) or use a file of its own.

mod channels;
mod embedded;
mod error;
mod ingest;
pub mod memory;
mod notes;
mod onebot;
mod people;
mod schema;
mod streams;
mod text_query;
mod user_search;

pub use channels::ChannelSender;
pub use embedded::{EmbeddedConfig, EmbeddedHost};
pub use error::OpenError;
pub use ingest::{IncomingMessage, IngestedMessage};
pub use notes::ContextNote;
pub use onebot::{OneBotChannel, OneBotHandle, OneBotState, OneBotStatus};
pub use people::NewPerson;
pub use streams::stream_id_for;
