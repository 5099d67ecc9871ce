//! The schema version and the migrations that reach it (`migrations/`, embedded at build time
//! and applied when a store opens).
//!
//! The version is the highest migration applied, as recorded in sqlx's `_sqlx_migrations`
//! table. A database whose version is newer than this build knows is refused before anything
//! touches it: an older binary must not write a schema it does not understand.

use mai_core::store::StoreError;
use sqlx::SqlitePool;
use sqlx::migrate::Migrator;

use crate::error::db;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// A database this build cannot use.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "the database has schema version {found}, newer than the newest this build of mai-agent \
         knows ({known}): it was written by a newer mai-agent; upgrade mai-agent or use another \
         database file"
    )]
    TooNew { found: i64, known: i64 },
}

/// The schema version this build creates and understands.
pub(crate) fn latest_version() -> i64 {
    MIGRATOR
        .iter()
        .map(|migration| migration.version)
        .max()
        .unwrap_or(0)
}

/// Refuses a database from the future, then applies the migrations it lacks.
pub(crate) async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let found = recorded_version(pool, false).await?;
    let known = latest_version();
    if found > known {
        return Err(StoreError::Database {
            doing: "checking the schema version",
            source: Box::new(SchemaError::TooNew { found, known }),
        });
    }
    MIGRATOR
        .run(pool)
        .await
        .map_err(|error| StoreError::Database {
            doing: "applying schema migrations",
            source: Box::new(error),
        })
}

/// The highest migration recorded (only successful ones when `applied_only`); 0 for a database
/// that was never migrated.
pub(crate) async fn recorded_version(
    pool: &SqlitePool,
    applied_only: bool,
) -> Result<i64, StoreError> {
    const DOING: &str = "reading the schema version";
    let has_table: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master \
         WHERE type = 'table' AND name = '_sqlx_migrations')",
    )
    .fetch_one(pool)
    .await
    .map_err(db(DOING))?;
    if !has_table {
        return Ok(0);
    }
    let query = if applied_only {
        "SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success = 1"
    } else {
        "SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations"
    };
    sqlx::query_scalar(query)
        .fetch_one(pool)
        .await
        .map_err(db(DOING))
}
