//! Turning driver failures into [`HostError`]s that say what was being done, and the error of
//! opening the host database.

use mai_core::host::HostError;

/// A `map_err` adapter: a database failure while doing `action`.
pub(crate) fn db(action: &'static str) -> impl FnOnce(crate::sql::SqlError) -> HostError {
    move |source| HostError::new(action, source)
}

/// A `map_err` adapter: the database could not run the operation at all (its write
/// transaction failed, or it is closed).
pub(crate) fn unavailable<E: std::error::Error>(
    action: &'static str,
) -> impl FnOnce(E) -> HostError {
    move |source| HostError::new(action, source)
}

/// A stored value that cannot be read back (a corrupt or foreign row).
pub(crate) fn corrupt(action: &'static str, detail: impl std::fmt::Display) -> HostError {
    HostError::new(action, format!("stored data is invalid: {detail}"))
}

/// The host database could not be opened or brought to the current schema.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the host database: {0}")]
    Open(#[source] mai_store::OpenError),
    #[error("cannot bring the host tables to the current schema: {0}")]
    Migrate(#[source] mai_store::MigrateError),
}
