//! [`SqliteStore`]: opening the database (one pool, its pragmas, the migrations) and the
//! [`TaskStore`] implementation, which delegates to `read` and `write`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mai_core::store::{
    CountQuery, HistoryEntry, NewHistoryEntry, Resolved, SaveOutcome, StoreError, TaskCounts,
    TaskFilter, TaskStore, TaskWrite,
};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::Mutex;

use crate::error::{OpenFailed, db};
use crate::schema;

/// How the pool is sized and how long a writer waits for another one.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Connections in the pool (readers run in parallel in WAL mode; writers take turns).
    pub max_connections: u32,
    /// How long a statement waits for another connection's (or process's) write lock before it
    /// fails with "database is locked".
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            max_connections: 4,
            busy_timeout: Duration::from_secs(10),
        }
    }
}

/// The pragmas a pooled connection actually runs with (for diagnostics and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `wal` for a file database, `memory` for an in-memory one.
    pub journal_mode: String,
    /// SQLite's number: 0 off, 1 normal, 2 full, 3 extra.
    pub synchronous: i64,
    pub foreign_keys: bool,
    pub busy_timeout_ms: i64,
}

/// The task store on SQLite. Cheap to share behind an `Arc`; safe to call from many tasks.
#[derive(Debug)]
pub struct SqliteStore {
    /// Reads (and the embedded host's tables).
    pub(crate) pool: SqlitePool,
    /// This store's writes: one connection, so its page cache stays warm (SQLite drops a
    /// connection's cache whenever another connection wrote) and writes never wait for a
    /// connection. A file store's own pool of one; an in-memory store's only pool.
    pub(crate) writer: SqlitePool,
    /// Serializes this process's write transactions. SQLite admits one writer at a time anyway;
    /// queueing here hands the lock over in order instead of leaving waiters in SQLite's
    /// sleep-and-retry busy handler. Other processes are still covered by `busy_timeout`.
    pub(crate) write_gate: Arc<Mutex<()>>,
    /// One-trip writes waiting for the next group commit.
    pub(crate) write_queue: crate::group_commit::WriteQueue,
}

impl SqliteStore {
    /// Opens (creating it and its directory if missing) the database file at `path` with
    /// default options, and migrates it to the current schema.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, &SqliteOptions::default()).await
    }

    /// [`SqliteStore::open`] with explicit pool options.
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: &SqliteOptions,
    ) -> Result<Self, StoreError> {
        const DOING: &str = "opening the task database";
        let path = path.as_ref();
        let open_failed = |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Database {
            doing: DOING,
            source: Box::new(OpenFailed {
                path: path.to_owned(),
                source,
            }),
        };
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|error| open_failed(Box::new(error)))?;
        }
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(options.busy_timeout);
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            // A ping per acquire is a round trip to the connection's thread for nothing: a
            // SQLite connection does not go stale the way a network connection does.
            .test_before_acquire(false)
            .connect_with(connect.clone())
            .await
            .map_err(|error| open_failed(Box::new(error)))?;
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(connect);
        Self::migrated(pool, writer).await
    }

    /// A private in-memory database, gone when the store is dropped (tests, dry runs).
    ///
    /// An in-memory database lives in its connection, so this pool holds exactly one
    /// connection and never recycles it.
    pub async fn open_in_memory() -> Result<Self, StoreError> {
        let connect = SqliteConnectOptions::new()
            .in_memory(true)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .min_connections(1)
            .max_connections(1)
            .test_before_acquire(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(connect)
            .await
            .map_err(db("opening an in-memory task database"))?;
        Self::migrated(pool.clone(), pool).await
    }

    async fn migrated(pool: SqlitePool, writer: SqlitePool) -> Result<Self, StoreError> {
        schema::migrate(&pool).await?;
        tracing::debug!(
            schema_version = schema::latest_version(),
            "task store ready"
        );
        Ok(SqliteStore {
            pool,
            writer,
            write_gate: Arc::default(),
            write_queue: crate::group_commit::WriteQueue::default(),
        })
    }

    /// The schema version of the open database (the highest migration applied).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        schema::recorded_version(&self.pool, true).await
    }

    /// The schema version this build creates and understands.
    pub fn latest_schema_version() -> i64 {
        schema::latest_version()
    }

    /// The pragmas in force on a pooled connection.
    pub async fn connection_settings(&self) -> Result<ConnectionSettings, StoreError> {
        const DOING: &str = "reading the connection settings";
        let mut conn = self.pool.acquire().await.map_err(db(DOING))?;
        let journal_mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .map_err(db(DOING))?;
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .map_err(db(DOING))?;
        let foreign_keys: bool = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(&mut *conn)
            .await
            .map_err(db(DOING))?;
        let busy_timeout_ms: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(&mut *conn)
            .await
            .map_err(db(DOING))?;
        Ok(ConnectionSettings {
            journal_mode: journal_mode.to_ascii_lowercase(),
            synchronous,
            foreign_keys,
            busy_timeout_ms,
        })
    }

    /// The connection pool, for other tables kept in the same file (the embedded host), so one
    /// database file has one pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The connection this store writes through and the turn its writes take, for another
    /// component writing the same file (the embedded host): writing through them, it queues
    /// behind this store's writes in order instead of sleeping in SQLite's busy handler.
    pub fn shared_writer(&self) -> (SqlitePool, Arc<Mutex<()>>) {
        (self.writer.clone(), self.write_gate.clone())
    }

    /// Waits for running statements and closes every connection (checkpointing the WAL).
    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn insert(&self, task: &TaskRecord) -> Result<(), StoreError> {
        self.insert_task(task).await
    }

    async fn save(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
    ) -> Result<SaveOutcome, StoreError> {
        let write = TaskWrite::Save {
            task,
            expected,
            expected_question: None,
            history: &[],
        };
        self.write_all(&[write], "saving a task").await
    }

    async fn checkpoint(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
    ) -> Result<SaveOutcome, StoreError> {
        let write = TaskWrite::Save {
            task,
            expected,
            expected_question: None,
            history,
        };
        self.write_all(&[write], "checkpointing a task").await
    }

    async fn write(&self, writes: &[TaskWrite<'_>]) -> Result<SaveOutcome, StoreError> {
        self.write_all(writes, "writing tasks").await
    }

    async fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        self.get_task(id).await
    }

    async fn resolve(&self, reference: &str) -> Result<Resolved, StoreError> {
        self.resolve_reference(reference).await
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        self.list_tasks(filter).await
    }

    async fn counts(&self, query: &CountQuery<'_>) -> Result<TaskCounts, StoreError> {
        self.count_tasks(query).await
    }

    async fn list_active(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.list_active_tasks().await
    }

    async fn history(&self, id: TaskId, from_seq: u64) -> Result<Vec<HistoryEntry>, StoreError> {
        self.read_history(id, from_seq).await
    }

    async fn append_history(
        &self,
        id: TaskId,
        entries: &[NewHistoryEntry],
    ) -> Result<(), StoreError> {
        self.append_history_only(id, entries).await
    }
}
