//! Opens one MCP session over rmcp: spawns the stdio child (in its own process group, stderr
//! captured), builds the streamable HTTP transport or opens a legacy SSE stream
//! ([`crate::legacy_sse`]) (`${ENV}` in headers, bearer token), then
//! runs the rmcp `initialize` handshake and lists every tool page.
//!
//! Owns transport set-up and the process group of a stdio child. Must not decide about budgets,
//! retries or status: the manager does. The protocol itself is rmcp's; nothing here speaks JSON-RPC.

use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use mai_core::config::{McpServerConfig, McpTransport};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::Tool;
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::McpError;

/// How many stderr lines of a child are kept for error reports.
const STDERR_TAIL_LINES: usize = 20;

/// The last lines a stdio child wrote to stderr (also logged as they arrive), and whether the
/// current child's stderr has been read to its end.
#[derive(Debug, Clone)]
pub(crate) struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    drained: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for StderrTail {
    fn default() -> Self {
        StderrTail {
            lines: Arc::default(),
            // No child yet: nothing to wait for.
            drained: Arc::new(tokio::sync::watch::Sender::new(true)),
        }
    }
}

impl StderrTail {
    /// Waits (at most `limit`) until the child's stderr is read to its end. A child that fails
    /// at start-up usually says why on stderr and exits; the pipe breaks on our side at the same
    /// moment, so without this the reason could miss the error report.
    pub(crate) async fn settle(&self, limit: std::time::Duration) {
        let mut drained = self.drained.subscribe();
        let _ = tokio::time::timeout(limit, drained.wait_for(|done| *done)).await;
    }

    fn push(&self, line: String) {
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == STDERR_TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    pub(crate) fn render(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// Receives server notifications for one session; `tools/list_changed` wakes the supervisor.
pub(crate) struct SessionHandler {
    tools_changed: mpsc::UnboundedSender<()>,
}

impl rmcp::ClientHandler for SessionHandler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.tools_changed.send(());
    }
}

/// A live session.
pub(crate) struct Session {
    pub(crate) service: RunningService<RoleClient, SessionHandler>,
    pub(crate) tools: Vec<Tool>,
    /// Signalled on `notifications/tools/list_changed`.
    pub(crate) tools_changed: mpsc::UnboundedReceiver<()>,
    /// Cancels the rmcp service (closing the transport, which kills a stdio child).
    pub(crate) cancel: CancellationToken,
    pub(crate) process_group: Option<ProcessGroup>,
}

/// The process group of a stdio child; the whole group is killed when the session ends, so
/// grandchildren (npx → node, shells) cannot outlive it.
#[derive(Debug)]
pub(crate) struct ProcessGroup(rustix::process::Pid);

impl ProcessGroup {
    pub(crate) fn pid(&self) -> u32 {
        self.0.as_raw_nonzero().get().unsigned_abs()
    }

    pub(crate) fn kill(&self) {
        // The pid is the child's own (positive) pid, used as its group id: never -1 or 0.
        let _ = rustix::process::kill_process_group(self.0, rustix::process::Signal::KILL);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Connects to `config`'s server and lists its tools. No timeout here: the caller bounds it.
pub(crate) async fn connect(
    config: &McpServerConfig,
    stderr: &StderrTail,
) -> Result<Session, McpError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = SessionHandler { tools_changed: tx };
    let cancel = CancellationToken::new();
    let (service, process_group) = match config.transport {
        McpTransport::Stdio => {
            let (transport, group) = spawn_stdio(config, stderr)?;
            let service = handler
                .serve_with_ct(transport, cancel.clone())
                .await
                .map_err(|e| McpError::Initialize(e.to_string()))?;
            (service, group)
        }
        McpTransport::Http => {
            let transport = http_transport(config)?;
            let service = handler
                .serve_with_ct(transport, cancel.clone())
                .await
                .map_err(|e| McpError::Initialize(e.to_string()))?;
            (service, None)
        }
        McpTransport::Sse => {
            let url = required_url(config, "sse")?;
            let (headers, bearer) = configured_headers(config)?;
            let mut headers = headers;
            if let Some(token) = bearer {
                let value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|e| McpError::Config(format!("bearer token: {e}")))?;
                headers.insert(reqwest::header::AUTHORIZATION, value);
            }
            let wait = std::time::Duration::from_secs(config.startup_timeout_secs.max(1));
            let transport = crate::legacy_sse::connect(url, headers, wait).await?;
            let service = handler
                .serve_with_ct(transport, cancel.clone())
                .await
                .map_err(|e| McpError::Initialize(e.to_string()))?;
            (service, None)
        }
    };
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| McpError::ListTools(e.to_string()))?;
    Ok(Session {
        service,
        tools,
        tools_changed: rx,
        cancel,
        process_group,
    })
}

fn spawn_stdio(
    config: &McpServerConfig,
    stderr: &StderrTail,
) -> Result<(TokioChildProcess, Option<ProcessGroup>), McpError> {
    let program = config
        .command
        .as_deref()
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| McpError::Config("stdio transport needs `command`".into()))?;
    let mut command = tokio::process::Command::new(program);
    command.args(&config.args);
    for (key, value) in &config.env {
        command.env(key, substitute_env(value)?);
    }
    // Its own group: a signal for the child reaches its whole tree, and a Ctrl-C at our
    // terminal does not reach it behind our back.
    command.process_group(0);
    command.kill_on_drop(true);
    let (transport, child_stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| McpError::Spawn(format!("`{program}`: {e}")))?;
    let group = transport
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw)
        .map(ProcessGroup);
    if let Some(child_stderr) = child_stderr {
        let tail = stderr.clone();
        let server = config.name.clone();
        tail.drained.send_replace(false);
        tokio::spawn(async move {
            let mut lines = BufReader::new(child_stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(target: "mai_mcp::stderr", server = %server, "{line}");
                tail.push(line);
            }
            tail.drained.send_replace(true);
        });
    }
    Ok((transport, group))
}

fn http_transport(
    config: &McpServerConfig,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, McpError> {
    let url = required_url(config, "http")?;
    let (headers, bearer) = configured_headers(config)?;
    let headers: HashMap<HeaderName, HeaderValue> = headers
        .into_iter()
        .filter_map(|(name, value)| Some((name?, value)))
        .collect();
    let mut transport_config =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(headers);
    if let Some(token) = bearer {
        transport_config = transport_config.auth_header(token);
    }
    Ok(StreamableHttpClientTransport::from_config(transport_config))
}

fn required_url<'a>(config: &'a McpServerConfig, transport: &str) -> Result<&'a str, McpError> {
    config
        .url
        .as_deref()
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| McpError::Config(format!("{transport} transport needs `url`")))
}

/// The configured headers with `${ENV}` substituted, and a bearer token given as an
/// `Authorization` header taken out (rmcp's streamable HTTP client sets it itself, so it is not
/// sent twice).
fn configured_headers(
    config: &McpServerConfig,
) -> Result<(reqwest::header::HeaderMap, Option<String>), McpError> {
    let mut headers = reqwest::header::HeaderMap::new();
    let mut bearer = None;
    for (key, value) in &config.headers {
        let value = substitute_env(value)?;
        if key.eq_ignore_ascii_case("authorization")
            && let Some(token) = value.strip_prefix("Bearer ")
        {
            bearer = Some(token.trim().to_owned());
            continue;
        }
        let name = HeaderName::from_bytes(key.as_bytes())
            .map_err(|e| McpError::Config(format!("header name `{key}`: {e}")))?;
        let value = HeaderValue::from_str(&value)
            .map_err(|e| McpError::Config(format!("header `{key}` value: {e}")))?;
        headers.insert(name, value);
    }
    Ok((headers, bearer))
}

/// Replaces every `${NAME}` with the environment variable `NAME`; a missing variable is a
/// configuration error naming it (sending a literal `${TOKEN}` as a credential helps no one).
pub fn substitute_env(value: &str) -> Result<String, McpError> {
    substitute_with(value, |name| std::env::var(name).ok())
}

pub(crate) fn substitute_with(
    value: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, McpError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(McpError::Config(format!("unclosed `${{` in `{value}`")));
        };
        let name = &after[..end];
        let resolved = lookup(name)
            .ok_or_else(|| McpError::Config(format!("environment variable `{name}` is not set")))?;
        out.push_str(&resolved);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_substitution() {
        let lookup = |name: &str| (name == "TOKEN").then(|| "s3cret".to_owned());
        assert_eq!(
            substitute_with("Bearer ${TOKEN}!", lookup).ok().as_deref(),
            Some("Bearer s3cret!")
        );
        assert_eq!(
            substitute_with("plain", lookup).ok().as_deref(),
            Some("plain")
        );
        assert!(substitute_with("${MISSING}", lookup).is_err());
        assert!(substitute_with("${TOKEN", lookup).is_err());
    }
}
