//! `GET /v1/tools` (the role × tool matrix of the agent-loop channel, or one role's tools) and
//! `GET /v1/mcp/servers` (the configured MCP servers, their state, tools and last error): what
//! the dashboard's "Tools and roles" page shows, and exactly what `mai-agent tools` prints —
//! both read the engine's registry (`presented`, `names`) and count schema tokens with
//! `mai_tools::budget`. Must not: decide what a role may use (the registry's gates do).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use mai_core::role::Role;
use mai_core::tool::ToolRegistry;

use super::Api;
use super::error::{ApiError, QueryParams};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolsQuery {
    /// `guest`, `user` or `admin`: only the tools that role is shown every round.
    role: Option<String>,
}

/// The first sentence of a description: what a table has room for.
fn summary(description: &str) -> &str {
    description
        .split(". ")
        .next()
        .unwrap_or_default()
        .trim_end_matches('.')
}

/// What a role's tool schemas cost every round, in cl100k tokens.
fn schema_tokens(registry: &ToolRegistry, role: Role) -> usize {
    let specs: Vec<_> = registry.presented(role).iter().map(|t| t.spec()).collect();
    mai_tools::budget::schema_tokens(&specs)
}

pub(crate) async fn list(
    State(api): State<Api>,
    QueryParams(query): QueryParams<ToolsQuery>,
) -> Result<Json<Value>, ApiError> {
    let registry = api.state.engine.registry();
    if let Some(role) = query.role.as_deref().map(str::trim) {
        let role: Role = role.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "role: `{role}` is not a role; give guest, user or admin"
            ))
        })?;
        let tools: Vec<Value> = registry
            .presented(role)
            .iter()
            .map(|t| {
                json!({
                    "name": t.name(),
                    "visibility": t.visibility().as_str(),
                    "min_role": t.min_role().as_str(),
                    "description": summary(t.description()),
                })
            })
            .collect();
        return Ok(Json(json!({
            "role": role.as_str(),
            "tools": tools,
            "schema_tokens": schema_tokens(registry, role),
        })));
    }
    let names: Vec<(Role, std::sync::Arc<[String]>)> = Role::ALL
        .iter()
        .map(|role| (*role, registry.names(*role)))
        .collect();
    let tools: Vec<Value> = registry
        .all()
        .iter()
        .map(|t| {
            let roles: Vec<&str> = names
                .iter()
                .filter(|(_, names)| names.iter().any(|n| n == t.name()))
                .map(|(role, _)| role.as_str())
                .collect();
            json!({
                "name": t.name(),
                "visibility": t.visibility().as_str(),
                "min_role": t.min_role().as_str(),
                "roles": roles,
                "description": summary(t.description()),
            })
        })
        .collect();
    let tokens: serde_json::Map<String, Value> = Role::ALL
        .iter()
        .map(|role| {
            (
                role.as_str().to_owned(),
                json!(schema_tokens(registry, *role)),
            )
        })
        .collect();
    Ok(Json(json!({ "tools": tools, "schema_tokens": tokens })))
}

/// Every configured MCP server: its state (`starting`, `ready`, `failed`, `restarting`,
/// `stopped`), last error, restarts, and the tools it adds (model-facing name, the server's own
/// name, the lowest role that may use it). An empty list when none is configured.
pub(crate) async fn mcp_servers(State(api): State<Api>) -> Json<Value> {
    let Some(manager) = &api.mcp_servers else {
        return Json(json!({ "servers": [] }));
    };
    let tools = manager.tools();
    let servers: Vec<Value> = manager
        .status()
        .into_iter()
        .map(|server| {
            let own: Vec<Value> = tools
                .iter()
                .filter(|t| t.server == server.name)
                .map(|t| {
                    json!({"name": t.name, "raw_name": t.raw_name,
                           "min_role": t.min_role.as_str()})
                })
                .collect();
            json!({
                "name": server.name,
                "state": server.state,
                "last_error": server.last_error,
                "tool_count": server.tool_count,
                "restarts": server.restarts,
                "pid": server.pid,
                "tools": own,
            })
        })
        .collect();
    Json(json!({ "servers": servers }))
}
