//! The read queries on PostgreSQL: one task, a person's reference to a task, filtered lists,
//! the figures of the caps, history. The same projection as on SQLite — the row plus its status
//! log aggregated into one JSON column — so the shared codec decodes both. Each runs on any
//! connection or inside a write transaction (`FOR UPDATE` where a write reads first).

use mai_core::store::{HistoryEntry, Resolved, StoreError, TaskCounts, TaskFilter};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use sqlx::{AssertSqlSafe, PgConnection, Postgres, QueryBuilder, Row};
use uuid::Uuid;

use crate::codec::{decode_history, decode_task, id_key, level_text, parse_id_key, time_text};
use crate::error::{corrupt, pg};
use crate::read::{AMBIGUOUS_LIMIT, CountKeys, as_id_prefix, prefix_range};

/// The task projection: id, status, record, status log as a JSON array of
/// `[at, status, actor, reason]`.
pub(crate) const SELECT_TASKS: &str = "SELECT t.id, t.status, t.record, \
     COALESCE((SELECT json_agg(json_build_array(l.at, l.status, l.actor, l.reason) \
     ORDER BY l.seq)::text FROM task_status_log l WHERE l.task_id = t.id), '[]') FROM tasks t";

fn task_of(row: &sqlx::postgres::PgRow) -> Result<TaskRecord, StoreError> {
    let column = |n: usize| -> Result<String, StoreError> {
        row.try_get::<String, _>(n)
            .map_err(|error| corrupt("row", format!("column {n}: {error}")))
    };
    decode_task(&column(0)?, &column(1)?, &column(2)?, &column(3)?)
}

async fn tasks_of(
    connection: &mut PgConnection,
    mut query: QueryBuilder<Postgres>,
    doing: &'static str,
) -> Result<Vec<TaskRecord>, StoreError> {
    let rows = query
        .build()
        .fetch_all(&mut *connection)
        .await
        .map_err(pg(doing))?;
    rows.iter().map(task_of).collect()
}

/// Task `id`; with `lock`, its row stays locked until the transaction ends.
pub(crate) async fn get_task(
    connection: &mut PgConnection,
    id: TaskId,
    lock: bool,
) -> Result<Option<TaskRecord>, StoreError> {
    const DOING: &str = "reading a task";
    let lock = if lock { " FOR UPDATE OF t" } else { "" };
    let row = sqlx::query(AssertSqlSafe(format!(
        "{SELECT_TASKS} WHERE t.id = $1{lock}"
    )))
    .bind(id_key(id))
    .fetch_optional(&mut *connection)
    .await
    .map_err(pg(DOING))?;
    row.as_ref().map(task_of).transpose()
}

async fn keys_of(
    connection: &mut PgConnection,
    mut query: QueryBuilder<Postgres>,
    doing: &'static str,
) -> Result<Vec<String>, StoreError> {
    query
        .build_query_scalar()
        .fetch_all(&mut *connection)
        .await
        .map_err(pg(doing))
}

fn probe() -> i64 {
    i64::try_from(AMBIGUOUS_LIMIT + 1).unwrap_or(i64::MAX)
}

/// A full id, then a unique id prefix, then a unique exact title (as on SQLite).
pub(crate) async fn resolve_reference(
    connection: &mut PgConnection,
    reference: &str,
) -> Result<Resolved, StoreError> {
    const DOING: &str = "resolving a task reference";
    let reference = reference.trim();
    if let Ok(uuid) = Uuid::try_parse(reference)
        && let Some(task) = get_task(connection, TaskId(uuid), false).await?
    {
        return Ok(Resolved::Found(Box::new(task)));
    }
    if let Some(hex) = as_id_prefix(reference) {
        let (from, to) = prefix_range(&hex);
        let mut query = QueryBuilder::new("SELECT id FROM tasks WHERE id >= ");
        query.push_bind(from).push(" AND id < ").push_bind(to);
        query.push(" ORDER BY id LIMIT ").push_bind(probe());
        let keys = keys_of(connection, query, DOING).await?;
        if !keys.is_empty() {
            return one_or_ambiguous(connection, &keys).await;
        }
    }
    if reference.is_empty() {
        return Ok(Resolved::NotFound);
    }
    let mut query = QueryBuilder::new("SELECT id FROM tasks WHERE title = ");
    query.push_bind(reference.to_owned());
    query
        .push(" ORDER BY created_at, id LIMIT ")
        .push_bind(probe());
    let keys = keys_of(connection, query, DOING).await?;
    one_or_ambiguous(connection, &keys).await
}

async fn one_or_ambiguous(
    connection: &mut PgConnection,
    keys: &[String],
) -> Result<Resolved, StoreError> {
    let ids = keys
        .iter()
        .map(|key| parse_id_key(key).ok_or_else(|| corrupt(key, "the id is not a uuid")))
        .collect::<Result<Vec<_>, _>>()?;
    match ids.as_slice() {
        [] => Ok(Resolved::NotFound),
        [id] => Ok(match get_task(connection, *id, false).await? {
            Some(task) => Resolved::Found(Box::new(task)),
            None => Resolved::NotFound,
        }),
        _ => Ok(Resolved::Ambiguous(
            ids.into_iter().take(AMBIGUOUS_LIMIT).collect(),
        )),
    }
}

fn push_statuses(query: &mut QueryBuilder<Postgres>, statuses: &[TaskStatus]) {
    if statuses.is_empty() {
        return;
    }
    let texts: Vec<String> = statuses.iter().map(|s| s.as_str().to_owned()).collect();
    query
        .push(" AND t.status = ANY(")
        .push_bind(texts)
        .push(")");
}

/// The `AND …` conditions of `filter` on `tasks t` (its statuses only when `statuses`).
fn push_filter(query: &mut QueryBuilder<Postgres>, filter: &TaskFilter, statuses: bool) {
    let mut condition = |test: &str, value: String| {
        query.push(format_args!(" AND {test}")).push_bind(value);
    };
    if let Some(owner) = &filter.owner {
        condition("t.owner = ", owner.to_string());
    }
    if let Some(requester) = &filter.requester {
        condition("t.requester = ", requester.to_string());
    }
    if let Some(stream) = &filter.stream_id {
        condition("t.stream_id = ", stream.as_str().to_owned());
    }
    if let Some(level) = filter.level {
        condition("t.level = ", level_text(level).to_owned());
    }
    if let Some(parent) = filter.parent {
        // Sub-tasks and replies alike (`created_by` names sub-tasks only).
        condition("t.parent_id = ", id_key(parent));
    }
    if let Some(since) = filter.created_since {
        condition("t.created_at >= ", time_text(since));
    }
    if let Some(before) = filter.created_before {
        condition("t.created_at < ", time_text(before));
    }
    if let Some(title) = filter.search_title() {
        let prefix = filter.search_id_prefix().unwrap_or_default();
        query
            .push(" AND (strpos(lower(t.title), ")
            .push_bind(title)
            .push(") > 0 OR (");
        query
            .push_bind(prefix.clone())
            .push(" <> '' AND starts_with(t.id, ")
            .push_bind(prefix)
            .push(")))");
    }
    if statuses {
        push_statuses(query, &filter.statuses);
    }
}

pub(crate) async fn list_tasks(
    connection: &mut PgConnection,
    filter: &TaskFilter,
) -> Result<Vec<TaskRecord>, StoreError> {
    let mut query = QueryBuilder::new(SELECT_TASKS);
    query.push(" WHERE TRUE");
    push_filter(&mut query, filter, true);
    query.push(if filter.oldest_first {
        " ORDER BY t.created_at, t.id"
    } else {
        " ORDER BY t.created_at DESC, t.id DESC"
    });
    if let Some(limit) = filter.limit {
        query.push(" LIMIT ").push_bind(i64::from(limit));
    }
    if let Some(offset) = filter.offset {
        query
            .push(" OFFSET ")
            .push_bind(i64::try_from(offset).unwrap_or(i64::MAX));
    }
    tasks_of(connection, query, "listing tasks").await
}

/// The tasks matching `filter` per status (its statuses and limit aside), one grouped read.
pub(crate) async fn count_by_status(
    connection: &mut PgConnection,
    filter: &TaskFilter,
    statuses: bool,
) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
    let mut query = QueryBuilder::new("SELECT t.status, count(*) FROM tasks t WHERE TRUE");
    push_filter(&mut query, filter, statuses);
    query.push(" GROUP BY t.status");
    let rows: Vec<(String, i64)> = query
        .build_query_as()
        .fetch_all(&mut *connection)
        .await
        .map_err(pg("counting tasks per status"))?;
    rows.into_iter()
        .map(|(status, n)| {
            let status = status
                .parse::<TaskStatus>()
                .map_err(|e| StoreError::Corrupt {
                    what: "a task's status".into(),
                    detail: e.to_string(),
                })?;
            Ok((status, u64::try_from(n).unwrap_or(0)))
        })
        .collect()
}

pub(crate) async fn list_active_tasks(
    connection: &mut PgConnection,
) -> Result<Vec<TaskRecord>, StoreError> {
    let active: Vec<TaskStatus> = TaskStatus::ALL
        .into_iter()
        .filter(|status| !status.is_terminal())
        .collect();
    let mut query = QueryBuilder::new(SELECT_TASKS);
    query.push(" WHERE TRUE");
    push_statuses(&mut query, &active);
    query.push(" ORDER BY t.created_at, t.id");
    tasks_of(connection, query, "listing active tasks").await
}

/// The figures of the caps on task creation, in one statement (see the SQLite version).
pub(crate) async fn count_tasks(
    connection: &mut PgConnection,
    keys: &CountKeys,
) -> Result<TaskCounts, StoreError> {
    const UNFINISHED: &str = "status IN ('scheduled', 'pending', 'running', 'waiting_input', \
                              'paused')";
    const CRON: &str = "(record::jsonb #>> '{trigger,kind}') = 'cron'";
    // The daily task budgets count the tasks created since the day began, reply tasks excepted.
    const NOT_REPLY: &str =
        "COALESCE((record::jsonb #>> '{metadata,is_reply}')::boolean, false) = false";
    let sql = format!(
        "SELECT (SELECT count(*) FROM tasks WHERE requester = $1 AND {UNFINISHED}), \
         (SELECT count(*) FROM tasks WHERE stream_id = $2 AND {UNFINISHED}), \
         CASE WHEN $4 THEN (SELECT count(*) FROM tasks WHERE requester = $1 AND {UNFINISHED} \
         AND {CRON}) ELSE 0 END, \
         CASE WHEN $4 THEN (SELECT count(*) FROM tasks WHERE stream_id = $2 AND {UNFINISHED} \
         AND {CRON}) ELSE 0 END, \
         (SELECT count(*) FROM tasks WHERE created_by = $3), \
         CASE WHEN $5::text IS NULL THEN 0 ELSE (SELECT count(*) FROM tasks WHERE requester = $1 \
         AND created_at >= $5 AND {NOT_REPLY}) END, \
         CASE WHEN $5::text IS NULL THEN 0 ELSE (SELECT count(*) FROM tasks WHERE stream_id = $2 \
         AND created_at >= $5 AND {NOT_REPLY}) END"
    );
    let figures: (i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(AssertSqlSafe(sql))
        .bind(keys.requester.as_deref())
        .bind(keys.stream.as_str())
        .bind(keys.created_by.as_deref())
        .bind(keys.recurring)
        .bind(keys.created_since.as_deref())
        .fetch_one(&mut *connection)
        .await
        .map_err(pg("counting tasks"))?;
    let figure = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(TaskCounts {
        unfinished_by_requester: figure(figures.0),
        unfinished_in_stream: figure(figures.1),
        recurring_by_requester: figure(figures.2),
        recurring_in_stream: figure(figures.3),
        children: figure(figures.4),
        created_by_requester_since: figure(figures.5),
        created_in_stream_since: figure(figures.6),
    })
}

/// The history of `id` from `from_seq` on; empty for a task that does not exist.
pub(crate) async fn read_history(
    connection: &mut PgConnection,
    id: TaskId,
    from_seq: u64,
) -> Result<Vec<HistoryEntry>, StoreError> {
    const DOING: &str = "reading task history";
    let Ok(from_seq) = i64::try_from(from_seq) else {
        return Ok(Vec::new());
    };
    let rows: Vec<(i64, i64, String, String, String)> = sqlx::query_as(
        "SELECT seq, round, kind, payload, at FROM task_history \
         WHERE task_id = $1 AND seq >= $2 ORDER BY seq",
    )
    .bind(id_key(id))
    .bind(from_seq)
    .fetch_all(&mut *connection)
    .await
    .map_err(pg(DOING))?;
    rows.into_iter()
        .map(|(seq, round, kind, payload, at)| decode_history(id, seq, round, &kind, &payload, &at))
        .collect()
}
