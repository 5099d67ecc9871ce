//! [`PgStore`]: the [`TaskStore`] on PostgreSQL (`[storage] url = "postgres://…"`), through a
//! connection pool (sqlx). Several processes may share one database: every write is one
//! transaction whose compare-and-set is checked by PostgreSQL on the newest committed row, so a
//! stale copy never overwrites a change made by another instance (docs/design.md, I2).
//!
//! This module owns the pool, the PostgreSQL schema of the task tables (`migrations/postgres/`)
//! and its migration on connect; the SQL of reads and writes lives in `read` and `write`; the
//! mapping of records to rows is the codec both backends share. Must not: know task semantics,
//! or anything of the engine above the [`TaskStore`] seam.

mod copy;
mod migrate;
mod notices;
mod read;
mod usage;
mod write;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mai_core::lease::StopRequest;
use mai_core::store::{
    Admit, Change, Claim, CountQuery, HistoryEntry, NewHistoryEntry, Notices, Resolved,
    SaveOutcome, StoreError, TaskCounts, TaskFilter, TaskStore, TaskWrite,
};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};

use crate::codec::{id_key, parse_id_key, time_text};
use crate::error::pg;
use crate::migrate::{MigrateError, Migration, Migrations};
use crate::read::CountKeys;
use write::{Failure, Holder, Rows};

pub use copy::TaskRows;
pub use migrate::{apply as apply_migrations, recorded_version};

/// The task tables' PostgreSQL scripts (their own version line: version 1 has the columns of
/// the SQLite schema's version 3).
static TASKS: Migrations = Migrations {
    table: "_mai_task_migrations",
    scripts: &[
        Migration {
            version: 1,
            description: "tasks",
            sql: include_str!("../../migrations/postgres/0001_tasks.sql"),
        },
        Migration {
            version: 2,
            description: "usage",
            sql: include_str!("../../migrations/postgres/0002_usage.sql"),
        },
        Migration {
            version: 3,
            description: "leases",
            sql: include_str!("../../migrations/postgres/0003_leases.sql"),
        },
        Migration {
            version: 4,
            description: "parent",
            sql: include_str!("../../migrations/postgres/0004_parent.sql"),
        },
        Migration {
            version: 5,
            description: "usage record id",
            sql: include_str!("../../migrations/postgres/0005_usage_record_id.sql"),
        },
    ],
};

/// The advisory lock that serialises admitted inserts across instances, so the caps of
/// `[limits]` hold exactly when creations race (docs/design.md, I39).
const ADMIT_LOCK: i64 = 0x6d61_6941_646d_6974; // "maiAdmit"

/// The advisory lock every claim under a cluster-wide cap (`[task] cluster_max_running`) takes
/// for its transaction, so the count of running tasks it reads cannot be passed by another
/// instance's claim before it commits.
const CLAIM_LOCK: i64 = 0x6d61_6943_6c61_696d; // "maiClaim"

/// The channel a shared database announces task changes on (`migrations/postgres/0003`).
const CHANNEL: &str = "mai_tasks";

/// How a PostgreSQL database is reached.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections in the pool.
    pub max_connections: u32,
    /// How long a caller waits for a free connection (or for the server) before failing.
    pub acquire_timeout: Duration,
    /// The instance this store writes as (`[server] instance_id`): the owner of the leases it
    /// takes. `None`: a command that runs no tasks (it takes no leases).
    pub instance: Option<String>,
    /// How long a lease lasts from its last renewal (`[storage] lease_secs`).
    pub lease: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(10),
            instance: None,
            lease: mai_core::lease::LeaseTerms::default().lease,
        }
    }
}

/// The task store on PostgreSQL. Cheap to clone (clones share the pool).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    holder: std::sync::Arc<Holder>,
}

fn migrate_failed(error: MigrateError) -> StoreError {
    StoreError::Database {
        doing: "migrating the task tables",
        source: Box::new(error),
    }
}

/// Connects a pool to `url` (never echoing it: it may hold a password).
pub async fn connect_pool(url: &str, options: &PgOptions) -> Result<PgPool, StoreError> {
    let connect: PgConnectOptions = url.parse().map_err(|error| StoreError::Database {
        doing: "reading the PostgreSQL URL ([storage] url)",
        source: Box::new(error),
    })?;
    PgPoolOptions::new()
        .max_connections(options.max_connections.max(1))
        .acquire_timeout(options.acquire_timeout)
        .connect_with(connect.application_name("mai-agent"))
        .await
        .map_err(pg("connecting to PostgreSQL ([storage] url)"))
}

impl PgStore {
    /// Connects to the database at `url` and migrates the task tables (under an advisory lock,
    /// so instances starting together take turns; a newer schema is refused).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, &PgOptions::default()).await
    }

    /// [`PgStore::connect`] with explicit options.
    pub async fn connect_with(url: &str, options: &PgOptions) -> Result<Self, StoreError> {
        let store = Self::on(connect_pool(url, options).await?).await?;
        Ok(store.as_instance(options))
    }

    /// This store writing as the instance of `options` (the owner of the leases it takes).
    pub fn as_instance(self, options: &PgOptions) -> Self {
        PgStore {
            pool: self.pool,
            holder: std::sync::Arc::new(Holder {
                instance: options.instance.clone(),
                lease_secs: options.lease.as_secs_f64(),
            }),
        }
    }

    /// The task store on an open pool: creates or migrates the task tables.
    pub async fn on(pool: PgPool) -> Result<Self, StoreError> {
        apply_migrations(&pool, &TASKS)
            .await
            .map_err(migrate_failed)?;
        tracing::debug!(
            schema_version = TASKS.latest_version(),
            "task store ready on PostgreSQL"
        );
        Ok(PgStore {
            pool,
            holder: std::sync::Arc::default(),
        })
    }

    /// The pool this store uses (shared with the other components' tables).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema version of the database (the highest migration applied).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        recorded_version(&self.pool, &TASKS)
            .await
            .map_err(migrate_failed)
    }

    /// The schema version this build creates and understands on PostgreSQL.
    pub fn latest_schema_version() -> i64 {
        TASKS.latest_version()
    }

    /// Closes the pool (waits for connections in use to come back).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Deletes the finished tasks last changed before `before` (see `retention`); how many.
    pub async fn prune_finished(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        const DOING: &str = "deleting old finished tasks";
        let cutoff = time_text(before);
        let mut deleted = 0;
        loop {
            let batch = sqlx::query(
                "DELETE FROM tasks WHERE id IN (SELECT t.id FROM tasks t \
                 WHERE t.status IN ('completed', 'failed', 'cancelled') AND t.updated_at < $1 \
                 AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.created_by = t.id \
                 AND c.status NOT IN ('completed', 'failed', 'cancelled')) LIMIT $2)",
            )
            .bind(&cutoff)
            .bind(crate::retention::BATCH)
            .execute(&self.pool)
            .await
            .map_err(pg(DOING))?
            .rows_affected();
            deleted += batch;
            if batch < crate::retention::BATCH.unsigned_abs() {
                return Ok(deleted);
            }
        }
    }

    /// A connection from the pool.
    async fn connection(
        &self,
        doing: &'static str,
    ) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, StoreError> {
        self.pool.acquire().await.map_err(pg(doing))
    }

    /// Runs `job` in a transaction: committed when it returns `Ok`, rolled back otherwise.
    async fn transaction<T>(
        &self,
        doing: &'static str,
        job: impl AsyncFnOnce(&mut PgConnection) -> Result<T, Failure>,
    ) -> Result<Result<T, Failure>, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(pg(doing))?;
        match job(&mut transaction).await {
            Ok(value) => {
                transaction.commit().await.map_err(pg(doing))?;
                Ok(Ok(value))
            }
            Err(failure) => {
                transaction.rollback().await.map_err(pg(doing))?;
                Ok(Err(failure))
            }
        }
    }

    async fn run_writes(
        &self,
        writes: Vec<Rows>,
        doing: &'static str,
    ) -> Result<SaveOutcome, StoreError> {
        let outcome = self
            .transaction(doing, async |connection| {
                write::write_all(connection, &self.holder, &writes, doing).await
            })
            .await?;
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
}

#[async_trait]
impl TaskStore for PgStore {
    async fn insert(&self, task: &TaskRecord) -> Result<(), StoreError> {
        const DOING: &str = "inserting a task";
        let rows = Rows::insert(task)?;
        let id = task.id;
        let outcome = self
            .transaction(DOING, async |connection| {
                let Rows::Insert { row, log } = &rows else {
                    return Err(Failure::Unchanged);
                };
                match write::insert(connection, &self.holder, row, log, DOING).await? {
                    true => Ok(()),
                    false => Err(Failure::Store(StoreError::Duplicate(id))),
                }
            })
            .await?;
        outcome.map_err(|failure| match failure {
            Failure::Store(error) => error,
            _ => StoreError::Duplicate(id),
        })
    }

    async fn insert_admitted(
        &self,
        task: &TaskRecord,
        query: &CountQuery<'_>,
        admit: Admit,
        usage: &[mai_core::usage::UsageRecord],
    ) -> Result<Result<(), String>, StoreError> {
        const DOING: &str = "inserting a task within the limits";
        let rows = Rows::insert(task)?;
        let usage = crate::usage::encode_usage(usage);
        let (id, keys) = (task.id, CountKeys::of(query));
        let outcome = self
            .transaction(DOING, async |connection| {
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(ADMIT_LOCK)
                    .execute(&mut *connection)
                    .await
                    .map_err(pg(DOING))?;
                let counts = read::count_tasks(connection, &keys).await?;
                let admitted = admit(&counts);
                let Rows::Insert { row, log } = &rows else {
                    return Err(Failure::Unchanged);
                };
                if admitted.is_ok()
                    && !write::insert(connection, &self.holder, row, log, DOING).await?
                {
                    return Err(Failure::Store(StoreError::Duplicate(id)));
                }
                usage::insert_usage(connection, &usage, DOING).await?;
                Ok(admitted)
            })
            .await?;
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
        let rows = Rows::save(task, expected, &[])?;
        self.run_writes(vec![rows], "saving a task").await
    }

    async fn checkpoint(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
    ) -> Result<SaveOutcome, StoreError> {
        let rows = Rows::save(task, expected, history)?;
        self.run_writes(vec![rows], "checkpointing a task").await
    }

    async fn write(&self, writes: &[TaskWrite<'_>]) -> Result<SaveOutcome, StoreError> {
        let rows = writes
            .iter()
            .map(Rows::encode)
            .collect::<Result<Vec<_>, _>>()?;
        self.run_writes(rows, "writing tasks").await
    }

    /// The read (locking the row), the change and the write in one transaction.
    async fn update(&self, id: TaskId, change: Change) -> Result<Option<TaskRecord>, StoreError> {
        const DOING: &str = "updating a task";
        let outcome = self
            .transaction(DOING, async |connection| {
                let Some(mut task) = read::get_task(connection, id, true).await? else {
                    return Err(Failure::Unchanged);
                };
                let read = task.status;
                if !change(&mut task) {
                    return Err(Failure::Unchanged);
                }
                let rows = Rows::save(&task, Some(read), &[])?;
                write::write_all(connection, &self.holder, std::slice::from_ref(&rows), DOING)
                    .await?;
                Ok(task)
            })
            .await?;
        match outcome {
            Ok(task) => Ok(Some(task)),
            Err(Failure::Unchanged | Failure::Conflict(_)) => Ok(None),
            Err(Failure::Store(error)) => Err(error),
        }
    }

    /// Without a cap, an update. With one: the lock every capped claim takes, the count of
    /// running tasks, the read (locking the row), the change and the write in one transaction.
    async fn claim(
        &self,
        id: TaskId,
        change: Change,
        cap: Option<u32>,
    ) -> Result<Claim, StoreError> {
        const DOING: &str = "claiming a task under the cluster-wide cap";
        let Some(cap) = cap else {
            return Ok(match self.update(id, change).await? {
                Some(task) => Claim::Claimed(Box::new(task)),
                None => Claim::Declined,
            });
        };
        let outcome = self
            .transaction(DOING, async |connection| {
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(CLAIM_LOCK)
                    .execute(&mut *connection)
                    .await
                    .map_err(pg(DOING))?;
                let running: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'running'")
                        .fetch_one(&mut *connection)
                        .await
                        .map_err(pg(DOING))?;
                let Some(mut task) = read::get_task(connection, id, true).await? else {
                    return Err(Failure::Unchanged);
                };
                let read = task.status;
                if !change(&mut task) {
                    return Err(Failure::Unchanged);
                }
                if running >= i64::from(cap) {
                    return Ok(Claim::Full);
                }
                let rows = Rows::save(&task, Some(read), &[])?;
                write::write_all(connection, &self.holder, std::slice::from_ref(&rows), DOING)
                    .await?;
                Ok(Claim::Claimed(Box::new(task)))
            })
            .await?;
        match outcome {
            Ok(claim) => Ok(claim),
            Err(Failure::Unchanged | Failure::Conflict(_)) => Ok(Claim::Declined),
            Err(Failure::Store(error)) => Err(error),
        }
    }

    async fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        const DOING: &str = "reading a task";
        let mut connection = self.connection(DOING).await?;
        read::get_task(&mut connection, id, false).await
    }

    async fn resolve(&self, reference: &str) -> Result<Resolved, StoreError> {
        let mut connection = self.connection("resolving a task reference").await?;
        read::resolve_reference(&mut connection, reference).await
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        let mut connection = self.connection("listing tasks").await?;
        read::list_tasks(&mut connection, filter).await
    }

    async fn count_by_status(
        &self,
        filter: &TaskFilter,
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        let mut connection = self.connection("counting tasks per status").await?;
        read::count_by_status(&mut connection, filter, false).await
    }

    async fn count_in_states(
        &self,
        statuses: &[TaskStatus],
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        let filter = TaskFilter::in_states(statuses);
        let mut connection = self.connection("counting tasks per status").await?;
        read::count_by_status(&mut connection, &filter, true).await
    }

    async fn counts(&self, query: &CountQuery<'_>) -> Result<TaskCounts, StoreError> {
        let mut connection = self.connection("counting tasks").await?;
        read::count_tasks(&mut connection, &CountKeys::of(query)).await
    }

    async fn usage(
        &self,
        query: &mai_core::usage::UsageQuery,
    ) -> Result<Vec<mai_core::usage::UsageTotals>, StoreError> {
        let mut connection = self.connection("summing usage").await?;
        usage::usage_totals(&mut connection, query).await
    }

    async fn list_active(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let mut connection = self.connection("listing active tasks").await?;
        read::list_active_tasks(&mut connection).await
    }

    async fn history(&self, id: TaskId, from_seq: u64) -> Result<Vec<HistoryEntry>, StoreError> {
        let mut connection = self.connection("reading task history").await?;
        read::read_history(&mut connection, id, from_seq).await
    }

    async fn append_history(
        &self,
        id: TaskId,
        entries: &[NewHistoryEntry],
    ) -> Result<(), StoreError> {
        const DOING: &str = "appending task history";
        let history = crate::agent_history::encode_history(id, entries)?;
        let outcome = self
            .transaction(DOING, async |connection| {
                write::append_history(connection, id, &history, DOING)
                    .await
                    .map_err(Failure::Store)
            })
            .await?;
        outcome.map_err(|failure| match failure {
            Failure::Store(error) => error,
            _ => StoreError::NotFound(id),
        })
    }

    fn shared(&self) -> bool {
        true
    }

    async fn renew_leases(&self) -> Result<Vec<(TaskId, Option<StopRequest>)>, StoreError> {
        let Some(instance) = self.holder.instance.as_deref() else {
            return Ok(Vec::new());
        };
        let renewed: Vec<(String, Option<String>)> = sqlx::query_as(
            "UPDATE tasks SET lease_until = now() + make_interval(secs => $2::float8) \
             WHERE status = 'running' AND lease_owner = $1 RETURNING id, stop_request",
        )
        .bind(instance)
        .bind(self.holder.lease_secs)
        .fetch_all(&self.pool)
        .await
        .map_err(pg("renewing this instance's task leases"))?;
        Ok(with_stop_requests(renewed))
    }

    async fn expired_leases(&self) -> Result<Vec<(TaskId, Option<StopRequest>)>, StoreError> {
        let expired: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT id, stop_request FROM tasks WHERE status = 'running' \
             AND (lease_owner IS NULL OR lease_until < now()) ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(pg("looking for running tasks whose lease expired"))?;
        Ok(with_stop_requests(expired))
    }

    async fn release_leases(&self, instance: &str) -> Result<u64, StoreError> {
        let released = sqlx::query(
            "UPDATE tasks SET lease_owner = NULL, lease_until = NULL \
             WHERE status = 'running' AND lease_owner = $1",
        )
        .bind(instance)
        .execute(&self.pool)
        .await
        .map_err(pg(
            "releasing the leases of this data directory's previous instance",
        ))?;
        Ok(released.rows_affected())
    }

    async fn request_stop(&self, id: TaskId, request: &StopRequest) -> Result<bool, StoreError> {
        let updated =
            sqlx::query("UPDATE tasks SET stop_request = $2 WHERE id = $1 AND status = 'running'")
                .bind(id_key(id))
                .bind(request.encode())
                .execute(&self.pool)
                .await
                .map_err(pg("leaving a stop request for the instance running a task"))?;
        Ok(updated.rows_affected() == 1)
    }

    async fn notices(&self) -> Result<Option<Notices>, StoreError> {
        notices::listen(&self.pool, CHANNEL).await.map(Some)
    }
}

/// Task ids with the stop request left on each, read from rows.
fn with_stop_requests(rows: Vec<(String, Option<String>)>) -> Vec<(TaskId, Option<StopRequest>)> {
    rows.into_iter()
        .filter_map(|(key, request)| {
            let request = request.as_deref().and_then(StopRequest::parse);
            Some((parse_id_key(&key)?, request))
        })
        .collect()
}
