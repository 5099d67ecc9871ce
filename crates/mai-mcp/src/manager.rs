//! The MCP manager: one supervisor task per configured server, the per-server status, the
//! current tool catalog and the calls.
//!
//! Owns server lifecycles (start within a budget, restart with backoff after a crash, stop on
//! config change), the naming of the merged tool set and the role gate of every call (see
//! `roles`): a call for a role below the tool's never reaches the server. Must not touch the tool
//! registry (see `tools`) and never holds a lock across an await: a call clones the server's
//! rmcp `Peer` and awaits on it, so concurrent calls to one server run concurrently.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mai_core::backoff::Backoff;
use mai_core::config::McpServerConfig;
use mai_core::role::{Role, require};
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{Peer, RoleClient};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::connection::{ProcessGroup, Session, StderrTail, connect};
use crate::error::McpError;
use crate::naming::{NameMap, ToolKey};
use crate::result::{DEFAULT_MAX_RESULT_CHARS, shape_result};
use crate::roles::{ServerRoles, same_connection};

/// How long a failed start waits for the child's last stderr lines.
const STDERR_SETTLE: Duration = Duration::from_millis(500);

/// Knobs that are not per server.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// Overall cap on [`McpManager::start`] / [`McpManager::reconcile`] waiting for servers.
    pub startup_cap: Duration,
    /// Characters of result text handed to the model per call.
    pub max_result_chars: usize,
    /// First delay before restarting a crashed server; doubles per failed attempt up to
    /// `restart_backoff_max` (the shared [`Backoff`] policy).
    pub restart_backoff: Duration,
    pub restart_backoff_max: Duration,
    /// Consecutive failed restarts after which the server is left `failed`.
    pub max_restarts: u32,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            startup_cap: Duration::from_secs(30),
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            restart_backoff: Duration::from_millis(500),
            restart_backoff_max: Duration::from_secs(30),
            max_restarts: 5,
        }
    }
}

/// Lifecycle of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    Starting,
    Ready,
    Failed,
    Restarting,
    Stopped,
}

/// What the CLI and the HTTP API show about one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    pub last_error: Option<String>,
    pub tool_count: usize,
    pub restarts: u32,
    /// Process id of a running stdio server (its process group id too).
    pub pid: Option<u32>,
}

/// One MCP tool as the registry will carry it.
#[derive(Debug, Clone)]
pub struct McpTool {
    /// Model-facing name (`mcp_{server}_{tool}`, sanitized, unique).
    pub name: String,
    pub server: String,
    /// The server's own name for the tool, sent in `tools/call`.
    pub raw_name: String,
    pub description: String,
    pub input_schema: Value,
    /// The lowest role that may use it: the server's `tool_roles` entry for it, else its
    /// `min_role`.
    pub min_role: Role,
}

struct Live {
    state: ServerState,
    last_error: Option<String>,
    peer: Option<Peer<RoleClient>>,
    tools: Vec<Tool>,
    restarts: u32,
    pid: Option<u32>,
}

struct ServerSlot {
    /// The entry the server was started with; its roles may since have changed (see `roles`).
    config: McpServerConfig,
    /// The current roles: a reload that changes only roles updates them in place.
    roles: Mutex<ServerRoles>,
    live: Mutex<Live>,
    stop: CancellationToken,
    stderr: StderrTail,
    /// Becomes true once the first start attempt has ended (ready or failed).
    settled: watch::Sender<bool>,
}

impl ServerSlot {
    fn update<R>(&self, change: impl FnOnce(&mut Live) -> R) -> R {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut live)
    }

    fn roles(&self) -> ServerRoles {
        self.roles.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes the roles of `config`; true if they changed.
    fn set_roles(&self, config: &McpServerConfig) -> bool {
        let new = ServerRoles::of(config);
        let mut roles = self.roles.lock().unwrap_or_else(|p| p.into_inner());
        let changed = *roles != new;
        *roles = new;
        changed
    }

    /// Logs each `tool_roles` key naming no tool of the (ready) server: most likely a typo, and
    /// then the tool it meant keeps the server's `min_role`.
    fn warn_unknown_tool_roles(&self) {
        let roles = self.roles();
        let unknown = self.update(|live| {
            if live.state != ServerState::Ready {
                return Vec::new();
            }
            roles.unknown_tools(live.tools.iter().map(|t| t.name.as_ref()))
        });
        for tool in unknown {
            tracing::warn!(
                server = %self.config.name,
                %tool,
                "[[mcp.servers]] tool_roles names a tool this server does not offer; check the name"
            );
        }
    }
}

struct Inner {
    options: ManagerOptions,
    servers: Mutex<BTreeMap<String, Arc<ServerSlot>>>,
    /// Bumped whenever some server's tool set changes; see [`McpManager::subscribe`].
    version: watch::Sender<u64>,
    /// Names this manager last put into a registry, so the next apply can remove exactly them.
    pub(crate) applied: Mutex<Vec<String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Supervisors hold only a weak reference: without this they would keep children alive
        // after the last manager handle is gone.
        let servers = self.servers.get_mut().unwrap_or_else(|p| p.into_inner());
        for slot in servers.values() {
            slot.stop.cancel();
        }
    }
}

/// Manages every configured MCP server. Cheap to clone; all clones share the servers.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("servers", &self.status())
            .finish_non_exhaustive()
    }
}

impl McpManager {
    /// A manager with no servers yet; see [`McpManager::start`].
    pub fn new(options: ManagerOptions) -> McpManager {
        McpManager {
            inner: Arc::new(Inner {
                options,
                servers: Mutex::new(BTreeMap::new()),
                version: watch::Sender::new(0),
                applied: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Starts every server concurrently and waits until each one is ready or has failed, but no
    /// longer than the overall cap. Never fails: a server that cannot start is reported in
    /// [`McpManager::status`] and contributes no tools.
    pub async fn start(&self, servers: &[McpServerConfig]) {
        self.reconcile(servers).await;
    }

    /// Applies a new server list: unchanged servers keep running, changed ones are restarted,
    /// removed ones stopped, new ones started. A server whose entry changed only in `min_role` /
    /// `tool_roles` keeps running with the new roles, which the next call already checks. Waits
    /// for the (re)started ones as [`Self::start`].
    pub async fn reconcile(&self, servers: &[McpServerConfig]) {
        let mut started = Vec::new();
        {
            let mut map = self.lock_servers();
            let wanted: BTreeMap<&str, &McpServerConfig> =
                servers.iter().map(|s| (s.name.as_str(), s)).collect();
            map.retain(|name, slot| {
                let Some(config) = wanted.get(name.as_str()) else {
                    slot.stop.cancel();
                    return false;
                };
                if !same_connection(config, &slot.config) {
                    slot.stop.cancel();
                    return false;
                }
                // Only roles changed: the server keeps running, its tools take the new roles
                // with the bump below.
                if slot.set_roles(config) {
                    slot.warn_unknown_tool_roles();
                }
                true
            });
            for config in servers {
                if map.contains_key(&config.name) {
                    continue;
                }
                let slot = Arc::new(ServerSlot {
                    config: config.clone(),
                    roles: Mutex::new(ServerRoles::of(config)),
                    live: Mutex::new(Live {
                        state: ServerState::Starting,
                        last_error: None,
                        peer: None,
                        tools: Vec::new(),
                        restarts: 0,
                        pid: None,
                    }),
                    stop: CancellationToken::new(),
                    stderr: StderrTail::default(),
                    settled: watch::Sender::new(false),
                });
                map.insert(config.name.clone(), Arc::clone(&slot));
                started.push(slot);
            }
        }
        self.bump();
        let waits = started.iter().map(|slot| {
            let mut settled = slot.settled.subscribe();
            tokio::spawn(supervise(Arc::downgrade(&self.inner), Arc::clone(slot)));
            async move {
                let _ = settled.wait_for(|s| *s).await;
            }
        });
        let _ = tokio::time::timeout(
            self.inner.options.startup_cap,
            futures::future::join_all(waits),
        )
        .await;
    }

    /// Stops every server.
    pub fn shutdown(&self) {
        let mut map = self.lock_servers();
        for slot in map.values() {
            slot.stop.cancel();
        }
        map.clear();
        drop(map);
        self.bump();
    }

    /// Status of every configured server, by name.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.lock_servers()
            .values()
            .map(|slot| {
                slot.update(|live| ServerStatus {
                    name: slot.config.name.clone(),
                    state: live.state,
                    last_error: live.last_error.clone(),
                    tool_count: live.tools.len(),
                    restarts: live.restarts,
                    pid: live.pid,
                })
            })
            .collect()
    }

    /// Changes to the tool set: the value is bumped whenever a server's tools appear, change or
    /// disappear. Whoever owns the registry re-applies on change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }

    /// The current tools of every ready server, named (see [`crate::naming`]), by name, each
    /// with the lowest role that may use it.
    pub fn tools(&self) -> Vec<McpTool> {
        let mut raw = Vec::new();
        for slot in self.lock_servers().values() {
            let roles = slot.roles();
            slot.update(|live| {
                if live.state == ServerState::Ready {
                    for tool in &live.tools {
                        let role = roles.for_tool(&tool.name);
                        raw.push((slot.config.name.clone(), tool.clone(), role));
                    }
                }
            });
        }
        let names = NameMap::build(raw.iter().map(|(server, tool, _)| ToolKey {
            server: server.clone(),
            tool: tool.name.to_string(),
        }));
        let mut tools: Vec<McpTool> = raw
            .into_iter()
            .filter_map(|(server, tool, min_role)| {
                let name = names.name_of(&server, &tool.name)?.to_owned();
                Some(McpTool {
                    name,
                    description: tool.description.as_deref().unwrap_or_default().to_owned(),
                    input_schema: Value::Object((*tool.input_schema).clone()),
                    raw_name: tool.name.to_string(),
                    server,
                    min_role,
                })
            })
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// Exactly which (server, raw tool name) the model-facing `name` stands for right now, from
    /// the same naming as [`Self::tools`]; `None` for anything else (never a prefix match). For
    /// the planner's `call_mcp_tool`, which receives names, not handlers.
    pub fn resolve(&self, name: &str) -> Option<(String, String)> {
        self.tools()
            .into_iter()
            .find(|t| t.name == name)
            .map(|t| (t.server, t.raw_name))
    }

    /// Calls the tool the model knows as `name` (see [`Self::resolve`]) for a caller of `role`.
    pub async fn call_by_name(
        &self,
        role: Role,
        name: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<Value, McpError> {
        let (server, raw_name) = self
            .resolve(name)
            .ok_or_else(|| McpError::UnknownTool(name.to_owned()))?;
        self.call(role, &server, &raw_name, args, cancel).await
    }

    /// Calls `server`'s tool `raw_name` for a caller of `role` and shapes the result for the
    /// model. A role below the tool's current one (see [`McpTool::min_role`]) is refused before
    /// anything is sent. Bounded by the server's `call_timeout_secs` and by `cancel`; either way
    /// rmcp sends `notifications/cancelled` for the abandoned request.
    pub async fn call(
        &self,
        role: Role,
        server: &str,
        raw_name: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<Value, McpError> {
        let slot = self
            .lock_servers()
            .get(server)
            .cloned()
            .ok_or_else(|| McpError::NotConnected(server.to_owned()))?;
        require(role, slot.roles().for_tool(raw_name)).map_err(|denied| {
            McpError::PermissionDenied {
                server: server.to_owned(),
                tool: raw_name.to_owned(),
                required: denied.required,
                actual: denied.actual,
            }
        })?;
        let peer = slot
            .update(|live| live.peer.clone())
            .ok_or_else(|| McpError::NotConnected(server.to_owned()))?;
        let mut params = CallToolRequestParams::new(raw_name.to_owned());
        if let Value::Object(map) = args {
            params = params.with_arguments(map);
        }
        let secs = slot.config.call_timeout_secs.max(1);
        let call = tokio::time::timeout(Duration::from_secs(secs), peer.call_tool(params));
        let result = tokio::select! {
            result = call => result,
            () = cancel.cancelled() => return Err(McpError::Cancelled),
        };
        let result = match result {
            Err(_elapsed) => {
                return Err(McpError::CallTimeout {
                    server: server.to_owned(),
                    secs,
                });
            }
            Ok(Err(e)) => {
                return Err(McpError::Call {
                    server: server.to_owned(),
                    detail: e.to_string(),
                });
            }
            Ok(Ok(result)) => result,
        };
        let json = serde_json::to_value(&result).map_err(|e| McpError::Call {
            server: server.to_owned(),
            detail: format!("unreadable result: {e}"),
        })?;
        Ok(shape_result(&json, self.inner.options.max_result_chars))
    }

    /// Waits until `server` is in `state`, up to `limit`; false on timeout. Note that right
    /// after a crash the status may still say `Ready` until the supervisor notices.
    pub async fn wait_for_state(&self, server: &str, state: ServerState, limit: Duration) -> bool {
        let mut changes = self.subscribe();
        let reached = async {
            loop {
                let now = self
                    .status()
                    .into_iter()
                    .find(|s| s.name == server)
                    .map(|s| s.state);
                if now == Some(state) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(limit, reached).await.is_ok()
    }

    fn lock_servers(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<ServerSlot>>> {
        self.inner.servers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        bump(&self.inner);
    }

    pub(crate) fn applied(&self) -> &Mutex<Vec<String>> {
        &self.inner.applied
    }
}

fn bump(inner: &Inner) {
    inner.version.send_modify(|v| *v += 1);
}

/// One server's whole life: connect within the budget, serve, follow tool-list changes,
/// restart with backoff after a crash, clean up when stopped.
async fn supervise(manager: std::sync::Weak<Inner>, slot: Arc<ServerSlot>) {
    let budget = Duration::from_secs(slot.config.startup_timeout_secs.max(1));
    let mut failures: u32 = 0;
    let mut ever_ready = false;
    loop {
        let attempt = tokio::select! {
            attempt = tokio::time::timeout(budget, connect(&slot.config, &slot.stderr)) => attempt,
            () = slot.stop.cancelled() => break,
        };
        let error = match attempt {
            Ok(Ok(session)) => {
                failures = 0;
                ever_ready = true;
                let outcome = serve(&manager, &slot, session).await;
                match outcome {
                    Served::Stopped => break,
                    Served::Crashed(reason) => reason,
                }
            }
            Ok(Err(e)) => {
                // A child that failed to start usually said why on its way out.
                slot.stderr.settle(STDERR_SETTLE).await;
                e.to_string()
            }
            Err(_) => McpError::StartupTimeout {
                secs: budget.as_secs(),
            }
            .to_string(),
        };
        let error = with_stderr(error, &slot.stderr);
        failures += 1;
        // Only a server that once worked is restarted: one that never started is most likely
        // misconfigured, and retrying would just burn its budget again and again.
        let give_up = !ever_ready || failures > manager_options(&manager).max_restarts;
        slot.update(|live| {
            live.state = if give_up {
                ServerState::Failed
            } else {
                ServerState::Restarting
            };
            live.last_error = Some(error.clone());
            live.peer = None;
            live.pid = None;
            live.tools.clear();
        });
        tracing::warn!(server = %slot.config.name, %error, give_up, "MCP server unavailable");
        slot.settled.send_replace(true);
        notify(&manager);
        if give_up {
            return;
        }
        let options = manager_options(&manager);
        let delay =
            Backoff::new(options.restart_backoff, options.restart_backoff_max).delay(failures - 1);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = slot.stop.cancelled() => break,
        }
        slot.update(|live| live.restarts += 1);
    }
    slot.update(|live| {
        live.state = ServerState::Stopped;
        live.peer = None;
        live.pid = None;
        live.tools.clear();
    });
    slot.settled.send_replace(true);
    notify(&manager);
}

enum Served {
    Stopped,
    Crashed(String),
}

async fn serve(manager: &std::sync::Weak<Inner>, slot: &ServerSlot, session: Session) -> Served {
    let Session {
        service,
        tools,
        mut tools_changed,
        cancel,
        process_group,
    } = session;
    let peer = service.peer().clone();
    slot.update(|live| {
        live.state = ServerState::Ready;
        live.last_error = None;
        live.peer = Some(peer.clone());
        live.tools = tools;
        live.pid = process_group.as_ref().map(ProcessGroup::pid);
    });
    slot.warn_unknown_tool_roles();
    slot.settled.send_replace(true);
    notify(manager);
    tracing::info!(server = %slot.config.name, "MCP server ready");

    let waiting = service.waiting();
    tokio::pin!(waiting);
    let outcome = loop {
        tokio::select! {
            quit = &mut waiting => {
                break Served::Crashed(format!("the server closed the connection ({quit:?})"));
            }
            Some(()) = tools_changed.recv() => {
                match peer.list_all_tools().await {
                    Ok(tools) => {
                        slot.update(|live| live.tools = tools);
                        slot.warn_unknown_tool_roles();
                        notify(manager);
                    }
                    Err(e) => tracing::warn!(server = %slot.config.name, error = %e, "tools/list after list_changed failed"),
                }
            }
            () = slot.stop.cancelled() => {
                cancel.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut waiting).await;
                break Served::Stopped;
            }
        }
    };
    if let Some(group) = process_group {
        group.kill();
    }
    outcome
}

fn with_stderr(error: String, stderr: &StderrTail) -> String {
    let tail = stderr.render();
    if tail.is_empty() {
        error
    } else {
        format!("{error}; stderr:\n{tail}")
    }
}

fn manager_options(manager: &std::sync::Weak<Inner>) -> ManagerOptions {
    manager
        .upgrade()
        .map(|inner| inner.options.clone())
        .unwrap_or_default()
}

fn notify(manager: &std::sync::Weak<Inner>) {
    if let Some(inner) = manager.upgrade() {
        bump(&inner);
    }
}
