//! Turning driver failures into [`StoreError`]s that say what was being done.

use std::fmt::Display;

use mai_core::store::StoreError;

use crate::writer::WriteError;

/// A `map_err` adapter: a database failure while `doing` something.
pub(crate) fn db(doing: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Database {
        doing,
        source: Box::new(source),
    }
}

/// A write whose transaction failed (or whose writer is gone) while `doing` something.
pub(crate) fn write_failed(doing: &'static str) -> impl FnOnce(WriteError) -> StoreError {
    move |source| StoreError::Database {
        doing,
        source: Box::new(source),
    }
}

/// A read that could not run because the database is closed.
pub(crate) fn closed(doing: &'static str) -> impl FnOnce(crate::database::Closed) -> StoreError {
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
pub(crate) fn is_unique_violation(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error(),
        Some(failure) if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            || failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
    )
}

/// A `map_err` adapter: a PostgreSQL failure while `doing` something — `Unavailable` when
/// the server could not be reached ([`unreachable`]).
pub(crate) fn pg(doing: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| {
        if unreachable(&source) {
            StoreError::Unavailable {
                doing,
                source: Box::new(source),
            }
        } else {
            StoreError::Database {
                doing,
                source: Box::new(source),
            }
        }
    }
}

/// Whether a PostgreSQL `error` says the server is out of reach rather than that it refused
/// the statement: the connection failed or was cut (I/O, TLS, no connection within the pool's
/// timeout), or the server said it is shutting down or starting (SQLSTATE class 08, 57P01–03).
pub(crate) fn unreachable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(failure) => failure.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// Whether a PostgreSQL `error` is a violated uniqueness constraint.
pub(crate) fn is_pg_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|failure| failure.is_unique_violation())
}
