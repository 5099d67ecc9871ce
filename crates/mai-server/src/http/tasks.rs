//! `/v1/tasks`: task create/list/get/cancel/inject/answer/history for other programs, all
//! through the engine's task manager facade.
//!
//! Who the caller is (docs/http-api.md, "Caller identity"): the API is a program's door, guarded
//! by the bearer token, so reads and changes of existing tasks act as **admin**, in the name of
//! the planner of the task's stream (`planner:{stream_id}` is what status logs show). Creating a
//! task with `user_id` creates it **for that person** (`platform:user_id`), with that person's
//! role in the stream resolved from `[permission]` — a guest is refused, as in chat — and the
//! task later runs with that role. Without `user_id` the task belongs to the planner of the
//! stream (admin), like a task the planner creates. Must not: reach the store, or decide a
//! permission the facade decides.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use mai_core::host::{ChatTarget, Host};
use mai_core::ids::{PersonId, StreamId};
use mai_core::permission::Speaker;
use mai_core::store::TaskFilter;
use mai_core::task::{TaskLevel, TaskRecord, TaskStatus, Trigger};
use mai_engine::{Caller, CreateTask};

use super::Api;
use super::error::{ApiError, JsonBody, PathParams, QueryParams, to_json};

/// Default and largest page of `GET /v1/tasks`.
const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;

/// A task as the API shows it: the record plus its 8-character short id.
pub(crate) fn task_view(task: &TaskRecord) -> Result<Value, ApiError> {
    let mut value = to_json(task)?;
    if let Value::Object(fields) = &mut value {
        fields.insert("short_id".into(), Value::String(task.id.short()));
    }
    Ok(value)
}

fn stream(field: &str, value: &str) -> Result<StreamId, ApiError> {
    StreamId::new(value.trim()).map_err(|e| ApiError::bad_request(format!("{field}: {e}")))
}

/// The caller for reads: admin (any task is visible); the owner only names the reader.
fn reader() -> Result<Caller, ApiError> {
    Caller::admin_reader("http-api").map_err(ApiError::internal)
}

/// The caller for a change of `task`: the token holder, admin, in the task's stream.
fn acting_on(task: &TaskRecord) -> Caller {
    Caller::token(
        task.stream_id.clone(),
        task.platform.clone(),
        task.metadata.group_id.clone(),
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    stream_id: Option<String>,
    /// One status or several, comma-separated.
    status: Option<String>,
    limit: Option<u32>,
}

pub(crate) async fn list(
    State(api): State<Api>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let mut statuses = Vec::new();
    for name in query.status.iter().flat_map(|s| s.split(',')) {
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        statuses.push(
            name.parse::<TaskStatus>()
                .map_err(|e| ApiError::bad_request(format!("status: {e}")))?,
        );
    }
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit: must be between 1 and {MAX_LIMIT}, got {limit}"
        )));
    }
    let filter = TaskFilter {
        stream_id: query
            .stream_id
            .as_deref()
            .map(|s| stream("stream_id", s))
            .transpose()?,
        statuses,
        limit: Some(limit),
        ..TaskFilter::default()
    };
    let tasks = api.state.engine.list(&reader()?, filter).await?;
    let views = tasks.iter().map(task_view).collect::<Result<Vec<_>, _>>()?;
    Ok(Json(json!({ "tasks": views })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    intent: String,
    stream_id: String,
    platform: String,
    user_id: Option<String>,
    group_id: Option<String>,
    level: Option<TaskLevel>,
    delay_seconds: Option<u64>,
    cron_expr: Option<String>,
    /// The IANA zone `cron_expr` is read in; default `[task] timezone`.
    timezone: Option<String>,
    priority: Option<i32>,
    reply_stream_id: Option<String>,
    title: Option<String>,
}

pub(crate) async fn create(
    State(api): State<Api>,
    JsonBody(body): JsonBody<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let stream_id = stream("stream_id", &body.stream_id)?;
    let trigger = match (body.delay_seconds, body.cron_expr) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give either delay_seconds or cron_expr, not both",
            ));
        }
        (Some(seconds), None) => Trigger::Delay { seconds },
        (None, Some(expr)) => Trigger::Cron {
            expr,
            timezone: body.timezone.filter(|zone| !zone.trim().is_empty()),
        },
        (None, None) if body.timezone.is_some() => {
            return Err(ApiError::bad_request(
                "timezone: only a cron_expr has a time zone; give cron_expr too, or drop timezone",
            ));
        }
        (None, None) => Trigger::Now,
    };
    let platform = body.platform.trim().to_owned();
    if platform.is_empty() || platform.contains(':') {
        return Err(ApiError::bad_request(
            "platform: must be a non-empty platform name without `:` (e.g. `qq`)",
        ));
    }
    let group_id = match body.group_id.filter(|g| !g.trim().is_empty()) {
        Some(group) => Some(group),
        // A person's role depends on the chat being a group: ask the host when not told.
        None => match api.state.host.stream_info(&stream_id).await {
            Ok(Some(info)) => match info.target {
                ChatTarget::Group { group_id } => Some(group_id),
                ChatTarget::Private { .. } => None,
            },
            _ => None,
        },
    };
    let caller = match body.user_id.as_deref() {
        Some(user_id) => {
            let person = PersonId::new(&platform, user_id.trim())
                .map_err(|e| ApiError::bad_request(format!("user_id: {e}")))?;
            let role = api
                .state
                .engine
                .config()
                .load()
                .permissions
                .resolve(&Speaker {
                    platform: &platform,
                    user_id: user_id.trim(),
                    group_id: group_id.as_deref(),
                });
            Caller::person(person, role, stream_id.clone(), group_id)
        }
        None => Caller::token(stream_id.clone(), platform.clone(), group_id),
    };
    let request = CreateTask {
        level: body.level.unwrap_or(TaskLevel::Agent),
        trigger,
        priority: body.priority.unwrap_or(0),
        reply_stream_id: body
            .reply_stream_id
            .as_deref()
            .map(|s| stream("reply_stream_id", s))
            .transpose()?,
        title: body.title,
        ..CreateTask::agent(body.intent)
    };
    let task = api.state.engine.create(&caller, request).await?;
    Ok((StatusCode::CREATED, Json(task_view(&task)?)))
}

pub(crate) async fn get(
    State(api): State<Api>,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let task = api.state.engine.resolve(&reader()?, &id).await?;
    Ok(Json(task_view(&task)?))
}

pub(crate) async fn cancel(
    State(api): State<Api>,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let after = engine
        .cancel(&acting_on(&task), &task.id.to_string())
        .await?;
    // A running task stops at its next await: say so rather than claim it is cancelled.
    let stopping = after.status == TaskStatus::Running;
    Ok(Json(
        json!({ "task": task_view(&after)?, "stopping": stopping }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InjectBody {
    instruction: String,
}

pub(crate) async fn inject(
    State(api): State<Api>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<InjectBody>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let answered = task.status == TaskStatus::WaitingInput;
    let task = engine
        .inject(&acting_on(&task), &task.id.to_string(), &body.instruction)
        .await?;
    Ok(Json(json!({
        "task": task_view(&task)?,
        // A waiting task takes the instruction as the answer to its question.
        "answered": answered,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerBody {
    text: String,
}

/// Answers a task that waits for input (what `mai-agent task ask` sends to a running `serve`):
/// 409 when it is not waiting or its question was answered already — never taken as an
/// instruction instead, unlike `inject`.
pub(crate) async fn answer(
    State(api): State<Api>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let task = engine
        .answer(&acting_on(&task), &task.id.to_string(), &body.text)
        .await?;
    Ok(Json(json!({ "task": task_view(&task)? })))
}

pub(crate) async fn history(
    State(api): State<Api>,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let history = api.state.engine.history(&reader()?, &id).await?;
    Ok(Json(json!({
        "task": task_view(&history.task)?,
        "status_log": to_json(&history.status_log)?,
        "entries": to_json(&history.entries)?,
    })))
}
