//! Typed configuration (reference: docs/configuration.md): one TOML document, every section with
//! defaults, every value overridable from the environment as `MAI_AGENT__<SECTION>__<KEY>`.
//!
//! Parsing and validation live here and do no I/O: the binary reads the file and the environment
//! and hands both in. Errors name the key and say what is expected.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::permission::{PermissionConfig, PermissionConfigError, PermissionResolver};

mod checks;
mod limits;
mod llm;
mod server;
pub(crate) use checks::suggested_id as checks_suggested_id;
pub use checks::{OTHER_ENV_VARS, StorageTarget, storage_target, unknown_env_vars};
pub use limits::{
    Budget, BudgetAction, BudgetsConfig, LimitsConfig, ModelPrice, PlannerConfig, PricesConfig,
};
pub use llm::{LlmConfig, ModelNames};
pub use server::{ChannelsConfig, ConsoleChannelConfig, OneBotConfig, ServerConfig};

/// The prefix of environment overrides: `MAI_AGENT__TASK__MAX_ROUNDS=50`.
pub const ENV_PREFIX: &str = "MAI_AGENT__";

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub llm: LlmConfig,
    pub permission: PermissionConfig,
    pub task: TaskConfig,
    pub planner_board: PlannerBoardConfig,
    pub polish: PolishConfig,
    pub splitter: SplitterConfig,
    pub send: SendConfig,
    pub mcp: McpConfig,
    pub search: SearchConfig,
    pub subagent: SubagentConfig,
    pub shell: ShellConfig,
    pub files: FilesConfig,
    pub plugin_api: PluginApiConfig,
    pub storage: StorageConfig,
    pub prompts: PromptsConfig,
    pub server: ServerConfig,
    pub channels: ChannelsConfig,
    pub planner: PlannerConfig,
    pub limits: LimitsConfig,
    pub prices: PricesConfig,
    pub host: HostConfig,
}

/// Which host `serve` talks to: its own chat store and channels, or MaiBot through the bridge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostKind {
    /// The embedded host: mai-agent's own chat store, the OneBot/console/HTTP channels.
    #[default]
    Embedded,
    /// MaiBot, through the bridge its plugin opens at `GET /v1/bridge`.
    Maibot,
}

/// `[host]`: the host the engine sends through and reads chat context from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    pub kind: HostKind,
    /// MaiBot: how long a message part waits (is *held*) for a bridge after the last one went
    /// away, before its send fails. 0 = fail at once while no bridge is connected.
    pub offline_timeout_min: u32,
    /// MaiBot: how long one request over the bridge waits for the plugin's answer.
    pub request_timeout_secs: u32,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            kind: HostKind::Embedded,
            offline_timeout_min: 30,
            request_timeout_secs: 30,
        }
    }
}

/// `[task]`: limits of the scheduler and the agent loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskConfig {
    pub max_concurrent_tasks: u32,
    /// On a store several instances share: the most tasks running at once across all of them
    /// (a claim beyond it waits until a running task ends). `None` = no cap.
    pub cluster_max_running: Option<u32>,
    /// 0 = unlimited.
    pub max_runtime_min: u32,
    /// How long `ask_user` waits for an answer.
    pub default_timeout_min: u32,
    pub max_rounds: u32,
    /// The IANA time zone cron expressions are read in (`Asia/Shanghai`); `None` = the system's.
    /// A task created with its own zone keeps that one. Also where a budget's day starts.
    pub timezone: Option<String>,
    /// The same tool called with the same arguments this many times in one run of a task gets
    /// a result telling the model so instead of running again (0 = never).
    pub repeat_warn_after: u32,
    /// ... and this many times fails the task, naming the tool (0 = never).
    pub repeat_fail_after: u32,
}

impl TaskConfig {
    /// Checks `timezone` names a known zone.
    fn validate_timezone(&self) -> Result<(), ConfigError> {
        match &self.timezone {
            Some(name) => crate::time_zone::parse_time_zone(name)
                .map(|_| ())
                .map_err(|problem| ConfigError::Invalid {
                    section: "task",
                    key: "timezone",
                    problem,
                }),
            None => Ok(()),
        }
    }
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            max_concurrent_tasks: 4,
            cluster_max_running: None,
            max_runtime_min: 0,
            default_timeout_min: 10,
            max_rounds: 30,
            timezone: None,
            repeat_warn_after: 3,
            repeat_fail_after: 5,
        }
    }
}

/// `[planner_board]`: the context block the planner gets before each request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerBoardConfig {
    pub enabled: bool,
    pub max_waiting: u32,
}

impl Default for PlannerBoardConfig {
    fn default() -> Self {
        PlannerBoardConfig {
            enabled: true,
            max_waiting: 5,
        }
    }
}

/// `[polish]`: rewriting machine output into a chat reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolishConfig {
    pub enabled: bool,
    pub use_jargon: bool,
}

impl Default for PolishConfig {
    fn default() -> Self {
        PolishConfig {
            enabled: true,
            use_jargon: true,
        }
    }
}

/// `[splitter]`: cutting long replies into chat-sized messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SplitterConfig {
    /// Read from `enable` too (the old spelling), with a warning.
    pub enabled: bool,
    pub max_length: u32,
    pub max_messages: u32,
}

impl Default for SplitterConfig {
    fn default() -> Self {
        SplitterConfig {
            enabled: true,
            max_length: 1000,
            max_messages: 5,
        }
    }
}

/// `[send]`: delivery retries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SendConfig {
    pub max_retries: u32,
    /// First retry delay; each further retry doubles it (plus jitter).
    pub retry_base_ms: u64,
}

impl Default for SendConfig {
    fn default() -> Self {
        SendConfig {
            max_retries: 3,
            retry_base_ms: 500,
        }
    }
}

/// How mai-agent talks to one MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum McpTransport {
    #[default]
    Stdio,
    Http,
    Sse,
}

/// One entry of `[[mcp.servers]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    pub name: String,
    #[serde(default)]
    pub transport: McpTransport,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout_secs: u64,
    #[serde(default = "default_call_timeout")]
    pub call_timeout_secs: u64,
    /// The lowest role whose tasks (and planner speakers) may use this server's tools. Admin by
    /// default: an MCP server can do anything its process can, so reach is granted by choice.
    #[serde(default = "default_mcp_min_role")]
    pub min_role: crate::role::Role,
    /// Per-tool overrides of `min_role`, by the tool's name on the server
    /// (`tool_roles = { read_text_file = "user" }`).
    #[serde(default)]
    pub tool_roles: BTreeMap<String, crate::role::Role>,
}

fn default_mcp_min_role() -> crate::role::Role {
    crate::role::Role::Admin
}

fn default_startup_timeout() -> u64 {
    10
}

fn default_call_timeout() -> u64 {
    60
}

/// `[mcp]`: MCP client servers and the native fetch tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    pub enabled: bool,
    pub servers: Vec<McpServerConfig>,
    pub fetch_enabled: bool,
    pub fetch_block_internal: bool,
    /// Ask each site's robots.txt before `fetch` reads a page.
    pub fetch_respect_robots: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            enabled: true,
            servers: Vec::new(),
            fetch_enabled: false,
            fetch_block_internal: true,
            fetch_respect_robots: false,
        }
    }
}

/// `[search]`: limits of the information tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    pub max_results: u32,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig { max_results: 20 }
    }
}

/// `[subagent]`: in-process helper loops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubagentConfig {
    pub enabled: bool,
    pub max_parallel_subagents: u32,
    pub max_rounds: u32,
    pub max_result_chars: u32,
}

impl Default for SubagentConfig {
    fn default() -> Self {
        SubagentConfig {
            enabled: true,
            max_parallel_subagents: 3,
            max_rounds: 10,
            max_result_chars: 4000,
        }
    }
}

/// `[shell]`: `run_command` for admin tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShellConfig {
    /// Off by default: planner-created tasks run as admin, so a host that enables the shell
    /// trusts its planner with the machine.
    pub enabled: bool,
    pub timeout_seconds: u64,
    pub max_output_chars: u32,
    /// Confine commands with Landlock where the kernel supports it.
    pub sandbox: bool,
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            enabled: false,
            timeout_seconds: 60,
            max_output_chars: 8000,
            sandbox: false,
        }
    }
}

/// `[files]`: the `read`/`write` sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// Let admin tasks reach the whole host filesystem.
    pub admin_open: bool,
    pub max_read_bytes: u64,
    pub max_write_bytes: u64,
    /// How many MiB of files each requester may keep in the sandbox (checked on every write).
    pub quota_mb: u64,
}

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            admin_open: false,
            max_read_bytes: 256 * 1024,
            max_write_bytes: 1024 * 1024,
            quota_mb: 100,
        }
    }
}

/// `[plugin_api]`: host plugin APIs exposed as `call_*` tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginApiConfig {
    pub allowlist: Vec<String>,
}

/// `[storage]`: where tasks live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// A SQLite file (a bare path or `sqlite://PATH`; default: `<data_dir>/mai-agent.db`) or a
    /// PostgreSQL database (`postgres://…`). Other schemes are refused (see [`storage_target`]).
    pub url: Option<String>,
    /// How durable each commit is: `normal` (default; survives a crash of the process) or
    /// `full` (synced to disk before it returns; survives a power loss too, at the cost of one
    /// sync per commit).
    pub synchronous: SyncMode,
    /// Stored chat messages of the embedded host older than this many days are deleted by
    /// `serve` in the background; 0 keeps them forever.
    pub keep_messages_days: u32,
    /// Finished tasks (completed, failed, cancelled) with their history, this many days after
    /// they finished; 0 keeps them forever. Usage records are never deleted.
    pub keep_finished_days: u32,
    /// PostgreSQL with several instances: a running task's lease lasts this many seconds from
    /// its last renewal; a task of an instance that died resumes elsewhere within
    /// `lease_secs + heartbeat_secs` (see `lease`). At least twice `heartbeat_secs`.
    pub lease_secs: u64,
    /// PostgreSQL with several instances: how often an instance renews its leases and sweeps for
    /// expired ones, in seconds.
    pub heartbeat_secs: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            url: None,
            synchronous: SyncMode::default(),
            keep_messages_days: 90,
            keep_finished_days: 30,
            lease_secs: 20,
            heartbeat_secs: 5,
        }
    }
}

/// `[storage] synchronous`: SQLite's `synchronous` setting for the database file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    #[default]
    Normal,
    Full,
}

/// `[prompts]`: where prompt templates may be overridden.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PromptsConfig {
    pub templates_dir: Option<PathBuf>,
}

/// A configuration that cannot be used, with the key at fault and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("config is not valid TOML or has a wrong key or type: {0}")]
    Syntax(String),
    #[error("environment override {var}: {reason}")]
    Env { var: String, reason: String },
    #[error(transparent)]
    Permission(#[from] PermissionConfigError),
    #[error("config {0}")]
    Llm(String),
    /// A problem found by the checks on the raw document, its message complete.
    #[error("{0}")]
    Raw(String),
    #[error("config [{section}].{key} {problem}")]
    Invalid {
        section: &'static str,
        key: &'static str,
        problem: String,
    },
}

/// A parsed config and what the operator should hear about it (old spellings) without it
/// being an error.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub config: Config,
    pub warnings: Vec<String>,
}

impl Config {
    /// Parse a TOML document, apply environment overrides, validate.
    pub fn parse<I>(toml_text: &str, env: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        Config::parse_with_warnings(toml_text, env).map(|parsed| parsed.config)
    }

    /// As [`Config::parse`], keeping the warnings. An error that only the environment
    /// overrides cause is reported as [`ConfigError::Env`] naming the first variable at fault,
    /// so the file is not blamed for it.
    pub fn parse_with_warnings<I>(toml_text: &str, env: I) -> Result<Parsed, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let table: toml::Table =
            toml::from_str(toml_text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let env: Vec<(String, String)> = env
            .into_iter()
            .filter(|(var, _)| var.starts_with(ENV_PREFIX))
            .collect();
        let error = match Config::from_table(table.clone(), &env) {
            Ok(parsed) => return Ok(parsed),
            Err(error @ ConfigError::Env { .. }) => return Err(error),
            Err(error) if env.is_empty() => return Err(error),
            Err(error) => error,
        };
        if Config::from_table(table.clone(), &[]).is_err() {
            return Err(error);
        }
        // The file alone is fine: find the variable that breaks it.
        for end in 1..=env.len() {
            if let Err(reason) = Config::from_table(table.clone(), &env[..end]) {
                return Err(ConfigError::Env {
                    var: env[end - 1].0.clone(),
                    reason: reason.to_string(),
                });
            }
        }
        Err(error)
    }

    fn from_table(mut table: toml::Table, env: &[(String, String)]) -> Result<Parsed, ConfigError> {
        apply_env_overrides(&mut table, env.iter().cloned())?;
        checks::permission_numbers(&table)?;
        let warnings = checks::splitter_enable(&mut table)?.into_iter().collect();
        let config: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Syntax(one_line(&e.to_string())))?;
        config.validate()?;
        Ok(Parsed { config, warnings })
    }

    /// The built-in defaults with environment overrides applied.
    pub fn from_env<I>(env: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        Config::parse("", env)
    }

    /// The lease terms of `[storage] lease_secs` and `heartbeat_secs`.
    pub fn lease_terms(&self) -> Result<crate::lease::LeaseTerms, ConfigError> {
        crate::lease::LeaseTerms::from_secs(self.storage.lease_secs, self.storage.heartbeat_secs)
            .map_err(|problem| ConfigError::Invalid {
                section: "storage",
                key: "lease_secs",
                problem,
            })
    }

    /// The name this instance gives itself: `[server] instance_id`, else host name and pid.
    pub fn instance_id(&self, host_name: &str, pid: u32) -> String {
        match self.server.instance_id.as_deref() {
            Some(id) => id.trim().to_owned(),
            None => crate::lease::default_instance_id(host_name, pid),
        }
    }

    /// Checks that types alone cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let onebot = &self.channels.onebot;
        let (task, sub, split) = (&self.task, &self.subagent, &self.splitter);
        // (section, key, value, minimum), checked in this order.
        #[rustfmt::skip]
        let minimums: [(&'static str, &'static str, u64, u64); 16] = [
            ("task", "max_concurrent_tasks", task.max_concurrent_tasks.into(), 1),
            ("task", "max_rounds", task.max_rounds.into(), 1),
            ("host", "request_timeout_secs", self.host.request_timeout_secs.into(), 1),
            ("task", "default_timeout_min", task.default_timeout_min.into(), 1),
            ("splitter", "max_length", split.max_length.into(), 16),
            ("splitter", "max_messages", split.max_messages.into(), 1),
            ("subagent", "max_parallel_subagents", sub.max_parallel_subagents.into(), 1),
            ("subagent", "max_rounds", sub.max_rounds.into(), 1),
            ("subagent", "max_result_chars", sub.max_result_chars.into(), 100),
            ("shell", "timeout_seconds", self.shell.timeout_seconds, 1),
            ("shell", "max_output_chars", self.shell.max_output_chars.into(), 100),
            ("search", "max_results", self.search.max_results.into(), 1),
            ("llm", "timeout_secs", self.llm.timeout_secs, 1),
            ("server", "max_body_bytes", self.server.max_body_bytes as u64, 1024),
            ("channels.onebot", "send_timeout_secs", onebot.send_timeout_secs, 1),
            ("channels.onebot", "reconnect_max_secs", onebot.reconnect_max_secs, 1),
        ];
        for (section, key, value, min) in minimums {
            if value < min {
                return Err(ConfigError::Invalid {
                    section,
                    key,
                    problem: format!("must be ≥ {min}, got {value}"),
                });
            }
        }
        if task.cluster_max_running == Some(0) {
            return Err(ConfigError::Invalid {
                section: "task",
                key: "cluster_max_running",
                problem: "must be ≥ 1, got 0 (leave it out for no cluster-wide cap)".to_owned(),
            });
        }
        task.validate_timezone()?;
        self.validate_addresses()?;
        self.validate_names()?;
        storage_target(self.storage.url.as_deref())?;
        self.lease_terms()?;
        PermissionResolver::new(&self.permission)?;
        Ok(())
    }

    /// The addresses: the model's base URL, the listen address, the OneBot URL.
    fn validate_addresses(&self) -> Result<(), ConfigError> {
        let onebot = &self.channels.onebot;
        if !(self.llm.base_url.starts_with("http://") || self.llm.base_url.starts_with("https://"))
        {
            return Err(ConfigError::Invalid {
                section: "llm",
                key: "base_url",
                problem: format!(
                    "must start with http:// or https://, got `{}`",
                    self.llm.base_url
                ),
            });
        }
        if self.server.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::Invalid {
                section: "server",
                key: "listen",
                problem: format!(
                    "must be an IP address and port like 127.0.0.1:8760, got `{}`",
                    self.server.listen
                ),
            });
        }
        if onebot.enabled && !(onebot.url.starts_with("ws://") || onebot.url.starts_with("wss://"))
        {
            return Err(ConfigError::Invalid {
                section: "channels.onebot",
                key: "url",
                problem: format!("must start with ws:// or wss://, got `{}`", onebot.url),
            });
        }
        Ok(())
    }

    /// The names that must be unique or well-formed: MCP servers, this instance.
    fn validate_names(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        for server in &self.mcp.servers {
            if !names.insert(server.name.as_str()) {
                return Err(ConfigError::Invalid {
                    section: "mcp",
                    key: "servers",
                    problem: format!(
                        "has two servers named `{}`; names must be unique",
                        server.name
                    ),
                });
            }
        }
        if self
            .server
            .instance_id
            .as_deref()
            .is_some_and(|id| id.trim().is_empty() || id.chars().any(char::is_control))
        {
            return Err(ConfigError::Invalid {
                section: "server",
                key: "instance_id",
                problem: "must be a non-empty name without control characters (or unset: host \
                          name and process id)"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// The permission resolver of this config (validated in [`Config::parse`]).
    pub fn permission_resolver(&self) -> Result<PermissionResolver, PermissionConfigError> {
        PermissionResolver::new(&self.permission)
    }
}

/// A typing error of the parsed document on one line: the toml crate ends it with
/// "\nin `section.key`\n", which would break the sentence it is part of in two.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A validated config and what is derived from it, swapped as one value on reload.
#[derive(Debug)]
pub struct ConfigSnapshot {
    pub config: std::sync::Arc<Config>,
    pub permissions: PermissionResolver,
}

/// The live configuration: readers take a lock-free snapshot; a reload swaps in a new one only
/// if it validates, so a bad edit keeps the last good config.
#[derive(Debug)]
pub struct LiveConfig {
    current: arc_swap::ArcSwap<ConfigSnapshot>,
}

impl LiveConfig {
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        Ok(LiveConfig {
            current: arc_swap::ArcSwap::from_pointee(Self::snapshot(config)?),
        })
    }

    fn snapshot(config: Config) -> Result<ConfigSnapshot, ConfigError> {
        config.validate()?;
        let permissions = config.permission_resolver()?;
        Ok(ConfigSnapshot {
            config: std::sync::Arc::new(config),
            permissions,
        })
    }

    /// The current snapshot.
    pub fn load(&self) -> std::sync::Arc<ConfigSnapshot> {
        self.current.load_full()
    }

    /// The current config.
    pub fn config(&self) -> std::sync::Arc<Config> {
        std::sync::Arc::clone(&self.current.load().config)
    }

    /// Replaces the config if it is valid; otherwise keeps the current one and says why.
    pub fn replace(&self, config: Config) -> Result<(), ConfigError> {
        self.current
            .store(std::sync::Arc::new(Self::snapshot(config)?));
        Ok(())
    }
}

/// Applies `MAI_AGENT__SECTION__KEY=value`. Values are read as TOML when they parse as a TOML
/// value (numbers, booleans, arrays), else taken as strings.
fn apply_env_overrides<I>(table: &mut toml::Table, env: I) -> Result<(), ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    for (var, raw) in env {
        let Some(path) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let mut parts: Vec<String> = path.split("__").map(str::to_lowercase).collect();
        if parts.len() < 2 || parts.iter().any(String::is_empty) {
            return Err(ConfigError::Env {
                var,
                reason: "expected MAI_AGENT__<SECTION>__<KEY> (or deeper, e.g. \
                         MAI_AGENT__LLM__MODELS__AGENT)"
                    .into(),
            });
        }
        // `MAI_AGENT__LLM__MODEL` is the documented shorthand for the agent model.
        if parts == ["llm", "model"] {
            parts = vec!["llm".into(), "models".into(), "agent".into()];
        }
        let Some(key) = parts.pop() else { continue };
        let mut current = &mut *table;
        for section in &parts {
            let entry = current
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let toml::Value::Table(inner) = entry else {
                return Err(ConfigError::Env {
                    var,
                    reason: format!("`{section}` is a value, not a section"),
                });
            };
            current = inner;
        }
        current.insert(key, parse_env_value(&raw));
    }
    Ok(())
}

fn parse_env_value(raw: &str) -> toml::Value {
    let probe = format!("v = {raw}");
    match toml::from_str::<toml::Table>(&probe) {
        Ok(mut table) => table
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_owned())),
        Err(_) => toml::Value::String(raw.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_wrong_type_or_unknown_key_is_reported_on_one_line_naming_the_key() {
        let err = Config::parse("", env(&[("MAI_AGENT__TASK__MAX_ROUNDS", "abc")])).unwrap_err();
        let ConfigError::Env { reason, .. } = &err else {
            panic!("{err:?}")
        };
        assert!(!reason.contains('\n'), "{reason:?}");
        assert!(reason.contains("`task.max_rounds`"), "{reason}");
        let err = Config::parse("[task]\nmax_roundz = 3\n", env(&[])).unwrap_err();
        let message = err.to_string();
        assert!(!message.contains('\n'), "{message:?}");
        assert!(message.contains("max_roundz") && message.contains("in `task`"));
    }

    #[test]
    fn defaults_match_the_spec() {
        let config = Config::from_env(env(&[])).unwrap();
        assert_eq!(config.task.max_concurrent_tasks, 4);
        assert_eq!(config.task.max_rounds, 30);
        assert_eq!(config.task.default_timeout_min, 10);
        assert_eq!(config.splitter.max_length, 1000);
        assert_eq!(config.subagent.max_parallel_subagents, 3);
        assert_eq!(config.shell.max_output_chars, 8000);
        assert!(config.mcp.fetch_block_internal);
        assert!(config.plugin_api.allowlist.is_empty());
        assert!(!config.files.admin_open);
    }

    #[test]
    fn env_overrides_win_over_the_file() {
        let text = "[task]\nmax_rounds = 12\n[llm]\nbase_url = \"http://a/v1\"\n";
        let config = Config::parse(
            text,
            env(&[
                ("MAI_AGENT__TASK__MAX_ROUNDS", "50"),
                ("MAI_AGENT__LLM__BASE_URL", "http://127.0.0.1:9/v1"),
                ("MAI_AGENT__LLM__API_KEY", "sk-123"),
                ("MAI_AGENT__LLM__MODEL", "deepseek-chat"),
                ("MAI_AGENT__LLM__MODELS__TITLE", "small"),
                ("MAI_AGENT__PERMISSION__ADMINS", "[\"qq:1\"]"),
                ("OTHER", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(config.task.max_rounds, 50);
        assert_eq!(config.llm.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(config.llm.api_key.as_deref(), Some("sk-123"));
        assert_eq!(config.permission.admins, ["qq:1"]);
        assert_eq!(config.llm.models.agent, "deepseek-chat");
        assert_eq!(config.llm.models.title.as_deref(), Some("small"));
    }

    #[test]
    fn bad_config_is_reported_precisely() {
        let err = Config::parse("[task]\nmax_concurrent_tasks = 0\n", env(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config [task].max_concurrent_tasks must be ≥ 1, got 0"
        );
        let err = Config::parse("[task]\ncluster_max_running = 0\n", env(&[])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("config [task].cluster_max_running must be ≥ 1, got 0"),
            "{err}"
        );
        let capped = Config::parse("[task]\ncluster_max_running = 3\n", env(&[])).unwrap();
        assert_eq!(capped.task.cluster_max_running, Some(3));
        let err = Config::parse("[task]\nmax_rounds = \"many\"\n", env(&[])).unwrap_err();
        assert!(err.to_string().contains("max_rounds"), "{err}");
        let err = Config::parse("[task]\nmax_round = 3\n", env(&[])).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `max_round`"),
            "{err}"
        );
        let err = Config::parse("[permission]\nadmins = [\"root\"]\n", env(&[])).unwrap_err();
        assert!(err.to_string().contains("[permission].admins[0]"), "{err}");
        let err = Config::from_env(env(&[("MAI_AGENT__TASK", "1")])).unwrap_err();
        assert!(err.to_string().contains("MAI_AGENT__TASK"), "{err}");
        let err = Config::parse(
            "[[mcp.servers]]\nname = \"a\"\n[[mcp.servers]]\nname = \"a\"\n",
            env(&[]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("two servers named `a`"), "{err}");
    }

    #[test]
    fn a_bare_number_in_permission_gets_the_id_it_most_likely_means() {
        let err = Config::parse("[permission]\nusers = [10001]\n", env(&[])).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("[permission].users[0]"), "{text}");
        assert!(text.contains("did you mean \"qq:10001\"?"), "{text}");
        let err = Config::parse("[permission]\nadmin_groups = [\"42\"]\n", env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean \"qq:group:42\"?"), "{err}");
        let err = Config::parse("[permission]\nadmins = [\"10001\"]\n", env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean \"qq:10001\"?"), "{err}");
    }

    #[test]
    fn the_old_splitter_enable_is_still_read_with_a_warning() {
        let parsed = Config::parse_with_warnings("[splitter]\nenable = false\n", env(&[])).unwrap();
        assert!(!parsed.config.splitter.enabled);
        assert_eq!(parsed.warnings.len(), 1);
        assert!(
            parsed.warnings[0].contains("`enabled`"),
            "{:?}",
            parsed.warnings
        );
        let parsed =
            Config::parse_with_warnings("[splitter]\nenabled = false\n", env(&[])).unwrap();
        assert!(!parsed.config.splitter.enabled && parsed.warnings.is_empty());
        let both = Config::parse("[splitter]\nenable = false\nenabled = true\n", env(&[]));
        assert!(both.unwrap_err().to_string().contains("both"));
    }

    #[test]
    fn an_error_only_the_environment_causes_names_the_variable() {
        let err = Config::parse(
            "[task]\nmax_rounds = 12\n",
            env(&[
                ("MAI_AGENT__LLM__API_KEY", "k"),
                ("MAI_AGENT__TASK__MAX_ROUNDS", "0"),
            ]),
        )
        .unwrap_err();
        let ConfigError::Env { var, reason } = &err else {
            panic!("not blamed on the variable: {err}");
        };
        assert_eq!(var, "MAI_AGENT__TASK__MAX_ROUNDS");
        assert!(reason.contains("must be ≥ 1, got 0"), "{reason}");
        let err = Config::from_env(env(&[("MAI_AGENT__TASK__MAX_ROUND", "3")])).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Env { var, .. } if var == "MAI_AGENT__TASK__MAX_ROUND"),
            "{err}"
        );
        // The file's own error stays the file's.
        let err = Config::parse(
            "[task]\nmax_rounds = 0\n",
            env(&[("MAI_AGENT__LLM__API_KEY", "k")]),
        )
        .unwrap_err();
        assert!(!matches!(err, ConfigError::Env { .. }), "{err}");
    }

    #[test]
    fn storage_url_with_another_scheme_is_refused_by_validation_and_postgres_is_taken() {
        let err = Config::from_env(env(&[(
            "MAI_AGENT__STORAGE__URL",
            "mysql://u:pw@127.0.0.1:3306/mai",
        )]))
        .unwrap_err()
        .to_string();
        assert!(err.contains("cannot open"), "{err}");
        assert!(!err.contains("pw@"), "{err}");
        let config = Config::from_env(env(&[(
            "MAI_AGENT__STORAGE__URL",
            "postgres://u:pw@127.0.0.1:5432/mai",
        )]))
        .unwrap();
        assert_eq!(
            config.storage.url.as_deref(),
            Some("postgres://u:pw@127.0.0.1:5432/mai")
        );
    }

    #[test]
    fn mcp_server_tools_are_admin_only_unless_the_operator_lowers_them() {
        let text = "[[mcp.servers]]\nname = \"fs\"\ncommand = \"x\"\n\
                    [[mcp.servers]]\nname = \"web\"\ncommand = \"y\"\nmin_role = \"user\"\n\
                    tool_roles = { search = \"guest\", admin_only = \"admin\" }\n";
        let config = Config::parse(text, env(&[])).unwrap();
        let (fs, web) = (&config.mcp.servers[0], &config.mcp.servers[1]);
        assert_eq!(fs.min_role, Role::Admin);
        assert!(fs.tool_roles.is_empty());
        assert_eq!(web.min_role, Role::User);
        assert_eq!(web.tool_roles["search"], Role::Guest);
        assert_eq!(web.tool_roles["admin_only"], Role::Admin);
    }

    #[test]
    fn a_misspelled_mcp_role_is_refused_with_the_valid_names() {
        for (text, key) in [
            (
                "[[mcp.servers]]\nname = \"fs\"\nmin_role = \"users\"\n",
                "mcp.servers.min_role",
            ),
            (
                "[[mcp.servers]]\nname = \"fs\"\ntool_roles = { read = \"Admin\" }\n",
                "mcp.servers.tool_roles.read",
            ),
        ] {
            let err = Config::parse(text, env(&[])).unwrap_err().to_string();
            assert!(err.contains("unknown variant"), "{err}");
            assert!(err.contains(key), "the error names the key: {err}");
            assert!(
                err.contains("guest") && err.contains("user") && err.contains("admin"),
                "the error lists the valid roles: {err}"
            );
        }
    }
}
