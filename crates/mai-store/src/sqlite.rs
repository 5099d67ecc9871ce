//! [`SqliteStore`]: the [`TaskStore`] over a [`Database`]. Each operation encodes its values on
//! the caller's thread, then hands one closure to the writer (`write`) or to a reader
//! (`read`): one hand-off per operation, whatever its number of statements. `update` reads,
//! changes and writes in one writer turn, so its record is encoded on the writer's thread.

use std::path::Path;

use async_trait::async_trait;
use mai_core::store::{
    Admit, Change, CountQuery, HistoryEntry, NewHistoryEntry, Resolved, SaveOutcome, StoreError,
    TaskCounts, TaskFilter, TaskStore, TaskWrite,
};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use mai_core::usage::{UsageQuery, UsageTotals};

use crate::database::{Database, OpenError, SqliteOptions};
use crate::error::{closed, db, write_failed};
use crate::schema::TASKS;
use crate::write::{Encoded, Failure};
use crate::{read, write};

/// The pragmas a connection actually runs with (for diagnostics and tests).
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
#[derive(Debug, Clone)]
pub struct SqliteStore {
    db: Database,
}

fn open_failed(error: OpenError) -> StoreError {
    StoreError::Database {
        doing: "opening the task database",
        source: Box::new(error),
    }
}

impl SqliteStore {
    /// Opens (creating it and its directory if missing) the database file at `path` with
    /// default options, and migrates it to the current schema.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, &SqliteOptions::default()).await
    }

    /// [`SqliteStore::open`] with explicit options.
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: &SqliteOptions,
    ) -> Result<Self, StoreError> {
        let db = Database::open(path, options).await.map_err(open_failed)?;
        Self::on(db).await
    }

    /// A private in-memory database, gone when the store is dropped (tests, dry runs).
    pub async fn open_in_memory() -> Result<Self, StoreError> {
        let db = Database::open_in_memory().await.map_err(open_failed)?;
        Self::on(db).await
    }

    /// The task store in an open database (shared with other components' tables): creates or
    /// migrates the task tables.
    pub async fn on(db: Database) -> Result<Self, StoreError> {
        db.migrate(&TASKS)
            .await
            .map_err(|error| StoreError::Database {
                doing: "migrating the task tables",
                source: Box::new(error),
            })?;
        tracing::debug!(schema_version = TASKS.latest_version(), "task store ready");
        Ok(SqliteStore { db })
    }

    /// The database this store keeps its tables in.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The schema version of the open database (the highest migration applied).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        self.db
            .schema_version(&TASKS)
            .await
            .map_err(|error| StoreError::Database {
                doing: "reading the schema version",
                source: Box::new(error),
            })
    }

    /// The schema version this build creates and understands.
    pub fn latest_schema_version() -> i64 {
        TASKS.latest_version()
    }

    /// The pragmas in force on a reader connection.
    pub async fn connection_settings(&self) -> Result<ConnectionSettings, StoreError> {
        const DOING: &str = "reading the connection settings";
        self.db
            .read(|connection| {
                let pragma = |name: &str| -> Result<rusqlite::types::Value, rusqlite::Error> {
                    connection.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
                };
                let text = |value| match value {
                    rusqlite::types::Value::Text(text) => text,
                    _ => String::new(),
                };
                let number = |value| match value {
                    rusqlite::types::Value::Integer(n) => n,
                    _ => -1,
                };
                Ok(ConnectionSettings {
                    journal_mode: text(pragma("journal_mode")?).to_ascii_lowercase(),
                    synchronous: number(pragma("synchronous")?),
                    foreign_keys: number(pragma("foreign_keys")?) == 1,
                    busy_timeout_ms: number(pragma("busy_timeout")?),
                })
            })
            .await
            .map_err(closed(DOING))?
            .map_err(db(DOING))
    }

    /// Finishes the queued writes and closes the write connection.
    pub async fn close(&self) {
        self.db.close().await;
    }

    /// Runs encoded writes as one unit of the writer's next batch.
    async fn run_writes(
        &self,
        writes: Vec<Encoded>,
        doing: &'static str,
    ) -> Result<SaveOutcome, StoreError> {
        let outcome = self
            .db
            .write(move |connection| write::write_all(connection, &writes, doing))
            .await
            .map_err(write_failed(doing))?;
        match outcome {
            Ok(()) => Ok(SaveOutcome::Saved),
            Err(Failure::Conflict(conflict)) => Ok(conflict),
            Err(Failure::Store(error)) => Err(error),
            Err(Failure::Unchanged) => Err(StoreError::Database {
                doing,
                source: "a write reported that it changed nothing".into(),
            }),
        }
    }

    async fn save_one(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
        doing: &'static str,
    ) -> Result<SaveOutcome, StoreError> {
        let write = TaskWrite::Save {
            task,
            expected,
            expected_question: None,
            history,
        };
        self.run_writes(vec![Encoded::encode(&write)?], doing).await
    }

    /// Runs a read on a reader connection.
    async fn read<T, F>(&self, doing: &'static str, job: F) -> Result<T, StoreError>
    where
        F: FnOnce(&rusqlite::Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.db.read(job).await.map_err(closed(doing))?
    }
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn insert(&self, task: &TaskRecord) -> Result<(), StoreError> {
        const DOING: &str = "inserting a task";
        let row = write::NewRow::encode(task)?;
        let id = task.id;
        self.db
            .write(move |connection| write::insert_new(connection, &row, id, DOING))
            .await
            .map_err(write_failed(DOING))?
    }

    async fn insert_admitted(
        &self,
        task: &TaskRecord,
        query: &CountQuery<'_>,
        admit: Admit,
        usage: &[mai_core::usage::UsageRecord],
    ) -> Result<Result<(), String>, StoreError> {
        const DOING: &str = "inserting a task within the limits";
        let row = write::NewRow::encode(task)?;
        let usage = crate::usage::encode_usage(usage);
        let (id, keys) = (task.id, read::CountKeys::of(query));
        let outcome = self
            .db
            .write(move |connection| {
                let counts = read::count_tasks(connection, &keys)?;
                let admitted = admit(&counts);
                if admitted.is_ok() {
                    write::insert_new(connection, &row, id, DOING)?;
                }
                crate::usage::insert_usage(connection, &usage, DOING)?;
                Ok::<_, Failure>(admitted)
            })
            .await
            .map_err(write_failed(DOING))?;
        match outcome {
            Ok(admitted) => Ok(admitted),
            Err(Failure::Store(error)) => Err(error),
            Err(Failure::Conflict(_) | Failure::Unchanged) => Err(StoreError::Database {
                doing: DOING,
                source: "an insert reported a compare-and-set conflict".into(),
            }),
        }
    }

    async fn save(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
    ) -> Result<SaveOutcome, StoreError> {
        self.save_one(task, expected, &[], "saving a task").await
    }

    async fn checkpoint(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
    ) -> Result<SaveOutcome, StoreError> {
        self.save_one(task, expected, history, "checkpointing a task")
            .await
    }

    async fn checkpoint_with_usage(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
        usage: &[mai_core::usage::UsageRecord],
    ) -> Result<SaveOutcome, StoreError> {
        let save = Encoded::encode(&TaskWrite::Save {
            task,
            expected,
            expected_question: None,
            history,
        })?;
        let usage = Encoded::encode(&TaskWrite::Usage(usage))?;
        self.run_writes(vec![save, usage], "checkpointing a task")
            .await
    }

    async fn write(&self, writes: &[TaskWrite<'_>]) -> Result<SaveOutcome, StoreError> {
        let encoded = writes
            .iter()
            .map(Encoded::encode)
            .collect::<Result<Vec<_>, _>>()?;
        self.run_writes(encoded, "writing tasks").await
    }

    /// One turn of the writer: the read, the change and the write in its transaction.
    async fn update(&self, id: TaskId, change: Change) -> Result<Option<TaskRecord>, StoreError> {
        const DOING: &str = "updating a task";
        let outcome = self
            .db
            .write(move |connection| write::update(connection, id, change, DOING))
            .await
            .map_err(write_failed(DOING))?;
        match outcome {
            Ok(task) => Ok(Some(task)),
            // Written in the same transaction as the read: no conflict can come from others.
            Err(Failure::Unchanged | Failure::Conflict(_)) => Ok(None),
            Err(Failure::Store(error)) => Err(error),
        }
    }

    async fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        self.read("reading a task", move |c| read::get_task(c, id))
            .await
    }

    async fn resolve(&self, reference: &str) -> Result<Resolved, StoreError> {
        let reference = reference.to_owned();
        self.read("resolving a task reference", move |c| {
            read::resolve_reference(c, &reference)
        })
        .await
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        let filter = filter.clone();
        self.read("listing tasks", move |c| read::list_tasks(c, &filter))
            .await
    }

    async fn count_by_status(
        &self,
        filter: &TaskFilter,
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        let filter = filter.clone();
        self.read("counting tasks per status", move |c| {
            read::count_by_status(c, &filter, false)
        })
        .await
    }

    async fn count_in_states(
        &self,
        statuses: &[TaskStatus],
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        let filter = TaskFilter::in_states(statuses);
        self.read("counting tasks per status", move |c| {
            read::count_by_status(c, &filter, true)
        })
        .await
    }

    async fn counts(&self, query: &CountQuery<'_>) -> Result<TaskCounts, StoreError> {
        let query = read::CountKeys::of(query);
        self.read("counting tasks", move |c| read::count_tasks(c, &query))
            .await
    }

    async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageTotals>, StoreError> {
        // Without a grouping the aggregate has exactly one row, zero when nothing matched.
        let query = query.clone();
        self.read("summing usage", move |c| {
            crate::usage::usage_totals(c, &query)
        })
        .await
    }

    async fn list_active(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.read("listing active tasks", read::list_active_tasks)
            .await
    }

    async fn history(&self, id: TaskId, from_seq: u64) -> Result<Vec<HistoryEntry>, StoreError> {
        self.read("reading task history", move |c| {
            read::read_history(c, id, from_seq)
        })
        .await
    }

    async fn append_history(
        &self,
        id: TaskId,
        entries: &[NewHistoryEntry],
    ) -> Result<(), StoreError> {
        const DOING: &str = "appending task history";
        let history = crate::agent_history::encode_history(id, entries)?;
        self.db
            .write(move |connection| write::append_history(connection, id, &history, DOING))
            .await
            .map_err(write_failed(DOING))?
    }
}
