//! `POST /v1/messages`: HTTP ingestion, a chat channel for programs. The message goes through
//! the same inbound pipeline as every other channel ([`crate::inbound::deliver`]). Must not:
//! handle commands or replies itself.

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use serde::Deserialize;

use mai_core::ids::StreamId;
use mai_host::IncomingMessage;

use super::Api;
use super::error::{ApiError, JsonBody};
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
    };
    Ok(Json(deliver(&api.state, message).await?))
}
