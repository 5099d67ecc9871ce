//! Turning driver failures into [`StoreError`]s that say what was being done.

use std::fmt::Display;
use std::path::PathBuf;

use mai_core::store::StoreError;

/// A `map_err` adapter: a database failure while `doing` something.
pub(crate) fn db(doing: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database {
        doing,
        source: Box::new(source),
    }
}

/// A row (or value about to become one) that does not describe a valid task.
pub(crate) fn corrupt(task: impl Display, detail: impl Display) -> StoreError {
    StoreError::Corrupt {
        what: format!("task {task}"),
        detail: detail.to_string(),
    }
}

/// Whether `error` is a violated uniqueness constraint (an insert of an existing key).
pub(crate) fn is_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|db_error| db_error.is_unique_violation())
}

/// The database file could not be opened or created; names the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub(crate) struct OpenFailed {
    pub path: PathBuf,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}
