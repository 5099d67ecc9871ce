//! Migrations on PostgreSQL: a component's scripts ([`Migrations`], the PostgreSQL flavour of its
//! SQL) applied in order, each in its own transaction with its record (PostgreSQL's DDL is
//! transactional: a script that fails leaves nothing behind).
//!
//! Instances that start together take turns: the whole check-and-apply runs under a session
//! advisory lock named after the record table, so one migrates and the others then find the
//! scripts recorded. A database whose recorded version is newer than this build knows is refused
//! before anything is written, as on SQLite. Nothing here needs more than the database owner's
//! rights (no extension, no superuser). Must not: know any component's tables.

use sha2::{Digest, Sha384};
use sqlx::{AssertSqlSafe, PgConnection, PgPool};

use crate::migrate::{MigrateError, Migration, Migrations};

fn pg(doing: &'static str) -> impl FnOnce(sqlx::Error) -> MigrateError {
    move |source| MigrateError::Postgres { doing, source }
}

/// The advisory-lock key of a record table: the first 8 bytes of its name's SHA-384.
fn lock_key(table: &str) -> i64 {
    let digest = Sha384::digest(table.as_bytes());
    let mut bytes = [0_u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

/// Brings `migrations`' tables to their newest version under the advisory lock.
pub(crate) async fn apply(pool: &PgPool, migrations: &Migrations) -> Result<(), MigrateError> {
    let mut connection = pool
        .acquire()
        .await
        .map_err(pg("connecting to migrate the database"))?;
    let key = lock_key(migrations.table);
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(key)
        .execute(&mut *connection)
        .await
        .map_err(pg("waiting for the migration lock"))?;
    let applied = apply_locked(&mut connection, migrations).await;
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(key)
        .execute(&mut *connection)
        .await;
    applied?;
    unlocked.map_err(pg("releasing the migration lock"))?;
    Ok(())
}

/// The highest version recorded as applied; 0 when the record table does not exist.
pub(crate) async fn recorded_version(
    pool: &PgPool,
    migrations: &Migrations,
) -> Result<i64, MigrateError> {
    let mut connection = pool
        .acquire()
        .await
        .map_err(pg("connecting to read the schema version"))?;
    recorded(&mut connection, migrations.table, true).await
}

/// `MAX(version)` of the record table (only successful ones when `successful`); 0 without it.
async fn recorded(
    connection: &mut PgConnection,
    table: &str,
    successful: bool,
) -> Result<i64, MigrateError> {
    const DOING: &str = "reading the schema version";
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .fetch_one(&mut *connection)
        .await
        .map_err(pg(DOING))?;
    if !exists {
        return Ok(0);
    }
    let filter = if successful { " WHERE success" } else { "" };
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COALESCE(MAX(version), 0) FROM {table}{filter}"
    )))
    .fetch_one(&mut *connection)
    .await
    .map_err(pg(DOING))
}

async fn apply_locked(
    connection: &mut PgConnection,
    migrations: &Migrations,
) -> Result<(), MigrateError> {
    let table = migrations.table;
    let (found, known) = (
        recorded(connection, table, false).await?,
        migrations.latest_version(),
    );
    if found > known {
        return Err(MigrateError::TooNew { found, known });
    }
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE IF NOT EXISTS {table} (version BIGINT PRIMARY KEY, description TEXT NOT \
         NULL, installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, \
         checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL)"
    )))
    .execute(&mut *connection)
    .await
    .map_err(pg("creating the migrations table"))?;
    for script in migrations.scripts {
        apply_one(connection, table, script).await?;
    }
    Ok(())
}

async fn apply_one(
    connection: &mut PgConnection,
    table: &str,
    script: &Migration,
) -> Result<(), MigrateError> {
    let checksum = Sha384::digest(script.sql.as_bytes()).to_vec();
    let recorded: Option<(bool, Vec<u8>)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT success, checksum FROM {table} WHERE version = $1"
    )))
    .bind(script.version)
    .fetch_optional(&mut *connection)
    .await
    .map_err(pg("reading the applied migrations"))?;
    match recorded {
        Some((false, _)) => {
            return Err(MigrateError::Dirty {
                version: script.version,
            });
        }
        Some((true, stored)) if stored != checksum => {
            return Err(MigrateError::Changed {
                version: script.version,
            });
        }
        Some(_) => return Ok(()),
        None => {}
    }
    let started = std::time::Instant::now();
    let mut transaction = sqlx::Connection::begin(&mut *connection)
        .await
        .map_err(pg("starting a schema migration"))?;
    sqlx::raw_sql(script.sql)
        .execute(&mut *transaction)
        .await
        .map_err(pg("applying a schema migration"))?;
    let nanos = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (version, description, success, checksum, execution_time) \
         VALUES ($1, $2, TRUE, $3, $4)"
    )))
    .bind(script.version)
    .bind(script.description)
    .bind(checksum)
    .bind(nanos)
    .execute(&mut *transaction)
    .await
    .map_err(pg("recording a schema migration"))?;
    transaction
        .commit()
        .await
        .map_err(pg("committing a schema migration"))
}
