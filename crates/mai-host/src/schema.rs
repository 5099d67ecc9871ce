//! The host's schema (`migrations/`, embedded at build time) and how values are stored.
//!
//! Migrations are recorded in `_mai_host_migrations`, apart from the task store's
//! `_sqlx_migrations`, so both can live in one database file without either seeing the other's
//! versions as unknown. Times are stored as INTEGER milliseconds since the epoch (UTC).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;
use sqlx::migrate::Migrator;

use crate::error::OpenError;

/// The table recording which host migrations ran.
pub(crate) const MIGRATIONS_TABLE: &str = "_mai_host_migrations";

static EMBEDDED: Migrator = sqlx::migrate!("./migrations");

static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = Migrator::with_migrations(EMBEDDED.iter().cloned().collect());
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
});

/// The host schema version this build creates and understands.
pub(crate) fn latest_version() -> i64 {
    MIGRATOR
        .iter()
        .map(|migration| migration.version)
        .max()
        .unwrap_or(0)
}

/// Refuses host tables from a newer build, then applies the migrations they lack.
pub(crate) async fn migrate(pool: &SqlitePool) -> Result<(), OpenError> {
    let found = recorded_version(pool).await?;
    let known = latest_version();
    if found > known {
        return Err(OpenError::TooNew { found, known });
    }
    MIGRATOR.run(pool).await.map_err(OpenError::Migrate)
}

/// The highest host migration recorded; 0 when the host tables were never created.
pub(crate) async fn recorded_version(pool: &SqlitePool) -> Result<i64, OpenError> {
    let has_table: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)",
    )
    .bind(MIGRATIONS_TABLE)
    .fetch_one(pool)
    .await
    .map_err(OpenError::ReadVersion)?;
    if !has_table {
        return Ok(0);
    }
    sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM _mai_host_migrations")
        .fetch_one(pool)
        .await
        .map_err(OpenError::ReadVersion)
}

/// A time as stored.
pub(crate) fn to_millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

/// A stored time; `None` for a value no `DateTime` can hold (a corrupt row).
pub(crate) fn from_millis(millis: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(millis)
}
