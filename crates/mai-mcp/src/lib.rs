//! MCP client for mai-agent (docs/design.md, "Tools"), built on the official Rust SDK `rmcp`.
//!
//! - [`McpManager`]: starts every configured server concurrently (stdio child in its own process
//!   group, or streamable HTTP), reports per-server [`ServerStatus`], restarts crashed servers
//!   with backoff, follows `tools/list_changed`, and calls tools with a per-call timeout.
//! - [`naming`]: `mcp_{server}_{tool}` names and their exact reverse map.
//! - [`apply_to_registry`]: puts the manager's tools into a `ToolRegistry` in one atomic swap,
//!   each with its configured role (`[[mcp.servers]] min_role` / `tool_roles`; admin by default).
//! - [`fetch`]: the native `fetch` tool behind an SSRF guard.
//!
//! This crate does not speak JSON-RPC itself: everything on the wire is rmcp's.

mod connection;
mod error;
pub mod fetch;
mod legacy_sse;
mod manager;
pub mod naming;
mod proxy;
mod result;
mod roles;
mod tools;

pub use connection::substitute_env;
pub use error::McpError;
pub use manager::{ManagerOptions, McpManager, McpTool, ServerState, ServerStatus};
pub use result::{DEFAULT_MAX_RESULT_CHARS, shape_result};
pub use tools::{ApplyReport, apply_to_registry};
