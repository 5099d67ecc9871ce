//! Errors of the task facade: each says what failed and what the caller can do.

use mai_core::store::StoreError;
use mai_core::task::{IllegalTransition, TaskStatus};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    #[error("no task of yours matches `{0}`; list your tasks to see their ids")]
    NotFound(String),
    /// Nothing matches, for a caller who sees every task (an admin, the local CLI).
    #[error("no task matches `{0}`; list the tasks to see their ids")]
    NoSuchTask(String),
    /// A reference too short to be an id prefix, that no title matches either.
    #[error(
        "`{0}` is too short to name a task: give at least 4 characters of its id (or its exact \
         title)"
    )]
    ShortReference(String),
    #[error("`{reference}` matches several tasks ({candidates}); give more characters of the id")]
    Ambiguous {
        reference: String,
        candidates: String,
    },
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A cap of `[limits]` would be exceeded; nothing was created.
    #[error("limit reached: {0}")]
    LimitReached(String),
    #[error("invalid cron expression `{expr}`: {detail} ({accepted})", accepted = crate::cron::ACCEPTED)]
    InvalidCron { expr: String, detail: String },
    #[error("task {short} is {status}; {what}")]
    WrongState {
        short: String,
        status: TaskStatus,
        what: &'static str,
    },
    #[error("the engine is stopping; try again after the restart")]
    Stopping,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Transition(#[from] IllegalTransition),
    #[error("internal error: {0}")]
    Internal(String),
}
