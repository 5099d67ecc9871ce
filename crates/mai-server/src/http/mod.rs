//! The HTTP API of `mai-agent serve` (reference: docs/http-api.md).
//!
//! Owns the route table, the options the router is built from, and the small endpoints
//! (`/healthz`, `/v1/health`, `/v1/health/history`, `/metrics`, `/openapi.json`); task endpoints
//! live in `tasks`, planner ones in `planner`, ingestion and a stream's recent messages in
//! `messages`, the role × tool matrix and MCP servers in `tools`, the live event stream in
//! `events`, the MaiBot bridge WebSocket in `bridge`, the web dashboard's page and files in
//! `dashboard`, the door (auth, Host/Origin, body size) in `guard`, and the error body in
//! `error`. Everything but `GET /healthz` is behind the guard, including the MCP router nested
//! at `/mcp`; the dashboard's page and files pass it without the token. Must not: reach the
//! store, or decide permissions (the engine's facade does).

mod bridge;
pub mod dashboard;
mod error;
mod events;
mod guard;
mod messages;
mod planner;
mod tasks;
mod tools;
mod usage;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;

use mai_core::config::ServerConfig;

use crate::metrics;
use crate::state::ServerState;
use crate::trend::Trend;
use error::ApiError;

/// The OpenAPI 3.1 description of every endpoint, served at `GET /openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// What the router is built from.
#[derive(Clone)]
pub struct HttpOptions {
    /// `[server]`: auth token, allowed hosts and origins, body limit, listen address.
    pub config: ServerConfig,
    /// The MCP server's router, nested at `/mcp` behind the same guard; `None` serves no MCP.
    pub mcp: Option<Router>,
    /// Cancelled when the server stops: open `/v1/events` streams end (a graceful shutdown
    /// waits for open responses).
    pub shutdown: CancellationToken,
    /// The MCP client's servers, for `GET /v1/mcp/servers`; `None` lists none.
    pub mcp_servers: Option<mai_mcp::McpManager>,
}

impl HttpOptions {
    /// Options from `[server]`, with no MCP router and no MCP servers.
    pub fn new(config: ServerConfig) -> Self {
        HttpOptions {
            config,
            mcp: None,
            shutdown: CancellationToken::new(),
            mcp_servers: None,
        }
    }
}

/// What every handler gets.
#[derive(Clone)]
pub(crate) struct Api {
    pub state: ServerState,
    pub shutdown: CancellationToken,
    pub mcp_servers: Option<mai_mcp::McpManager>,
    /// The sampled history behind `GET /v1/health/history`.
    pub trend: Trend,
}

/// One route: method, path template, handler.
type Route = (Method, &'static str, MethodRouter<Api>);

/// The route table: the one list the router is built from and the OpenAPI test checks.
fn route_table() -> Vec<Route> {
    vec![
        (Method::GET, "/healthz", get(healthz)),
        (Method::GET, "/v1/health", get(health)),
        (Method::GET, "/v1/health/history", get(health_history)),
        (Method::GET, "/metrics", get(metrics_text)),
        (Method::GET, "/openapi.json", get(openapi)),
        (Method::GET, "/v1/tasks", get(tasks::list)),
        (Method::POST, "/v1/tasks", post(tasks::create)),
        (Method::GET, "/v1/tasks/{id}", get(tasks::get)),
        (Method::POST, "/v1/tasks/{id}/cancel", post(tasks::cancel)),
        (Method::POST, "/v1/tasks/{id}/inject", post(tasks::inject)),
        (Method::POST, "/v1/tasks/{id}/answer", post(tasks::answer)),
        (Method::POST, "/v1/tasks/{id}/pause", post(tasks::pause)),
        (Method::POST, "/v1/tasks/{id}/resume", post(tasks::resume)),
        (Method::GET, "/v1/tasks/{id}/history", get(tasks::history)),
        (Method::GET, "/v1/usage", get(usage::get)),
        (Method::POST, "/v1/messages", post(messages::post)),
        (
            Method::GET,
            "/v1/streams/{stream_id}/messages",
            get(messages::recent),
        ),
        (Method::GET, "/v1/tools", get(tools::list)),
        (Method::GET, "/v1/mcp/servers", get(tools::mcp_servers)),
        (Method::GET, "/v1/planner/tools", get(planner::list_tools)),
        (
            Method::POST,
            "/v1/planner/tools/{name}",
            post(planner::call_tool),
        ),
        (Method::GET, "/v1/planner/board", get(planner::board)),
        (Method::GET, "/v1/events", get(events::stream)),
        (Method::GET, "/v1/bridge", get(bridge::upgrade)),
    ]
}

/// The listener to serve the router on: every accepted connection gets `TCP_NODELAY`.
///
/// Without it Nagle's algorithm holds back the small last write of a response written in
/// several pieces (the SSE stream of an MCP call) until the client's delayed ACK, ~40 ms on
/// Linux: every MCP `tools/call` took ≥ 40 ms instead of ~1 ms (BENCHMARKS.md, HTTP/MCP load).
pub fn listener(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY on a connection");
        }
    })
}

/// Every `(method, path)` of the API the router serves (path templates as in OpenAPI, `{id}`),
/// `/mcp` excluded (it is the MCP server's) and the dashboard's page and files too (see
/// [`dashboard_routes`]: they need no token).
pub fn routes() -> Vec<(Method, &'static str)> {
    route_table()
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect()
}

/// The dashboard's `(method, path)`s — its page `/` and files `/ui/{name}` — documented in
/// openapi.json like the API's, but open without the token.
pub fn dashboard_routes() -> Vec<(Method, &'static str)> {
    page_routes()
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect()
}

/// The dashboard's page and files: behind the Host/Origin checks, without the token.
fn page_routes() -> Vec<Route> {
    vec![
        (Method::GET, "/", get(dashboard::index)),
        (Method::GET, "/ui/{name}", get(dashboard::file)),
    ]
}

/// The paths that bypass the guard: health checks come from load balancers and supervisors
/// that know neither the token nor our host name, and reveal nothing.
const UNGUARDED: [&str; 1] = ["/healthz"];

/// The HTTP API router. Starts counting engine events into `state.metrics`.
pub fn router(state: ServerState, options: HttpOptions) -> Router {
    state.metrics.follow(&state.engine);
    let max_body = options.config.max_body_bytes;
    let guard = Arc::new(guard::Guard::new(&options.config));
    let trend = Trend::start(
        state.engine.clone(),
        state.metrics.clone(),
        options.shutdown.clone(),
    );
    let api = Api {
        state,
        shutdown: options.shutdown,
        mcp_servers: options.mcp_servers,
        trend,
    };
    let mut pages = Router::new();
    for (_, path, handler) in page_routes() {
        pages = pages.route(path, handler);
    }
    let pages = pages
        .method_not_allowed_fallback(error::wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            guard.clone(),
            guard::page_guard,
        ));
    let mut open = Router::new();
    let mut guarded = Router::new();
    for (_, path, handler) in route_table() {
        if UNGUARDED.contains(&path) {
            open = open.route(path, handler);
        } else {
            guarded = guarded.route(path, handler);
        }
    }
    if let Some(mcp) = options.mcp {
        let mcp = mcp.layer(axum::middleware::from_fn_with_state(
            max_body,
            guard::buffer_body,
        ));
        guarded = guarded.nest_service("/mcp", mcp);
    }
    let guarded = guarded
        .fallback(error::no_such_route)
        .method_not_allowed_fallback(error::wrong_method)
        // Extractors read at most this much (axum's own default is 2 MiB) …
        .layer(DefaultBodyLimit::max(max_body))
        // … and so does everything else, chunked bodies and /mcp included.
        .layer(RequestBodyLimitLayer::new(max_body))
        .layer(axum::middleware::from_fn_with_state(guard, guard::guard));
    open.method_not_allowed_fallback(error::wrong_method)
        .merge(pages)
        .merge(guarded)
        .with_state(api)
}

/// Liveness, the instance's name, and whether MaiBot's bridge is connected (`not used` with
/// the embedded host).
async fn healthz(State(api): State<Api>) -> impl IntoResponse {
    let bridge = match &api.state.bridge {
        None => "not used",
        Some(host) if host.status().borrow().connected.is_some() => "connected",
        Some(_) => "disconnected",
    };
    axum::Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "instance": api.state.engine.instance_id(),
        "bridge": bridge,
    }))
}

/// The detailed health report (behind the guard): 200 when every part is up, 503 when one is
/// down — the body says which.
async fn health(State(api): State<Api>) -> Response {
    let report = api
        .state
        .metrics
        .health()
        .report(&api.state.engine, api.state.bridge.as_ref())
        .await;
    let status = if report["status"] == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(report)).into_response()
}

/// The sampled history behind the dashboard's health charts (`crate::trend`), and a sample
/// taken now.
async fn health_history(State(api): State<Api>) -> Result<Response, ApiError> {
    let now = api.trend.now(&api.state.engine, &api.state.metrics).await?;
    Ok(axum::Json(json!({
        "interval_secs": crate::trend::INTERVAL.as_secs(),
        "samples": api.trend.samples(),
        "now": now,
    }))
    .into_response())
}

async fn metrics_text(State(api): State<Api>) -> Result<Response, ApiError> {
    if let Some(host) = &api.state.bridge {
        let connected = host.status().borrow().connected.is_some();
        api.state
            .metrics
            .set_bridge(connected, *host.held().borrow());
    }
    let text = api.state.metrics.render(&api.state.engine).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        text,
    )
        .into_response())
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_in_the_openapi_document_and_nothing_else_is() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        assert_eq!(doc["openapi"].as_str().unwrap().get(..3), Some("3.1"));
        let paths = doc["paths"].as_object().unwrap();
        let mut documented = Vec::new();
        for (path, item) in paths {
            for method in item.as_object().unwrap().keys() {
                if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                    documented.push((method.to_uppercase(), path.clone()));
                }
            }
        }
        let served: Vec<_> = routes().into_iter().chain(dashboard_routes()).collect();
        for (method, path) in &served {
            let entry = (method.as_str().to_owned(), (*path).to_owned());
            assert!(
                documented.contains(&entry),
                "{entry:?} is not in openapi.json"
            );
        }
        for (method, path) in &documented {
            if path == "/mcp" {
                continue;
            }
            assert!(
                served
                    .iter()
                    .any(|(m, p)| m.as_str() == method && p == path),
                "openapi.json documents {method} {path}, which the router does not serve"
            );
        }
    }
}
