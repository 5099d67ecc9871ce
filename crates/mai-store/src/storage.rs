//! [`Storage`]: the databases a command runs on, opened from where `[storage] url` points — a
//! SQLite file or a PostgreSQL database — and [`Store`], the task store on either. Above this
//! crate nothing knows which backend it has: the engine and the server get a `TaskStore`, the
//! retention job [`Store::prune_finished`], the embedded host a [`Backend`] to keep its tables in
//! (the same database as the tasks). Must not: know task semantics or any component's tables.

use std::path::PathBuf;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mai_core::lease::StopRequest;
use mai_core::store::{
    Admit, Change, CountQuery, HistoryEntry, NewHistoryEntry, Notices, Resolved, SaveOutcome,
    StoreError, TaskCounts, TaskFilter, TaskStore, TaskWrite,
};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};

use crate::database::{Database, SqliteOptions};
use crate::postgres::{PgOptions, PgStore};
use crate::sqlite::SqliteStore;

/// Where the databases are.
#[derive(Clone)]
pub enum Location {
    /// One SQLite file for the tasks and the chat tables.
    Sqlite {
        path: PathBuf,
        options: SqliteOptions,
    },
    /// A PostgreSQL database (`url` may hold a password: never shown).
    Postgres { url: String, options: PgOptions },
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Location {
    /// Where the tasks are, for messages (never the URL, which may hold a password).
    pub fn describe(&self) -> String {
        match self {
            Location::Sqlite { path, .. } => format!("the SQLite file {}", path.display()),
            Location::Postgres { .. } => "the PostgreSQL database of [storage] url".to_owned(),
        }
    }
}

/// The task store on either backend. Cheap to clone.
#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// An opened database other components keep their tables in, beside the tasks.
#[derive(Debug, Clone)]
pub enum Backend {
    Sqlite(Database),
    Postgres(sqlx::PgPool),
}

/// The opened database: the task store, and the same database for the embedded host's tables.
#[derive(Debug, Clone)]
pub struct Storage {
    pub store: Store,
    pub host: Backend,
}

fn opening(doing: &'static str) -> impl FnOnce(crate::database::OpenError) -> StoreError {
    move |error| StoreError::Database {
        doing,
        source: Box::new(error),
    }
}

impl Storage {
    /// Opens (creating and migrating) the databases at `location`.
    pub async fn open(location: &Location) -> Result<Self, StoreError> {
        match location {
            Location::Sqlite { path, options } => {
                let db = Database::open(path, options)
                    .await
                    .map_err(opening("opening the task database"))?;
                let store = SqliteStore::on(db.clone()).await?;
                Ok(Storage {
                    store: Store::Sqlite(store),
                    host: Backend::Sqlite(db),
                })
            }
            Location::Postgres { url, options } => {
                let store = PgStore::connect_with(url, options).await?;
                let host = Backend::Postgres(store.pool().clone());
                Ok(Storage {
                    store: Store::Postgres(store),
                    host,
                })
            }
        }
    }
}

impl Store {
    fn inner(&self) -> &dyn TaskStore {
        match self {
            Store::Sqlite(store) => store,
            Store::Postgres(store) => store,
        }
    }

    /// Deletes the finished tasks last changed before `before` (see `retention`); how many.
    pub async fn prune_finished(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        match self {
            Store::Sqlite(store) => store.prune_finished(before).await,
            Store::Postgres(store) => store.prune_finished(before).await,
        }
    }

    /// Finishes queued writes and closes the connections.
    pub async fn close(&self) {
        match self {
            Store::Sqlite(store) => store.close().await,
            Store::Postgres(store) => store.close().await,
        }
    }
}

#[async_trait]
impl TaskStore for Store {
    async fn insert(&self, task: &TaskRecord) -> Result<(), StoreError> {
        self.inner().insert(task).await
    }

    async fn insert_admitted(
        &self,
        task: &TaskRecord,
        query: &CountQuery<'_>,
        admit: Admit,
        usage: &[mai_core::usage::UsageRecord],
    ) -> Result<Result<(), String>, StoreError> {
        self.inner()
            .insert_admitted(task, query, admit, usage)
            .await
    }

    async fn save(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
    ) -> Result<SaveOutcome, StoreError> {
        self.inner().save(task, expected).await
    }

    async fn checkpoint(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
    ) -> Result<SaveOutcome, StoreError> {
        self.inner().checkpoint(task, expected, history).await
    }

    async fn checkpoint_with_usage(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
        usage: &[mai_core::usage::UsageRecord],
    ) -> Result<SaveOutcome, StoreError> {
        self.inner()
            .checkpoint_with_usage(task, expected, history, usage)
            .await
    }

    async fn write(&self, writes: &[TaskWrite<'_>]) -> Result<SaveOutcome, StoreError> {
        self.inner().write(writes).await
    }

    async fn record_usage(
        &self,
        records: &[mai_core::usage::UsageRecord],
    ) -> Result<(), StoreError> {
        self.inner().record_usage(records).await
    }

    async fn usage(
        &self,
        query: &mai_core::usage::UsageQuery,
    ) -> Result<Vec<mai_core::usage::UsageTotals>, StoreError> {
        self.inner().usage(query).await
    }

    async fn update(&self, id: TaskId, change: Change) -> Result<Option<TaskRecord>, StoreError> {
        self.inner().update(id, change).await
    }

    async fn claim(
        &self,
        id: TaskId,
        change: Change,
        cap: Option<u32>,
    ) -> Result<mai_core::store::Claim, StoreError> {
        self.inner().claim(id, change, cap).await
    }

    async fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        self.inner().get(id).await
    }

    async fn resolve(&self, reference: &str) -> Result<Resolved, StoreError> {
        self.inner().resolve(reference).await
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner().list(filter).await
    }

    async fn count_by_status(
        &self,
        filter: &TaskFilter,
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        self.inner().count_by_status(filter).await
    }

    async fn count_in_states(
        &self,
        statuses: &[TaskStatus],
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        self.inner().count_in_states(statuses).await
    }

    async fn counts(&self, query: &CountQuery<'_>) -> Result<TaskCounts, StoreError> {
        self.inner().counts(query).await
    }

    async fn list_active(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner().list_active().await
    }

    async fn history(&self, id: TaskId, from_seq: u64) -> Result<Vec<HistoryEntry>, StoreError> {
        self.inner().history(id, from_seq).await
    }

    async fn append_history(
        &self,
        id: TaskId,
        entries: &[NewHistoryEntry],
    ) -> Result<(), StoreError> {
        self.inner().append_history(id, entries).await
    }

    fn shared(&self) -> bool {
        self.inner().shared()
    }

    async fn renew_leases(&self) -> Result<Vec<(TaskId, Option<StopRequest>)>, StoreError> {
        self.inner().renew_leases().await
    }

    async fn expired_leases(&self) -> Result<Vec<(TaskId, Option<StopRequest>)>, StoreError> {
        self.inner().expired_leases().await
    }

    async fn release_leases(&self, instance: &str) -> Result<u64, StoreError> {
        self.inner().release_leases(instance).await
    }

    async fn request_stop(&self, id: TaskId, request: &StopRequest) -> Result<bool, StoreError> {
        self.inner().request_stop(id, request).await
    }

    async fn notices(&self) -> Result<Option<Notices>, StoreError> {
        self.inner().notices().await
    }
}
