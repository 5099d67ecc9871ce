//! Errors of the MCP client. They end up as text (server status, tool results for the model), so
//! each message says what failed and, where it helps, what to do.

use mai_core::role::Role;

/// Why a server could not be used or a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("could not start the server process {0}")]
    Spawn(String),
    #[error("initialize failed: {0}")]
    Initialize(String),
    #[error("tools/list failed: {0}")]
    ListTools(String),
    #[error("no answer to initialize within {secs}s (startup_timeout_secs)")]
    StartupTimeout { secs: u64 },
    #[error("no MCP tool is named `{0}`; list the MCP tools for the exact names")]
    UnknownTool(String),
    #[error("MCP server `{0}` is not connected")]
    NotConnected(String),
    #[error(
        "MCP server `{server}` did not answer within {secs}s (call_timeout_secs); the call was cancelled"
    )]
    CallTimeout { server: String, secs: u64 },
    #[error("the call was cancelled")]
    Cancelled,
    #[error("MCP server `{server}` failed: {detail}")]
    Call { server: String, detail: String },
    #[error(
        "permission denied: MCP tool `{tool}` of server `{server}` requires role {required}, the \
         caller has role {actual}; the operator can lower it with `min_role` or `tool_roles` in \
         the server's [[mcp.servers]] entry"
    )]
    PermissionDenied {
        server: String,
        tool: String,
        required: Role,
        actual: Role,
    },
}
