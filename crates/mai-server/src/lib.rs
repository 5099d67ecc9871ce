//! The front doors of a running mai-agent (docs/design.md, "Hosts and bridges"): the HTTP API, the
//! MCP server that offers the planner tools, Prometheus metrics, and the inbound pipeline every
//! chat channel (HTTP ingestion, OneBot, console) feeds its messages through.
//!
//! Everything here calls the engine's task manager facade and the planner registry; nothing
//! reaches the store directly or decides a permission itself.

pub mod health;
pub mod host_context;
pub mod http;
pub mod inbound;
pub mod mcp;
pub mod metrics;
pub mod state;
pub mod task_log;
pub mod trend;

pub use http::{HttpOptions, router};
pub use inbound::{Inbound, InboundError, deliver};
pub use metrics::{MeteredModel, Metrics};
pub use state::ServerState;
