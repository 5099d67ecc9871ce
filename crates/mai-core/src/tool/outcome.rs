//! The result of running a tool, as the model will see it, plus what kind of result it was (for
//! logs and metrics). Refusals and failures are results, never panics of the loop.

use serde_json::{Value, json};

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeKind {
    /// The handler ran and returned.
    Ok,
    /// No tool of that name exists for this role.
    UnknownTool,
    /// The role is below the tool's `min_role`; the handler did not run.
    PermissionDenied,
    /// The arguments did not match the schema; the handler did not run.
    InvalidArguments,
    /// The handler ran and reported an error (or panicked).
    Failed,
}

impl OutcomeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Ok => "ok",
            OutcomeKind::UnknownTool => "unknown_tool",
            OutcomeKind::PermissionDenied => "permission_denied",
            OutcomeKind::InvalidArguments => "invalid_arguments",
            OutcomeKind::Failed => "failed",
        }
    }
}

/// A tool result: `value` goes back to the model as the tool message.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub kind: OutcomeKind,
    pub value: Value,
}

impl ToolOutcome {
    pub fn ok(value: Value) -> Self {
        ToolOutcome {
            kind: OutcomeKind::Ok,
            value,
        }
    }

    /// A refusal or failure: `{"success": false, "error": message}`.
    pub fn error(kind: OutcomeKind, message: impl Into<String>) -> Self {
        ToolOutcome {
            kind,
            value: json!({"success": false, "error": message.into()}),
        }
    }

    pub fn is_ok(&self) -> bool {
        self.kind == OutcomeKind::Ok
    }

    /// The error text of a refusal or failure.
    pub fn error_message(&self) -> Option<&str> {
        (!self.is_ok())
            .then(|| self.value.get("error").and_then(Value::as_str))
            .flatten()
    }
}
