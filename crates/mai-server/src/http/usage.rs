//! `GET /v1/usage`: what the model calls cost, summed by owner, requester, stream, model,
//! purpose, day or task over a time range (docs/usage.md). The API is the token holder's door,
//! so it reads as admin: every figure. Must not: reach the store (the engine's facade sums).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use mai_core::usage::{UsageGroup, UsageQuery};
use mai_engine::{Caller, usage_json};

use super::Api;
use super::error::{ApiError, QueryParams};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageParams {
    group_by: Option<String>,
    since: Option<String>,
    until: Option<String>,
    owner: Option<String>,
    requester: Option<String>,
    stream_id: Option<String>,
}

fn filled(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

pub(crate) async fn get(
    State(api): State<Api>,
    QueryParams(params): QueryParams<UsageParams>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let group_by = filled(params.group_by)
        .map(|g| UsageGroup::parse(&g))
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("group_by: {e}")))?;
    let time = |field: &str, value: Option<String>| {
        filled(value)
            .map(|v| engine.parse_usage_time(&v))
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("{field}: {e}")))
    };
    let query = UsageQuery {
        since: time("since", params.since)?,
        until: time("until", params.until)?,
        task: None,
        owner: filled(params.owner),
        requester: filled(params.requester),
        stream: filled(params.stream_id),
        group_by,
    };
    let caller = Caller::admin_reader("http-api").map_err(ApiError::internal)?;
    let (groups, total) = engine.usage(&caller, query.clone()).await?;
    let currency = engine.currency();
    Ok(Json(json!({
        "group_by": group_by.map(UsageGroup::as_str),
        "since": query.since,
        "until": query.until,
        "groups": groups.iter().map(|g| usage_json(g, &currency)).collect::<Vec<_>>(),
        "total": usage_json(&total, &currency),
    })))
}
