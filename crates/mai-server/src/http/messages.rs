//! `POST /v1/messages`: HTTP ingestion, a chat channel for programs. The message goes through
//! the same inbound pipeline as every other channel ([`crate::inbound::deliver`]).
//! `GET /v1/streams/{stream_id}/messages`: the recent messages of a task's chat as the engine's
//! host has them (the chat a waiting task's question sits in, for the dashboard) — 404 for a
//! stream no task of the caller is in, 503 when the host cannot answer now. Must not: handle
//! commands or replies itself, or read a chat no task of the caller is in.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;
use serde::Deserialize;

use mai_core::ids::StreamId;
use mai_core::store::TaskFilter;
use mai_engine::Caller;
use mai_host::IncomingMessage;

use super::Api;
use super::error::{ApiError, JsonBody, PathParams, QueryParams};
use crate::inbound::{Inbound, deliver};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageBody {
    platform: String,
    stream_id: Option<StreamId>,
    user_id: String,
    group_id: Option<String>,
    group_name: Option<String>,
    sender_name: Option<String>,
    text: String,
    /// The sender is an anonymous member of the group (see [`IncomingMessage::anonymous`]).
    #[serde(default)]
    anonymous: bool,
    /// The platform's id of the message: with several instances on one database, a message
    /// delivered to more than one of them is processed once (see [`IncomingMessage`]).
    message_id: Option<String>,
}

pub(crate) async fn post(
    State(api): State<Api>,
    JsonBody(body): JsonBody<MessageBody>,
) -> Result<Json<Inbound>, ApiError> {
    let message = IncomingMessage {
        platform: body.platform.trim().to_owned(),
        stream_id: body.stream_id,
        group_id: body.group_id,
        group_name: body.group_name,
        user_id: body.user_id.trim().to_owned(),
        sender_name: body.sender_name.unwrap_or_default(),
        text: body.text,
        at: Utc::now(),
        anonymous: body.anonymous,
        platform_message_id: body.message_id,
    };
    Ok(Json(deliver(&api.state, message).await?))
}

/// Default and largest number of messages `GET /v1/streams/{stream_id}/messages` returns.
const DEFAULT_RECENT: usize = 20;
const MAX_RECENT: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecentQuery {
    limit: Option<usize>,
}

/// The newest messages of a task's chat, oldest first (empty when the host stored none).
pub(crate) async fn recent(
    State(api): State<Api>,
    PathParams(stream_id): PathParams<String>,
    QueryParams(query): QueryParams<RecentQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let stream = StreamId::new(stream_id.trim())
        .map_err(|e| ApiError::bad_request(format!("stream_id: {e}")))?;
    let limit = query.limit.unwrap_or(DEFAULT_RECENT);
    if !(1..=MAX_RECENT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit: must be between 1 and {MAX_RECENT}, got {limit}"
        )));
    }
    let engine = &api.state.engine;
    let reader = Caller::admin_reader("http-api").map_err(ApiError::internal)?;
    let filter = TaskFilter {
        stream_id: Some(stream.clone()),
        limit: Some(1),
        ..TaskFilter::default()
    };
    if engine.list(&reader, filter).await?.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no task is in stream `{stream}`: only the chat of a task can be read here; \
                 give the stream_id of a task (GET /v1/tasks)"
            ),
        ));
    }
    let messages = engine
        .host()
        .recent_messages(&stream, limit)
        .await
        .map_err(|error| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the chat host cannot give the messages of `{stream}` now ({error}); \
                     try again once it is back"
                ),
            )
        })?;
    Ok(Json(serde_json::json!({
        "stream_id": stream.to_string(),
        "messages": messages,
    })))
}
