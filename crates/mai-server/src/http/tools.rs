//! `GET /v1/tools` (the role × tool matrix of the agent-loop channel, or one role's tools) and
//! `GET /v1/mcp/servers` (the configured MCP servers, their state, tools and last error): what
//! the dashboard's "Tools and roles" page shows. The matrix is [`mai_tools::matrix`], the very
//! function `mai-agent tools --json` prints. Must not: compute the matrix itself, or decide what
//! a role may use (the registry's gates do).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use mai_core::role::Role;

use super::Api;
use super::error::{ApiError, QueryParams, to_json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolsQuery {
    /// `guest`, `user` or `admin`: only the tools that role is shown every round.
    role: Option<String>,
}

pub(crate) async fn list(
    State(api): State<Api>,
    QueryParams(query): QueryParams<ToolsQuery>,
) -> Result<Json<Value>, ApiError> {
    let registry = api.state.engine.registry();
    match query.role.as_deref().map(str::trim) {
        Some(role) => {
            let role: Role = role.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "role: `{role}` is not a role; give guest, user or admin"
                ))
            })?;
            Ok(Json(to_json(&mai_tools::matrix::for_role(registry, role))?))
        }
        None => Ok(Json(to_json(&mai_tools::matrix::matrix(registry))?)),
    }
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
