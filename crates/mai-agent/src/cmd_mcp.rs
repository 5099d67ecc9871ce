//! `mai-agent mcp`: the planner tools as an MCP server on stdio, for an MCP host that starts
//! mai-agent as its child process. The engine runs for the whole session (tasks the host creates
//! run, scheduled ones fire) and stops gracefully when the host closes stdin.
//!
//! Must not: write anything but the protocol to stdout — logs go to stderr (set up in `main`),
//! and so does what the bot "sends" to the terminal chat.

use std::sync::Arc;

use anyhow::{Context, Result};
use mai_core::capabilities::McpProxy;
use mai_engine::planner_registry;
use mai_server::ServerState;

use crate::app::{self, ModelChoice};
use crate::settings::Settings;

/// Serves until the client closes stdin, then stops the engine (running tasks are persisted and
/// resume at the next start) and the MCP client connections.
pub async fn run(settings: &Settings) -> Result<()> {
    let _lock = crate::instance::InstanceLock::acquire(&settings.data_dir, "mcp")?;
    let app = app::build(settings, ModelChoice::Configured).await?;
    // The terminal chat normally prints to stdout, which is the protocol here.
    crate::console::connect_on_stderr(&app.host);
    app.engine
        .start()
        .await
        .context("cannot start the engine")?;
    let proxy = app
        .mcp
        .clone()
        .map(|manager| Arc::new(manager) as Arc<dyn McpProxy>);
    let planner = planner_registry(&app.engine, proxy).context("cannot build the planner tools")?;
    let state = ServerState {
        engine: app.engine.clone(),
        host: app.host.clone(),
        bridge: None,
        planner: Arc::new(planner),
        // Nothing shows them over stdio, but the tools count into them all the same.
        metrics: mai_server::metrics::Metrics::new(),
    };
    let served = mai_server::mcp::serve_stdio(state).await;
    app.engine.stop().await;
    if let Some(mcp) = &app.mcp {
        mcp.shutdown();
    }
    served.context("the MCP stdio server failed")
}
