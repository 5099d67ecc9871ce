//! Wiring: the store, embedded host, model, registry and engine a command runs with, built from
//! settings — the same way for every command, so `tools` shows what `run` uses. Only `serve`
//! (which serves the bridge's WebSocket) puts the MaiBot host in front of the engine when
//! `[host] kind = "maibot"` (on PostgreSQL, one that reaches the bridge of another instance
//! through the database); every other command keeps the embedded host.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use mai_core::clock::SystemClock;
use mai_core::config::{HostKind, LiveConfig, McpConfig};
use mai_core::host::Host;
use mai_core::model::ChatModel;
use mai_core::tool::ToolRegistry;
use mai_engine::Prompts;
use mai_engine::{Engine, EngineDeps};
use mai_host::{EmbeddedConfig, EmbeddedHost, MaiBotConfig, MaiBotHost, RelayConfig};
use mai_llm::{OpenAiClient, ReplayModel};
use mai_mcp::fetch::{FETCH, FetchOptions, Fetcher, SystemResolver, fetch_tool};
use mai_mcp::{ManagerOptions, McpManager, apply_to_registry};
use mai_server::metrics::Metrics;
use mai_store::sqlx::PgPool;
use mai_store::{Backend, Storage, Store};

use crate::settings::Settings;

/// Which model a command talks to.
pub enum ModelChoice<'a> {
    /// The configured OpenAI-compatible API.
    Configured,
    /// Answers replayed from a JSONL cassette (demos, offline runs).
    Replay(&'a Path),
}

/// What a command runs with.
pub struct App {
    pub engine: Arc<Engine>,
    pub host: Arc<EmbeddedHost>,
    /// The engine's host when it is MaiBot's (`serve` with `[host] kind = "maibot"`).
    pub bridge: Option<MaiBotHost>,
    /// The MCP client manager, when `[mcp] enabled` and servers are configured.
    pub mcp: Option<McpManager>,
    /// The task store the engine runs on (for `serve`'s retention job).
    pub store: Store,
}

/// Builds the engine (not started) over the database `[storage]` names: by default one SQLite
/// file in the data directory for the tasks and the embedded host's tables; with a PostgreSQL
/// URL, both in that database.
pub async fn build(settings: &Settings, model: ModelChoice<'_>) -> Result<App> {
    build_with(settings, model, None, false).await
}

/// As [`build`] for `serve`: every model call timed into `metrics` (for `/metrics`), and the
/// MaiBot host in front of the engine when `[host] kind = "maibot"`.
pub async fn build_for_serve(
    settings: &Settings,
    model: ModelChoice<'_>,
    metrics: &Metrics,
) -> Result<App> {
    build_with(settings, model, Some(metrics), true).await
}

async fn build_with(
    settings: &Settings,
    model: ModelChoice<'_>,
    metrics: Option<&Metrics>,
    serving: bool,
) -> Result<App> {
    crate::data_dir::prepare(&settings.data_dir)?;
    if settings.postgres_url().is_none() {
        crate::data_dir::private_database(&settings.database_path())?;
    }
    // Opened once: on SQLite the host's tables live next to the tasks, read through the same
    // readers and written through the same writer, in one queue with the store's writes.
    let location = settings.storage_location();
    let storage = Storage::open(&location)
        .await
        .with_context(|| format!("cannot open the task database ({})", location.describe()))?;
    let store = storage.store;
    let shared_pool = match &storage.host {
        Backend::Postgres(pool) => Some(pool.clone()),
        Backend::Sqlite(_) => None,
    };
    let host = Arc::new(
        EmbeddedHost::on(storage.host, EmbeddedConfig::default())
            .await
            .with_context(|| format!("cannot open the chat tables in {}", location.describe()))?,
    );
    crate::console::connect(&host);
    let config = Arc::new(LiveConfig::new(settings.config.clone())?);
    let model: Arc<dyn ChatModel> = match model {
        ModelChoice::Configured => Arc::new(
            OpenAiClient::new(settings.config.llm.clone())
                .context("cannot set up the model client")?,
        ),
        ModelChoice::Replay(path) => Arc::new(
            ReplayModel::open(path)
                .with_context(|| format!("cannot load cassette {}", path.display()))?,
        ),
    };
    let model = match metrics {
        Some(metrics) => metrics.meter(model),
        None => model,
    };
    let prompts = match &settings.config.prompts.templates_dir {
        Some(dir) => Prompts::with_override_dir(dir)
            .with_context(|| format!("cannot load prompt templates from {}", dir.display()))?,
        None => Prompts::embedded(),
    };
    let bridge = if serving && settings.config.host.kind == HostKind::Maibot {
        Some(maibot_host(settings, shared_pool).await?)
    } else {
        None
    };
    let engine_host: Arc<dyn Host> = match &bridge {
        Some(bridge) => Arc::new(bridge.clone()),
        None => host.clone(),
    };
    let engine = Engine::new(EngineDeps {
        store: Arc::new(store.clone()),
        model,
        host: engine_host,
        registry: Arc::new(ToolRegistry::new()),
        config,
        prompts: Arc::new(prompts),
        clock: Arc::new(SystemClock),
        files_root: Some(settings.data_dir.join("files")),
    })
    .await?;
    let mcp = connect_mcp(settings, &engine).await?;
    Ok(App {
        engine,
        host,
        bridge,
        mcp,
        store,
    })
}

/// The MaiBot host of `serve`; on a PostgreSQL database (`pool`), one that routes requests to
/// the instance holding the bridge while none is connected here.
async fn maibot_host(settings: &Settings, pool: Option<PgPool>) -> Result<MaiBotHost> {
    let config = MaiBotConfig::from_config(&settings.config.host);
    let Some(pool) = pool else {
        return Ok(MaiBotHost::new(config));
    };
    let terms = settings.config.lease_terms()?;
    let relay = RelayConfig {
        instance: mai_engine::instance_id(&settings.config),
        lease: terms.lease,
        heartbeat: terms.heartbeat,
    };
    Ok(MaiBotHost::shared(config, pool, relay).await?)
}

/// Starts the configured MCP servers (concurrently, each within its budget; a failing one is
/// reported, never fatal), puts their tools into the registry and keeps them in sync with the
/// servers' tool lists; adds the native `fetch` tool when `[mcp] fetch_enabled`. With `[mcp]
/// enabled` the manager exists even without servers, so a reload can add some.
async fn connect_mcp(settings: &Settings, engine: &Arc<Engine>) -> Result<Option<McpManager>> {
    let mcp = &settings.config.mcp;
    sync_fetch_tool(engine.registry(), mcp)?;
    if !mcp.enabled {
        return Ok(None);
    }
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&mcp.servers).await;
    for status in manager.status() {
        if let Some(error) = &status.last_error {
            tracing::warn!(server = %status.name, state = ?status.state, %error, "MCP server not ready");
        }
    }
    apply_to_registry(&manager, engine.registry());
    // A server's tool list changed (restart, list_changed, reload): swap the registry's MCP tools.
    let mut changes = manager.subscribe();
    let (watcher, registry) = (manager.clone(), Arc::clone(engine.registry()));
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            apply_to_registry(&watcher, &registry);
        }
    });
    Ok(Some(manager))
}

/// Registers the native `fetch` tool when `[mcp] enabled` and `fetch_enabled` (with the SSRF
/// guard as configured), and removes it otherwise; called at start-up and on every reload.
pub fn sync_fetch_tool(registry: &ToolRegistry, mcp: &McpConfig) -> Result<()> {
    if mcp.enabled && mcp.fetch_enabled {
        let options = FetchOptions {
            block_internal: mcp.fetch_block_internal,
            respect_robots: mcp.fetch_respect_robots,
            ..FetchOptions::default()
        };
        let fetch = fetch_tool(Fetcher::new(options, Arc::new(SystemResolver)))
            .context("cannot set up the fetch tool")?;
        registry.register(fetch);
    } else {
        registry.unregister(FETCH);
    }
    Ok(())
}
