//! mai-agent persistence: [`Database`] (one SQLite file opened once, written only through its
//! [`Writer`]) and [`SqliteStore`], the [`mai_core::store::TaskStore`] on it; [`PgStore`], the
//! task store on PostgreSQL; [`Storage`] and [`Store`], which open either from where
//! `[storage] url` points so nothing above this crate knows which backend it has.
//!
//! This crate owns the database: opening a file and its pragmas, the writer thread that owns
//! the write connection and its queue (group commit), the migrations every component sharing
//! the file brings (the task schema in `migrations/`, embedded at build time), the mapping
//! between task records and rows, and the transactions that keep the status log append-only
//! and status writes compare-and-set. It owns no task semantics: transitions, scheduling and
//! recovery belong to `mai-core` and the engine. The writer is generic over a [`Session`], the
//! seam where a backend other than SQLite would sit.

mod agent_history;
mod answer;
mod backup;
mod checkpointer;
mod codec;
mod database;
mod error;
mod migrate;
mod postgres;
mod read;
mod retention;
mod schema;
mod sqlite;
mod status_log;
mod storage;
mod usage;
mod without_field;
mod write;
mod writer;

pub use backup::{BackupError, backup};
pub use database::{Closed, Database, OpenError, SqliteOptions, Synchronous};
pub use migrate::{MigrateError, Migration, Migrations};
pub use postgres::{
    PgOptions, PgStore, TaskRows, apply_migrations as migrate_postgres, connect_pool,
    recorded_version as postgres_schema_version,
};
pub use read::AMBIGUOUS_LIMIT;
pub use rusqlite;
pub use sqlite::{ConnectionSettings, SqliteStore};
pub use sqlx;
pub use storage::{Backend, Location, Storage, Store};
pub use writer::{Session, WriteError, Writer};
