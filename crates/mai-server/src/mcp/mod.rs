//! The MCP server: the 11 planner tools (docs/design.md, "The planner") for any MCP host — MaiBot's
//! MCP client, desktop assistants, agent frameworks — over stdio (`mai-agent mcp`) and streamable
//! HTTP (nested at `/mcp` by the HTTP API router).
//!
//! Owns the protocol mapping only, and leaves the protocol itself to rmcp (the official SDK):
//! `tools/list` is the planner registry with `_meta.visibility`, `tools/call` runs
//! [`call_planner_tool`] with the host context of the request's `_meta` injected
//! ([`crate::host_context`]). Must not: offer anything but the planner registry's tools, decide a
//! permission or a stream itself (the planner tools and stream isolation do), or apply its own
//! HTTP Host/Origin policy — the HTTP API router guards everything it nests, in one place.

mod tools;

use std::sync::Arc;

use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{QuitReason, RequestContext, ServerInitializeError};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use mai_engine::{call_planner_tool, planner_visibility};

pub use crate::host_context::{HOST_CONTEXT_KEYS, HostContext, HostContextError};
use crate::state::ServerState;

/// The server's name in `initialize` / `server/discover` answers.
pub const SERVER_NAME: &str = "mai-agent";

/// What an MCP host is told this server is for (the `instructions` of `initialize`); hosts may
/// show it to their model, so it says how to use the tools, briefly.
const INSTRUCTIONS: &str = "mai-agent runs background sub-agents for a chat bot: independent AI \
agents that do longer or later work (research, multi-step jobs, reminders, recurring jobs) and \
report back to the conversation. Create and manage them with the subagent_* tools, always \
passing the current conversation's stream_id; send_message messages another chat now; \
search_users finds people and groups; list_mcp_tools/call_mcp_tool reach mai-agent's own MCP \
servers. Tools with _meta.visibility \"visible\" belong in the planner's tool list; \"deferred\" \
ones are for the host's tool search. Hosts should send the current conversation as \
_meta.chat_id (plus platform, user_id, group_id) with every tools/call, so one conversation can \
never manage another conversation's sub-agents.";

/// Why serving MCP stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum McpServeError {
    #[error("the MCP session could not start: {0}")]
    Initialize(Box<ServerInitializeError>),
    #[error("the MCP session ended abnormally: {0}")]
    Session(#[from] tokio::task::JoinError),
}

/// The planner tools as an rmcp server handler. Cheap to clone (one per HTTP session).
#[derive(Clone)]
pub struct PlannerMcpServer {
    state: ServerState,
    /// Built once: the planner registry does not change while the server runs.
    tools: Arc<[Tool]>,
}

impl PlannerMcpServer {
    pub fn new(state: ServerState) -> PlannerMcpServer {
        let tools = tools::planner_tools(&state.planner).into();
        PlannerMcpServer { state, tools }
    }

    fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|tool| tool.name == name)
    }

    fn unknown_tool(&self, name: &str) -> McpError {
        let offered = self
            .tools
            .iter()
            .map(|tool| tool.name.as_ref())
            .collect::<Vec<_>>()
            .join(", ");
        // -32602 as the MCP spec's own "unknown tool" example: the request names no tool here.
        McpError::invalid_params(
            format!("unknown tool `{name}`; this server offers the planner tools: {offered}"),
            Some(json!({"tool": name})),
        )
    }
}

impl ServerHandler for PlannerMcpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION"))
                    .with_title("mai-agent: background sub-agents for chat bots"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // Eleven tools fit one page; no cursor.
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        if planner_visibility(name).is_none() {
            return Err(self.unknown_tool(name));
        }
        let Some(tool) = self.tool(name) else {
            return Err(self.unknown_tool(name));
        };
        // rmcp hands the request's `_meta` over in the context; a params-level copy (set by
        // an in-process caller) is read too, the context's keys winning.
        let mut meta: JsonObject = request
            .meta
            .as_ref()
            .map(|meta| meta.0.0.clone())
            .unwrap_or_default();
        meta.extend(context.meta.0.0.clone());
        let host = HostContext::from_meta(&meta)
            .map_err(|error| McpError::invalid_params(error.to_string(), None))?;
        let mut args = request.arguments.clone().unwrap_or_default();
        host.inject(&mut args, &Value::Object((*tool.input_schema).clone()));
        let span = tracing::info_span!(
            "mcp_tool_call",
            tool = name,
            chat_id = host.chat_id.as_deref(),
            platform = host.platform.as_deref(),
            user_id = host.user_id.as_deref(),
            group_id = host.group_id.as_deref(),
        );
        // `context.ct` (the client cancelled) is deliberately not raced against the call: a
        // planner action stopped halfway (a task created but not reported, a message half
        // sent) is worse than a finished one whose result rmcp then discards.
        let outcome = call_planner_tool(
            &self.state.engine,
            &self.state.planner,
            name,
            Value::Object(args),
        )
        .instrument(span)
        .await;
        self.state
            .metrics
            .count_planner_call(name, outcome.kind.as_str(), "mcp");
        if !outcome.is_ok() {
            tracing::debug!(
                tool = name,
                kind = outcome.kind.as_str(),
                "planner tool refused or failed"
            );
        }
        Ok(tools::call_result(outcome).into())
    }
}

/// Serves the planner tools over stdio until the client closes stdin (or the session ends).
/// stdout carries the protocol: nothing else may write to it while this runs.
pub async fn serve_stdio(state: ServerState) -> Result<(), McpServeError> {
    let server = PlannerMcpServer::new(state);
    let running = match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => running,
        // A host that starts the command and closes stdin without a handshake (a probe that
        // the command exists) is not an error worth a failing exit.
        Err(ServerInitializeError::ConnectionClosed(reason)) => {
            tracing::info!(%reason, "the MCP client closed stdin before the handshake");
            return Ok(());
        }
        Err(error) => return Err(McpServeError::Initialize(Box::new(error))),
    };
    match running.waiting().await? {
        QuitReason::JoinError(error) => Err(error.into()),
        reason => {
            tracing::info!(?reason, "MCP stdio session ended");
            Ok(())
        }
    }
}

/// The streamable HTTP MCP endpoint as a router serving at its own root, to be nested at
/// `/mcp` by the HTTP API router. Sessions never end on their own; see [`http_router_until`].
pub fn http_router(state: ServerState) -> Router {
    http_router_until(state, CancellationToken::new())
}

/// As [`http_router`], ending every session and open event stream when `shutdown` is cancelled
/// (an open SSE stream would otherwise hold a graceful HTTP shutdown forever).
///
/// rmcp's own DNS-rebinding guard is off here on purpose: by default it accepts only loopback
/// `Host`s, which would answer 403 to hosts the HTTP API's guard accepts (the listen address,
/// `[server] allowed_hosts`), so the two lists would drift. The router that nests this one owns
/// the Host/Origin guard and the bearer token; never serve this router without it.
pub fn http_router_until(state: ServerState, shutdown: CancellationToken) -> Router {
    let server = PlannerMcpServer::new(state);
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_cancellation_token(shutdown);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/", service)
        .layer(axum::middleware::from_fn(delete_answers_no_content))
}

/// `DELETE /mcp` (the client ends its session) answers **204**: rmcp answers 202 Accepted, which
/// the streamable HTTP spec does not list for a DELETE; the official Python SDK expects 200 or
/// 204 and logs a warning on anything else. Other answers pass unchanged (202 stays right for a
/// POSTed notification).
async fn delete_answers_no_content(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
    }
    response
}
