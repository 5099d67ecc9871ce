//! The embedded host (docs/host.md): mai-agent's own chat store in SQLite or PostgreSQL — streams, messages,
//! people, jargon, knowledge notes, talk frequency and invisible context notes — with full-text
//! memory search, and the registry of outbound channels `send_text` hands messages to.
//!
//! [`EmbeddedHost`] implements [`mai_core::host::Host`]. Channels (console, HTTP ingestion,
//! OneBot) feed it through [`EmbeddedHost::ingest_message`] and deliver through a registered
//! [`ChannelSender`]; the OneBot v11 channel ([`OneBotChannel`]) lives here. [`maibot`] is the
//! other host: MaiBot's, reached through the bridge its plugin opens. The five `search_memory` modes are defined in [`memory`] and docs/host.md.
//!
//! Its tables are prefixed `host_` and its migrations are recorded in their own table, so it can
//! share the task database file (`<data_dir>/mai-agent.db`) or use a file of its own — or the
//! task store's PostgreSQL database.

mod channels;
mod copy;
mod embedded;
mod error;
mod grams;
mod ingest;
pub mod maibot;
mod members;
pub mod memory;
mod notes;
mod onebot;
mod people;
mod pg;
mod schema;
mod sql;
mod streams;
mod text_query;
mod user_search;

pub use channels::ChannelSender;
pub use embedded::{EmbeddedConfig, EmbeddedHost};
pub use error::OpenError;
pub use ingest::{IncomingMessage, IngestedMessage};
pub use maibot::{MaiBotConfig, MaiBotHost, RelayConfig};
pub use notes::ContextNote;
pub use onebot::{OneBotChannel, OneBotHandle, OneBotState, OneBotStatus};
pub use people::NewPerson;
pub use streams::stream_id_for;

/// Entry points for the fuzz targets in `fuzz/`. Not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    use mai_core::host::ChatTarget;

    use crate::IncomingMessage;
    use crate::onebot::protocol::{Frame, parse_frame};

    /// Reads one OneBot v11 frame as the channel does: `Ok(Some(_))` for a message it forwards,
    /// `Ok(None)` for any other frame it understands, `Err` with a reason otherwise.
    pub fn onebot_frame(text: &str) -> Result<Option<IncomingMessage>, String> {
        match parse_frame(text, "qq") {
            Ok(Frame::Message(message)) => Ok(Some(message)),
            Ok(_) => Ok(None),
            Err(error) => Err(error.to_string()),
        }
    }

    /// The `send_msg` action the channel sends for `text`.
    pub fn onebot_send_msg(target: &ChatTarget, text: &str) -> serde_json::Value {
        crate::onebot::protocol::send_msg(target, text, "fuzz")
    }
}
