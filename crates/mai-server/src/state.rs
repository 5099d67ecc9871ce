//! What every front door shares: the engine, the embedded host, the MaiBot host when `serve`
//! runs in MaiBot mode, the planner registry and the metrics.

use std::sync::Arc;

use mai_core::tool::ToolRegistry;
use mai_engine::Engine;
use mai_host::{EmbeddedHost, MaiBotHost};

use crate::metrics::Metrics;

/// The running service, as the front doors see it. Cheap to clone.
#[derive(Clone)]
pub struct ServerState {
    pub engine: Arc<Engine>,
    /// The chat store every channel's messages go into. Sends go through the engine's host
    /// (`engine.host()`), which is this one unless `[host] kind = "maibot"`.
    pub host: Arc<EmbeddedHost>,
    /// The engine's host when it is MaiBot's: `GET /v1/bridge` attaches the plugin's socket to
    /// it. `None` with the embedded host.
    pub bridge: Option<MaiBotHost>,
    /// The 11 planner tools (docs/design.md, "The planner"), built once by
    /// `mai_engine::planner_registry`.
    pub planner: Arc<ToolRegistry>,
    /// What `/metrics` shows. Pass the value whose [`Metrics::meter`] wrapped the engine's
    /// model, so model latency shows up; both doors count planner tool calls into it.
    pub metrics: Metrics,
}
