//! `mai-agent serve`: the long-running service. Starts the store, engine, MCP client manager,
//! the HTTP API with the MCP server at `/mcp`, the configured chat channels and the config
//! watcher; on SIGINT/SIGTERM stops taking requests, pauses running tasks (paused-by-stop, resumed
//! by the next start) and stops the MCP servers.
//!
//! Every channel hands its messages to one inbound pipeline (`mai_server::inbound`), so a chat
//! message from OneBot, the console or `POST /v1/messages` is treated the same way.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use mai_core::capabilities::McpProxy;
use mai_core::clock::SystemClock;
use mai_core::store::TaskStore;
use mai_host::{IncomingMessage, OneBotChannel, OneBotHandle};
use mai_mcp::McpManager;
use mai_server::ServerState;
use mai_server::http::HttpOptions;
use mai_server::metrics::Metrics;
use mai_store::Store;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::{self, App, ModelChoice};
use crate::instance::InstanceLock;
use crate::retention::Retention;
use crate::settings::Settings;

/// How many received chat messages may wait for the pipeline before channels slow down.
const INBOUND_QUEUE: usize = 1024;
/// How long a stop waits for received messages to be handled.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

pub struct ServeArgs {
    pub listen: Option<SocketAddr>,
}

/// Runs until SIGINT/SIGTERM; returns after a graceful stop.
pub async fn serve(settings: Settings, args: ServeArgs) -> Result<()> {
    let config = settings.config.clone();
    // One engine per data dir: a second `serve` refuses before it binds or opens anything.
    let mut lock = InstanceLock::acquire(&settings.data_dir, "serve")?;
    lock.set_instance(mai_engine::instance_id(&config))?;
    // The same checks as `config check`: a config it refuses never starts serving.
    let findings = crate::preflight::check(&settings)?;
    // Bind before anything starts, so a taken port fails fast and changes nothing.
    let (listener, local) = bind(&config, args.listen).await?;
    lock.set_api(local)?;
    let (state, mcp, store) = start_services(&settings, lock.predecessor()).await?;
    let channels = Channels::start(&state, &config);
    let _reloader = match &settings.config_path {
        Some(path) => Some(crate::reload::watch(
            path,
            state.engine.clone(),
            mcp.clone(),
        )?),
        None => None,
    };
    // Cancelling `stop` also ends open MCP and `/v1/events` streams, which would otherwise
    // hold the graceful HTTP shutdown open forever.
    let stop = CancellationToken::new();
    let signals = Signals::listen()?;
    // Warnings first, then the banner, all before the listener accepts a connection.
    for warning in &findings.warnings {
        eprintln!("warning: {warning}");
    }
    if !crate::preflight::has_api_key(&config.llm) {
        eprintln!("{}", crate::preflight::NO_API_KEY);
    }
    let retention = Retention {
        store,
        host: state.host.clone(),
        storage: config.storage.clone(),
    };
    let _retention = retention.spawn(Arc::new(SystemClock), stop.clone());
    let (zone, source) = state.engine.default_time_zone();
    announce(
        &settings.data_dir,
        settings.config_path.as_ref(),
        local,
        &config,
        &format!("{zone} ({source})"),
    );
    let http = start_http(&state, &config, mcp.clone(), listener, stop.clone());

    signals.wait().await?;
    eprintln!("stopping: pausing running tasks (they resume on the next start)…");
    stop.cancel();
    channels.stop().await;
    state.engine.stop().await;
    if let Some(mcp) = &mcp {
        mcp.shutdown();
    }
    match http.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!("HTTP server ended with an error: {error}"),
        Err(error) => tracing::warn!("HTTP server task failed: {error}"),
    }
    eprintln!("stopped");
    drop(lock);
    Ok(())
}

/// Binds the listen address (`--listen`, else `[server].listen`); returns the listener and the
/// address it got (port 0 becomes a real port).
async fn bind(
    config: &mai_core::config::Config,
    listen: Option<SocketAddr>,
) -> Result<(TcpListener, SocketAddr)> {
    let listen = match listen {
        Some(listen) => listen,
        None => config.server.listen.parse().with_context(|| {
            format!(
                "[server].listen `{}` is not an address",
                config.server.listen
            )
        })?,
    };
    check_exposure(&config.server, listen)?;
    let listener = TcpListener::bind(listen).await.with_context(|| {
        format!(
            "cannot listen on {listen}: is another mai-agent running? choose another with --listen"
        )
    })?;
    let local = listener
        .local_addr()
        .context("cannot read the listen address")?;
    Ok((listener, local))
}

/// Refuses to listen beyond loopback without `[server] auth_token`: every caller of the API acts
/// as an admin (docs/security.md), so an open port would make anyone who reaches it one —
/// unless `[server] allow_no_auth = true` says something in front of it guards it.
fn check_exposure(server: &mai_core::config::ServerConfig, listen: SocketAddr) -> Result<()> {
    let has_token = server.auth_token.as_deref().is_some_and(|t| !t.is_empty());
    if listen.ip().is_loopback() || has_token {
        return Ok(());
    }
    if server.allow_no_auth {
        tracing::warn!(
            "listening on {listen} without [server] auth_token ([server] allow_no_auth = true): \
             anyone who can reach this address can act as an admin"
        );
        return Ok(());
    }
    anyhow::bail!(
        "refusing to listen on {listen} without [server] auth_token: anyone who can reach this \
         address could act as an admin (create tasks, run tools, read chats). Set [server] \
         auth_token (or MAI_AGENT__SERVER__AUTH_TOKEN) and send it as a bearer token, or — if a \
         firewall or an authenticating proxy guards the port — set [server] allow_no_auth = \
         true. To keep it local, listen on 127.0.0.1."
    )
}

/// Opens the store and the host, starts the engine and builds the planner tools: the state
/// every front end serves from, the MCP client manager (for reloads and the stop) and the task
/// store (for the retention job). `predecessor`: the instance that served this data directory
/// before (gone: its leases are released).
async fn start_services(
    settings: &Settings,
    predecessor: Option<&str>,
) -> Result<(ServerState, Option<McpManager>, Store)> {
    let metrics = Metrics::new();
    let App {
        engine,
        host,
        bridge,
        mcp,
        store,
    } = app::build_for_serve(settings, ModelChoice::Configured, &metrics).await?;
    // The previous `serve` of this data directory is gone (its lock is ours): on a shared
    // database its running tasks are adopted now rather than when their leases expire.
    if let Some(previous) = predecessor.filter(|p| *p != engine.instance_id()) {
        store
            .release_leases(previous)
            .await
            .context("could not release the leases of this data directory's previous instance")?;
    }
    // Before the start, so the tasks it resumes log their lives too.
    mai_server::task_log::follow(&engine);
    engine.start().await.context("could not start the engine")?;
    let proxy = mcp.clone().map(|m| Arc::new(m) as Arc<dyn McpProxy>);
    let planner = mai_engine::planner_registry(&engine, proxy)
        .context("could not build the planner tools")?;
    let state = ServerState {
        engine,
        host,
        bridge,
        planner: Arc::new(planner),
        metrics,
    };
    Ok((state, mcp, store))
}

/// The chat channels and the inbound pipeline they feed.
struct Channels {
    pipeline: JoinHandle<()>,
    /// One task per message being handled.
    deliveries: TaskTracker,
    onebot: Option<OneBotHandle>,
    console: Option<JoinHandle<()>>,
}

impl Channels {
    /// Starts the configured channels (OneBot, console), each handing its messages to one
    /// pipeline that handles every message in its own task.
    fn start(state: &ServerState, config: &mai_core::config::Config) -> Channels {
        let (inbound, mut received) = mpsc::channel::<IncomingMessage>(INBOUND_QUEUE);
        let deliveries = TaskTracker::new();
        let pipeline = {
            let (state, deliveries) = (state.clone(), deliveries.clone());
            tokio::spawn(async move {
                while let Some(message) = received.recv().await {
                    let state = state.clone();
                    // One message's slow command (a title from the model) must not hold up
                    // others.
                    deliveries.spawn(async move {
                        let console = message.platform == crate::console::CONSOLE_PLATFORM;
                        match mai_server::inbound::deliver(&state, message).await {
                            // A plain line at the terminal: say what the console chat takes.
                            Ok(mai_server::inbound::Inbound::Stored { .. }) if console => {
                                crate::console::print_plain_line_hint();
                            }
                            Ok(_) => {}
                            Err(error) => tracing::warn!("incoming message not handled: {error}"),
                        }
                    });
                }
            })
        };
        let onebot = config.channels.onebot.enabled.then(|| {
            OneBotChannel::start(
                config.channels.onebot.clone(),
                state.host.clone(),
                inbound.clone(),
            )
        });
        let console = config.channels.console.enabled.then(|| {
            crate::console::spawn_reader(config.channels.console.user_id.clone(), inbound.clone())
        });
        let health = state.metrics.health();
        if let Some(onebot) = &onebot {
            health.add_onebot("onebot", onebot.watch_status());
        }
        if console.is_some() {
            health.add_local_channel("console");
        }
        Channels {
            pipeline,
            deliveries,
            onebot,
            console,
        }
    }

    /// Stops the channels, then handles the messages already received, so an answer that
    /// arrived is stored and reaches its task before tasks pause (bounded: a stuck delivery
    /// does not hold the stop forever).
    async fn stop(self) {
        if let Some(console) = self.console {
            console.abort();
        }
        if let Some(onebot) = self.onebot {
            onebot.shutdown().await;
        }
        let (pipeline, deliveries) = (self.pipeline, self.deliveries);
        let drained = tokio::time::timeout(DRAIN, async {
            let _ = pipeline.await;
            deliveries.close();
            deliveries.wait().await;
        })
        .await;
        if drained.is_err() {
            tracing::warn!("some received messages were still being handled at stop");
        }
    }
}

/// Serves the HTTP API and the dashboard (and the MCP server at `/mcp` when enabled) on
/// `listener` until `stop`; `mcp_servers` is what `GET /v1/mcp/servers` reports.
fn start_http(
    state: &ServerState,
    config: &mai_core::config::Config,
    mcp_servers: Option<McpManager>,
    listener: TcpListener,
    stop: CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let mcp_router = config
        .server
        .mcp_enabled
        .then(|| mai_server::mcp::http_router_until(state.clone(), stop.clone()));
    let router = mai_server::http::router(
        state.clone(),
        HttpOptions {
            config: config.server.clone(),
            mcp: mcp_router,
            shutdown: stop.clone(),
            mcp_servers,
        },
    );
    tokio::spawn(async move {
        axum::serve(mai_server::http::listener(listener), router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    })
}

/// The start-up banner: where it listens, where data lives, the model, the channels, the time
/// zone cron reads (`zone`: the zone and where it came from), how to stop it.
fn announce(
    data_dir: &std::path::Path,
    config_path: Option<&PathBuf>,
    local: SocketAddr,
    config: &mai_core::config::Config,
    zone: &str,
) {
    let config_line = match config_path {
        Some(path) => format!("{} (hot-reloaded)", path.display()),
        None => "built-in defaults (see docs/configuration.md)".into(),
    };
    let mcp = if config.server.mcp_enabled {
        format!(", MCP at http://{local}/mcp")
    } else {
        String::new()
    };
    eprintln!("mai-agent serving on http://{local} (dashboard at /, API under /v1{mcp})");
    eprintln!("  data:   {}", data_dir.display());
    eprintln!("  config: {config_line}");
    eprintln!("  instance: {}", mai_engine::instance_id(config));
    eprintln!(
        "  model:  {}",
        crate::preflight::describe_model(&config.llm)
    );
    if config.host.kind == mai_core::config::HostKind::Maibot {
        eprintln!(
            "  host:   MaiBot, through the bridge its plugin opens at ws://{local}/v1/bridge \
             (parts are held up to {} min while none is connected)",
            config.host.offline_timeout_min
        );
    }
    if config.channels.onebot.enabled {
        eprintln!("  OneBot: {}", config.channels.onebot.url);
    }
    if config.channels.console.enabled {
        eprintln!("  console chat: type a message and press Enter (/mt help for commands)");
    }
    eprintln!("  time:   cron expressions read in {zone}");
    eprintln!("  Ctrl-C stops (running tasks pause and resume on the next start)");
}

/// SIGINT and SIGTERM, listened for from now on (so a signal that arrives right after the
/// banner stops the service gracefully instead of killing it); `wait` returns at the first.
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt()).context("cannot listen for Ctrl-C")?,
                terminate: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    async fn wait(mut self) -> Result<()> {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c()
            .await
            .context("cannot listen for Ctrl-C")?;
        Ok(())
    }
}
