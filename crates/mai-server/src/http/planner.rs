//! `/v1/planner/…`: the planner tools with an explicit host context envelope, the list of those
//! tools (so a host's plugin registers exactly the registry's definitions), and the planner
//! board.
//!
//! A host that is not an MCP client calls a planner tool here with the tool's `arguments` and
//! the conversation it is in (`context`). The context's `chat_id` is injected into the arguments
//! as the host-injected `chat_id` stream isolation checks, and it **wins** over a `chat_id` the
//! arguments carry (the arguments come from the model; the context from the host). For the
//! tools whose schema does not declare `platform`/`group_id`/`user_id` (the `subagent_*` tools;
//! `user_id` names the person a created task is for, who may answer its questions), those are
//! injected the same way; `send_message` keeps its own, because there they choose a target.
//! The rule is [`crate::host_context`]'s, shared with the MCP server.
//! Must not: run a tool outside `call_planner_tool` (the registry's gates), or build its own
//! notion of the planner's identity.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use mai_core::role::Role;
use mai_core::tool::OutcomeKind;
use mai_engine::{PLANNER_TOOLS, call_planner_tool};

use crate::host_context::{HOST_CONTEXT_KEYS, HostContext, json_kind};

use super::Api;
use super::error::{ApiError, JsonBody, PathParams, QueryParams};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolCallBody {
    #[serde(default)]
    arguments: Option<Value>,
    /// `{"chat_id", "platform", "user_id", "group_id"}`: read like MCP's `_meta`.
    #[serde(default)]
    context: Option<Map<String, Value>>,
}

/// The arguments a tool gets: the model's, with the host context written over them by the one
/// rule both front doors share ([`HostContext::inject`]).
fn with_context(
    schema: &Value,
    arguments: Option<Value>,
    context: Option<Map<String, Value>>,
) -> Result<Value, ApiError> {
    let mut arguments = match arguments {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "arguments: must be a JSON object of the tool's parameters, got {}",
                json_kind(&other)
            )));
        }
    };
    let context = context.unwrap_or_default();
    if let Some(unknown) = context
        .keys()
        .find(|k| !HOST_CONTEXT_KEYS.contains(&k.as_str()))
    {
        // Like every unknown field in a body: 422, naming it.
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "context: unknown key `{unknown}`; expected {}",
                HOST_CONTEXT_KEYS.join(", ")
            ),
        ));
    }
    let context = HostContext::from_context(&context)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    context.inject(&mut arguments, schema);
    Ok(Value::Object(arguments))
}

/// `POST /v1/planner/tools/{name}`. The HTTP status says whether the call reached the tool:
/// 200 when it ran (the body is what it answered, `{"success": false, "error": …}` included —
/// that is a result for the model, e.g. a stream-isolation refusal), 422 when the arguments do
/// not match the tool's schema, 404 for an unknown tool. `X-Tool-Outcome` carries the kind.
pub(crate) async fn call_tool(
    State(api): State<Api>,
    PathParams(name): PathParams<String>,
    JsonBody(body): JsonBody<ToolCallBody>,
) -> Result<Response, ApiError> {
    let Some(tool) = api.state.planner.get(&name) else {
        let names = api.state.planner.names(Role::Admin);
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "unknown planner tool `{name}`; use one of: {}",
                names.join(", ")
            ),
        )
        .with("tools", json!(names.to_vec())));
    };
    let arguments = with_context(tool.parameters(), body.arguments, body.context)?;
    let outcome = call_planner_tool(&api.state.engine, &api.state.planner, &name, arguments).await;
    api.state
        .metrics
        .count_planner_call(&name, outcome.kind.as_str(), "http");
    let status = match outcome.kind {
        OutcomeKind::Ok | OutcomeKind::Failed => StatusCode::OK,
        OutcomeKind::InvalidArguments => StatusCode::UNPROCESSABLE_ENTITY,
        OutcomeKind::UnknownTool => StatusCode::NOT_FOUND,
        OutcomeKind::PermissionDenied => StatusCode::FORBIDDEN,
    };
    let mut response = (status, Json(outcome.value)).into_response();
    response.headers_mut().insert(
        "x-tool-outcome",
        HeaderValue::from_static(outcome.kind.as_str()),
    );
    Ok(response)
}

/// `GET /v1/planner/tools`: every planner tool of the registry in the planner's order, with its
/// description, parameters (JSON Schema) and visibility — the definitions a host registers, so
/// they cannot drift from what `POST /v1/planner/tools/{name}` checks.
pub(crate) async fn list_tools(State(api): State<Api>) -> Json<Value> {
    let tools: Vec<Value> = PLANNER_TOOLS
        .iter()
        .filter_map(|(name, visibility)| {
            let tool = api.state.planner.get(name)?;
            Some(json!({
                "name": tool.name(),
                "description": tool.description(),
                "parameters": tool.parameters(),
                "visibility": visibility.as_str(),
            }))
        })
        .collect();
    Json(json!({ "tools": tools }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BoardQuery {
    stream_id: String,
    /// The host's planner session; the introduction is given once per session.
    session: Option<String>,
}

/// `GET /v1/planner/board`: the context block for the next planner request, or `null` when
/// there is nothing new.
pub(crate) async fn board(
    State(api): State<Api>,
    QueryParams(query): QueryParams<BoardQuery>,
) -> Result<Json<Value>, ApiError> {
    let stream = mai_core::ids::StreamId::new(query.stream_id.trim())
        .map_err(|e| ApiError::bad_request(format!("stream_id: {e}")))?;
    let session = query
        .session
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let board = api.state.engine.planner_board(&stream, &session).await?;
    Ok(Json(json!({
        "stream_id": stream,
        "session": session,
        "board": board,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Option<Map<String, Value>> {
        match json!({"chat_id": "A", "platform": "qq", "user_id": 1, "group_id": "42"}) {
            Value::Object(map) => Some(map),
            _ => None,
        }
    }

    #[test]
    fn context_wins_and_declared_parameters_stay_the_models() {
        let no_target = json!({"properties": {"stream_id": {}}});
        let args = with_context(
            &no_target,
            Some(json!({"stream_id": "B", "chat_id": "B", "group_id": "7"})),
            context(),
        )
        .unwrap();
        assert_eq!(
            args,
            json!({"stream_id": "B", "chat_id": "A", "platform": "qq", "group_id": "42", "user_id": "1"})
        );
        let send =
            json!({"properties": {"text": {}, "group_id": {}, "user_id": {}, "platform": {}}});
        let args = with_context(
            &send,
            Some(json!({"text": "hi", "group_id": "7"})),
            context(),
        )
        .unwrap();
        assert_eq!(
            args,
            json!({"text": "hi", "group_id": "7", "chat_id": "A", "host_platform": "qq",
                   "host_group_id": "42", "host_user_id": "1"})
        );
        assert!(with_context(&send, Some(json!([1])), context()).is_err());
        assert_eq!(with_context(&no_target, None, None).unwrap(), json!({}));
    }

    #[test]
    fn bad_context_is_named() {
        let mut bad = context().unwrap();
        bad.insert("chat_idd".into(), json!("A"));
        let error = with_context(&json!({}), None, Some(bad)).unwrap_err();
        assert!(format!("{error:?}").contains("chat_idd"), "{error:?}");
        let mut bad = context().unwrap();
        bad.insert("chat_id".into(), json!(["A"]));
        let error = with_context(&json!({}), None, Some(bad)).unwrap_err();
        assert!(
            format!("{error:?}").contains("context.chat_id"),
            "{error:?}"
        );
    }
}
