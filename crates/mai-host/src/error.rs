//! Turning driver failures into [`HostError`]s that say what was being done, and the error of
//! opening the host database.

use std::path::PathBuf;

use mai_core::host::HostError;

/// A `map_err` adapter: a database failure while doing `action`.
pub(crate) fn db(action: &'static str) -> impl FnOnce(sqlx::Error) -> HostError {
    move |source| HostError::new(action, source)
}

/// A stored value that cannot be read back (a corrupt or foreign row).
pub(crate) fn corrupt(action: &'static str, detail: impl std::fmt::Display) -> HostError {
    HostError::new(action, format!("stored data is invalid: {detail}"))
}

/// The host database could not be opened or brought to the current schema.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create the directory of the host database {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the host database {}: {source}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: sqlx::Error,
    },
    #[error("cannot read the host schema version: {0}")]
    ReadVersion(#[source] sqlx::Error),
    #[error(
        "the host tables have schema version {found}, newer than the newest this build of \
         mai-agent knows ({known}): upgrade mai-agent or use another database file"
    )]
    TooNew { found: i64, known: i64 },
    #[error("cannot apply the host schema migrations: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
}
