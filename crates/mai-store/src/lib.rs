//! mai-agent persistence: [`SqliteStore`], the [`mai_core::store::TaskStore`] on SQLite.
//!
//! This crate owns the database: its schema and migrations (`migrations/`, embedded at build
//! time), the mapping between task records and rows, and the transactions that keep the status
//! log append-only and status writes compare-and-set. It owns no task semantics: transitions,
//! scheduling and recovery belong to `mai-core` and the engine.

mod agent_history;
mod codec;
mod error;
mod group_commit;
mod one_trip;
mod read;
mod schema;
mod sqlite;
mod status_log;
mod write;

pub use read::AMBIGUOUS_LIMIT;
pub use schema::SchemaError;
pub use sqlite::{ConnectionSettings, SqliteOptions, SqliteStore};
