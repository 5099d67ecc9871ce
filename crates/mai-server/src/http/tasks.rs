//! `/v1/tasks`: task create/list/get/cancel/pause/resume/inject/answer/history for other
//! programs and the dashboard, all through the engine's task manager facade.
//!
//! Who the caller is (docs/http-api.md, "Caller identity"): the API is a program's door, guarded
//! by the bearer token, so reads and changes of existing tasks act as **admin**, in the name of
//! the planner of the task's stream (`planner:{stream_id}` is what status logs show). Creating a
//! task with `user_id` creates it **for that person** (`platform:user_id`), with that person's
//! role in the stream resolved from `[permission]` — a guest is refused, as in chat — and the
//! task later runs with that role. Without `user_id` the task belongs to the planner of the
//! stream (admin), like a task the planner creates. A change sent with `X-Mai-Client:
//! dashboard` (the dashboard's pages) is logged as `dashboard:operator` instead, so a status log
//! says it came from the dashboard. Must not: reach the store, or decide a permission the
//! facade decides.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use mai_core::host::{ChatTarget, Host};
use mai_core::ids::{Owner, PersonId, StreamId};
use mai_core::permission::Speaker;
use mai_core::store::TaskFilter;
use mai_core::task::{TaskId, TaskLevel, TaskRecord, TaskStatus, Trigger};
use mai_engine::{Caller, CreateTask};

use super::Api;
use super::error::{ApiError, JsonBody, PathParams, QueryParams, to_json};

/// Default and largest page of `GET /v1/tasks`.
const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;
/// The header by which the dashboard names itself, and the actor its changes are logged as.
const CLIENT_HEADER: &str = "x-mai-client";
const DASHBOARD_ACTOR: (&str, &str) = ("dashboard", "operator");

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

/// The caller for a change of `task`: the token holder, admin, in the task's stream — logged as
/// the stream's planner, or as `dashboard:operator` when the dashboard sent it.
fn acting_on(task: &TaskRecord, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let mut caller = Caller::token(
        task.stream_id.clone(),
        task.platform.clone(),
        task.metadata.group_id.clone(),
    );
    let from_dashboard = headers
        .get(CLIENT_HEADER)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"dashboard"));
    if from_dashboard {
        let (platform, name) = DASHBOARD_ACTOR;
        let operator = PersonId::new(platform, name).map_err(ApiError::internal)?;
        caller.owner = Owner::Person(operator);
    }
    Ok(caller)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    stream_id: Option<String>,
    /// One status or several, comma-separated.
    status: Option<String>,
    limit: Option<u32>,
    /// `platform:user_id` or `planner:stream_id`.
    owner: Option<String>,
    level: Option<TaskLevel>,
    /// Created at or after (RFC 3339).
    since: Option<DateTime<Utc>>,
    /// Created before (RFC 3339).
    until: Option<DateTime<Utc>>,
    /// A piece of the title (any case) or the start of the id.
    q: Option<String>,
    /// Only the tasks this task made: its sub-tasks and reply tasks (an id, or its start, or an
    /// exact title, resolved like any task reference).
    parent: Option<String>,
    /// Also count the matching tasks per status (the status filter aside).
    counts: Option<bool>,
    /// Skip this many matching tasks (the previous page's `next_offset`).
    offset: Option<u64>,
    /// `newest` (default) or `oldest` first, by creation time.
    order: Option<Order>,
}

/// The order of `GET /v1/tasks`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Order {
    #[default]
    Newest,
    Oldest,
}

impl ListQuery {
    /// The parent's id: a full id as given, a start of one (or a title) resolved to its task;
    /// a reference that names no task, or several, is refused.
    async fn parent_id(&self, api: &Api) -> Result<Option<TaskId>, ApiError> {
        let Some(parent) = self
            .parent
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty())
        else {
            return Ok(None);
        };
        if let Ok(id) = parent.parse::<TaskId>() {
            return Ok(Some(id));
        }
        Ok(Some(api.state.engine.resolve(&reader()?, parent).await?.id))
    }
}

fn parse_statuses(list: Option<&str>) -> Result<Vec<TaskStatus>, ApiError> {
    let mut statuses = Vec::new();
    for name in list.iter().flat_map(|s| s.split(',')) {
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        statuses.push(
            name.parse::<TaskStatus>()
                .map_err(|e| ApiError::bad_request(format!("status: {e}")))?,
        );
    }
    Ok(statuses)
}

/// The store-side filter of a list query: stream, owner, level, statuses, parent, creation
/// time and search all narrow the store's read, which reads only the asked page.
fn store_filter(
    query: &ListQuery,
    statuses: &[TaskStatus],
    parent: Option<TaskId>,
) -> Result<TaskFilter, ApiError> {
    let owner = match query.owner.as_deref().map(str::trim) {
        Some(owner) if !owner.is_empty() => Some(owner.parse::<Owner>().map_err(|e| {
            ApiError::bad_request(format!(
                "owner: {e} (give `platform:user_id` or `planner:stream_id`)"
            ))
        })?),
        _ => None,
    };
    let stream_id = query
        .stream_id
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .map(|s| stream("stream_id", s))
        .transpose()?;
    Ok(TaskFilter {
        stream_id,
        owner,
        level: query.level,
        statuses: statuses.to_vec(),
        parent,
        created_since: query.since,
        created_before: query.until,
        search: query.q.clone().filter(|q| !q.trim().is_empty()),
        limit: Some(query.limit.unwrap_or(DEFAULT_LIMIT)),
        offset: query.offset,
        oldest_first: query.order.unwrap_or_default() == Order::Oldest,
        ..TaskFilter::default()
    })
}

/// Lists tasks a page at a time, all in the store: one grouped count of the matching tasks per
/// status (the status filter aside) gives `total` (and `counts`), and one read gives the page in
/// the asked order at `offset`; `next_offset` says where the next page starts. Every matching
/// task is reachable (`complete` is always true).
pub(crate) async fn list(
    State(api): State<Api>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let statuses = parse_statuses(query.status.as_deref())?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit: must be between 1 and {MAX_LIMIT}, got {limit}"
        )));
    }
    let parent = query.parent_id(&api).await?;
    let filter = store_filter(&query, &statuses, parent)?;
    let counts = api
        .state
        .engine
        .count_by_status(&reader()?, filter.clone())
        .await?;
    let total: u64 = counts
        .iter()
        .filter(|(status, _)| statuses.is_empty() || statuses.contains(status))
        .map(|(_, n)| n)
        .sum();
    let page = api.state.engine.list(&reader()?, filter).await?;
    let views = page.iter().map(task_view).collect::<Result<Vec<_>, _>>()?;
    let end = query.offset.unwrap_or(0).saturating_add(views.len() as u64);
    let next_offset = (end < total).then_some(end);
    let mut body = json!({
        "tasks": views,
        "total": total,
        "next_offset": next_offset,
        "complete": true,
    });
    if query.counts == Some(true) {
        let by_status: BTreeMap<&str, u64> = counts
            .iter()
            .map(|(status, n)| (status.as_str(), *n))
            .collect();
        body["counts"] = json!(by_status);
        // The store counts every matching task: always complete (kept for older clients).
        body["counts_complete"] = json!(true);
    }
    Ok(Json(body))
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
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let mut view = task_view(&task)?;
    let usage = engine.task_usage(task.id).await?;
    view["usage"] = mai_engine::usage_json(&usage, &engine.currency());
    Ok(Json(view))
}

/// A cancelled or paused task's answer: a running one stops at its next await, so say
/// `"stopping"` rather than claim it has stopped.
fn stopping_view(after: &TaskRecord) -> Result<Json<Value>, ApiError> {
    let stopping = after.status == TaskStatus::Running;
    Ok(Json(
        json!({ "task": task_view(after)?, "stopping": stopping }),
    ))
}

pub(crate) async fn cancel(
    State(api): State<Api>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let after = engine
        .cancel(&acting_on(&task, &headers)?, &task.id.to_string())
        .await?;
    stopping_view(&after)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InjectBody {
    instruction: String,
}

pub(crate) async fn inject(
    State(api): State<Api>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<InjectBody>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let answered = task.status == TaskStatus::WaitingInput;
    let caller = acting_on(&task, &headers)?;
    let task = engine
        .inject(&caller, &task.id.to_string(), &body.instruction)
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
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let task = engine
        .answer(
            &acting_on(&task, &headers)?,
            &task.id.to_string(),
            &body.text,
        )
        .await?;
    Ok(Json(json!({ "task": task_view(&task)? })))
}

/// Pauses a task: at once unless it runs; a running one pauses at its next step (`"stopping":
/// true`, status still `running`) and later resumes from its checkpoint.
pub(crate) async fn pause(
    State(api): State<Api>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let after = engine
        .pause(&acting_on(&task, &headers)?, &task.id.to_string())
        .await?;
    stopping_view(&after)
}

/// Resumes a paused task: it is queued again (`pending`) and continues from its checkpoint.
pub(crate) async fn resume(
    State(api): State<Api>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let engine = &api.state.engine;
    let task = engine.resolve(&reader()?, &id).await?;
    let after = engine
        .resume(&acting_on(&task, &headers)?, &task.id.to_string())
        .await?;
    Ok(Json(json!({ "task": task_view(&after)? })))
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
