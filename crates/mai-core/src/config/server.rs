//! The `[server]` and `[channels]` configuration sections: where `mai-agent serve` listens, who
//! may call it, and which chat channels feed the embedded host.
//!
//! These are read once at start-up (changing them needs a restart of `serve`); the hot-reloaded
//! sections live in the parent module. Must not do I/O.

use serde::{Deserialize, Serialize};

/// `[server]`: the HTTP API and the MCP server of `mai-agent serve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Socket address to listen on; `--listen` overrides it.
    pub listen: String,
    /// When set, every request except `GET /healthz` needs `Authorization: Bearer <token>`.
    pub auth_token: Option<String>,
    /// `Host` header values accepted besides loopback names and the listen address (DNS
    /// rebinding guard), e.g. `["bot.example.org", "bot.example.org:8760"]`.
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s accepted besides loopback origins; requests without `Origin` (programs)
    /// are not affected.
    pub allowed_origins: Vec<String>,
    /// Serve the planner tools over MCP (streamable HTTP) at `/mcp`.
    pub mcp_enabled: bool,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Listen beyond loopback without `auth_token` (anyone who reaches the address acts as an
    /// admin); `serve` refuses that unless this is set, e.g. behind a firewall or an
    /// authenticating proxy.
    pub allow_no_auth: bool,
    /// The name this instance gives itself in logs, metrics, the status log and `/healthz`
    /// (default: host name and process id). Several instances on one PostgreSQL database need
    /// names that differ; a restarted instance that keeps its name adopts its own running tasks
    /// at once instead of waiting for their leases to expire.
    pub instance_id: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8760".into(),
            auth_token: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            mcp_enabled: true,
            max_body_bytes: 1024 * 1024,
            allow_no_auth: false,
            instance_id: None,
        }
    }
}

/// `[channels]`: chat channels of the embedded host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    pub console: ConsoleChannelConfig,
    pub onebot: OneBotConfig,
}

/// `[channels.console]`: a local chat in the terminal that runs `serve`, for trying it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleChannelConfig {
    pub enabled: bool,
    /// The person at the terminal (`console:<user_id>` in `[permission]`).
    pub user_id: String,
}

impl Default for ConsoleChannelConfig {
    fn default() -> Self {
        ConsoleChannelConfig {
            enabled: false,
            user_id: "local".into(),
        }
    }
}

/// `[channels.onebot]`: a OneBot v11 forward WebSocket client (NapCat, Lagrange, go-cqhttp…).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OneBotConfig {
    pub enabled: bool,
    /// The implementation's forward WebSocket, e.g. `ws://127.0.0.1:3001`.
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` when set.
    pub access_token: Option<String>,
    /// The platform name streams and people get (`qq:123456`).
    pub platform: String,
    /// First reconnect delay; doubles (with jitter) up to `reconnect_max_secs`.
    pub reconnect_initial_ms: u64,
    pub reconnect_max_secs: u64,
    /// How long a `send_msg` waits for its `echo`-correlated answer.
    pub send_timeout_secs: u64,
    /// Whether guests (and anonymous members) get an answer to a `/mt` command in a group;
    /// `false` keeps the bot silent in groups where nobody is listed in `[permission]`.
    pub guest_replies: bool,
}

impl Default for OneBotConfig {
    fn default() -> Self {
        OneBotConfig {
            enabled: false,
            url: "ws://127.0.0.1:3001".into(),
            access_token: None,
            platform: "qq".into(),
            reconnect_initial_ms: 500,
            reconnect_max_secs: 30,
            send_timeout_secs: 10,
            guest_replies: true,
        }
    }
}
