//! The read queries: one task, a person's reference to a task, filtered lists, history. Each
//! runs on a reader connection's thread (see `database`).
//!
//! Every task read uses the same projection: the row plus its status log aggregated into one
//! JSON column, so a list of N tasks is one statement, not N+1.

use mai_core::store::{CountQuery, HistoryEntry, Resolved, StoreError, TaskCounts, TaskFilter};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use uuid::Uuid;

use crate::codec::{decode_history, decode_task, id_key, level_text, parse_id_key, time_text};
use crate::error::{corrupt, db};

/// At most this many ids come back in [`Resolved::Ambiguous`]: enough for "which one?".
pub const AMBIGUOUS_LIMIT: usize = 20;

/// The shortest id prefix taken as an id rather than as a title.
const MIN_PREFIX_LEN: usize = 4;

macro_rules! select_tasks {
    ($($rest:literal),*) => {
        concat!(
            "SELECT t.id, t.status, t.record, \
             (SELECT json_group_array(json_array(l.at, l.status, l.actor, l.reason) \
              ORDER BY l.key) FROM task_status_log l \
              WHERE l.key >= (t.num << 32) AND l.key < ((t.num + 1) << 32)) \
             FROM tasks t",
            $($rest),*
        )
    };
}

/// Decodes one row of [`select_tasks`].
fn task_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<TaskRecord, StoreError>> {
    let key: String = row.get(0)?;
    let status: String = row.get(1)?;
    let record: String = row.get(2)?;
    let log: String = row.get(3)?;
    Ok(decode_task(&key, &status, &record, &log))
}

/// Runs a [`select_tasks`] query and decodes every row.
fn tasks_of(
    connection: &Connection,
    sql: &str,
    values: &[Value],
    doing: &'static str,
) -> Result<Vec<TaskRecord>, StoreError> {
    let mut select = connection.prepare_cached(sql).map_err(db(doing))?;
    let rows = select
        .query_map(params_from_iter(values), task_of)
        .map_err(db(doing))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db(doing))?;
    rows.into_iter().collect()
}

/// The id keys starting with `hex` (lowercase hex digits): the half-open key range
/// [`hex`, `hex` + "g"), since every key character is below `g`.
pub(crate) fn prefix_range(hex: &str) -> (String, String) {
    (hex.to_owned(), format!("{hex}g"))
}

/// `reference` as an id prefix: hex digits with optional dashes, at least
/// [`MIN_PREFIX_LEN`] digits, at most a whole id.
pub(crate) fn as_id_prefix(reference: &str) -> Option<String> {
    let hex: String = reference
        .chars()
        .filter(|c| *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let plausible =
        (MIN_PREFIX_LEN..=32).contains(&hex.len()) && hex.chars().all(|c| c.is_ascii_hexdigit());
    plausible.then_some(hex)
}

pub(crate) fn get_task(
    connection: &Connection,
    id: TaskId,
) -> Result<Option<TaskRecord>, StoreError> {
    const DOING: &str = "reading a task";
    let mut select = connection
        .prepare_cached(select_tasks!(" WHERE t.id = ?"))
        .map_err(db(DOING))?;
    select
        .query_row([id_key(id)], task_of)
        .optional()
        .map_err(db(DOING))?
        .transpose()
}

/// The id keys a query returns.
fn keys_of(
    connection: &Connection,
    sql: &str,
    values: &[Value],
    doing: &'static str,
) -> Result<Vec<String>, StoreError> {
    let mut select = connection.prepare_cached(sql).map_err(db(doing))?;
    select
        .query_map(params_from_iter(values), |row| row.get(0))
        .map_err(db(doing))?
        .collect::<rusqlite::Result<Vec<String>>>()
        .map_err(db(doing))
}

/// A full id, then a unique id prefix, then a unique exact title. An id prefix that matches
/// nothing is tried as a title (titles can look like hex).
pub(crate) fn resolve_reference(
    connection: &Connection,
    reference: &str,
) -> Result<Resolved, StoreError> {
    const DOING: &str = "resolving a task reference";
    let reference = reference.trim();
    if let Ok(uuid) = Uuid::try_parse(reference)
        && let Some(task) = get_task(connection, TaskId(uuid))?
    {
        return Ok(Resolved::Found(Box::new(task)));
    }
    if let Some(hex) = as_id_prefix(reference) {
        let (from, to) = prefix_range(&hex);
        let keys = keys_of(
            connection,
            "SELECT id FROM tasks WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            &[
                Value::Text(from),
                Value::Text(to),
                Value::Integer(ambiguity_probe()),
            ],
            DOING,
        )?;
        if !keys.is_empty() {
            return one_or_ambiguous(connection, &keys);
        }
    }
    if reference.is_empty() {
        return Ok(Resolved::NotFound);
    }
    let keys = keys_of(
        connection,
        "SELECT id FROM tasks WHERE title = ? ORDER BY created_at, id LIMIT ?",
        &[
            Value::Text(reference.to_owned()),
            Value::Integer(ambiguity_probe()),
        ],
        DOING,
    )?;
    one_or_ambiguous(connection, &keys)
}

fn one_or_ambiguous(connection: &Connection, keys: &[String]) -> Result<Resolved, StoreError> {
    let ids = keys
        .iter()
        .map(|key| parse_id_key(key).ok_or_else(|| corrupt(key, "the id is not a uuid")))
        .collect::<Result<Vec<_>, _>>()?;
    match ids.as_slice() {
        [] => Ok(Resolved::NotFound),
        [id] => Ok(match get_task(connection, *id)? {
            Some(task) => Resolved::Found(Box::new(task)),
            None => Resolved::NotFound,
        }),
        _ => Ok(Resolved::Ambiguous(
            ids.into_iter().take(AMBIGUOUS_LIMIT).collect(),
        )),
    }
}

/// The `AND …` conditions of `filter` on `tasks t` (its statuses only when `statuses`), with
/// their values.
fn filter_conditions(filter: &TaskFilter, statuses: bool) -> (String, Vec<Value>) {
    let mut sql = String::new();
    let mut values = Vec::new();
    let mut condition = |test: &str, value: String| {
        sql.push_str(" AND ");
        sql.push_str(test);
        values.push(Value::Text(value));
    };
    if let Some(owner) = &filter.owner {
        condition("t.owner = ?", owner.to_string());
    }
    if let Some(requester) = &filter.requester {
        condition("t.requester = ?", requester.to_string());
    }
    if let Some(stream) = &filter.stream_id {
        condition("t.stream_id = ?", stream.as_str().to_owned());
    }
    if let Some(level) = filter.level {
        condition("t.level = ?", level_text(level).to_owned());
    }
    if let Some(parent) = filter.parent {
        // Sub-tasks and replies alike (`created_by` names sub-tasks only).
        condition("t.parent_id = ?", id_key(parent));
    }
    if let Some(since) = filter.created_since {
        condition("t.created_at >= ?", time_text(since));
    }
    if let Some(before) = filter.created_before {
        condition("t.created_at < ?", time_text(before));
    }
    if let Some(title) = filter.search_title() {
        let prefix = filter.search_id_prefix().unwrap_or_default();
        sql.push_str(
            " AND (instr(lower(t.title), ?) > 0 OR (? <> '' AND substr(t.id, 1, length(?)) = ?))",
        );
        values.extend([
            Value::Text(title),
            Value::Text(prefix.clone()),
            Value::Text(prefix.clone()),
            Value::Text(prefix),
        ]);
    }
    if statuses {
        push_status_filter(&mut sql, &mut values, &filter.statuses);
    }
    (sql, values)
}

pub(crate) fn list_tasks(
    connection: &Connection,
    filter: &TaskFilter,
) -> Result<Vec<TaskRecord>, StoreError> {
    let mut sql = String::from(select_tasks!(" WHERE 1 = 1"));
    let (conditions, mut values) = filter_conditions(filter, true);
    sql.push_str(&conditions);
    sql.push_str(if filter.oldest_first {
        " ORDER BY t.created_at, t.id"
    } else {
        " ORDER BY t.created_at DESC, t.id DESC"
    });
    // SQLite needs a LIMIT for an OFFSET: -1 is none.
    if filter.limit.is_some() || filter.offset.is_some() {
        sql.push_str(" LIMIT ? OFFSET ?");
        values.push(Value::Integer(filter.limit.map_or(-1, i64::from)));
        let offset = filter.offset.unwrap_or(0);
        values.push(Value::Integer(i64::try_from(offset).unwrap_or(i64::MAX)));
    }
    tasks_of(connection, &sql, &values, "listing tasks")
}

/// The tasks matching `filter` per status (its limit aside, its statuses too unless
/// `statuses`), one grouped read.
pub(crate) fn count_by_status(
    connection: &Connection,
    filter: &TaskFilter,
    statuses: bool,
) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
    let (conditions, values) = filter_conditions(filter, statuses);
    let sql =
        format!("SELECT t.status, count(*) FROM tasks t WHERE 1 = 1{conditions} GROUP BY t.status");
    let mut statement = connection
        .prepare(&sql)
        .map_err(db("counting tasks per status"))?;
    let rows = statement
        .query_map(params_from_iter(values), |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })
        .map_err(db("counting tasks per status"))?;
    let mut counts = Vec::new();
    for row in rows {
        let (status, n) = row.map_err(db("counting tasks per status"))?;
        let status = status
            .parse::<TaskStatus>()
            .map_err(|e| StoreError::Corrupt {
                what: "a task's status".into(),
                detail: e.to_string(),
            })?;
        counts.push((status, u64::try_from(n).unwrap_or(0)));
    }
    Ok(counts)
}

/// The keys of a [`CountQuery`], owned (to travel to a reader's thread).
#[derive(Debug)]
pub(crate) struct CountKeys {
    pub(crate) requester: Option<String>,
    pub(crate) stream: String,
    pub(crate) created_by: Option<String>,
    pub(crate) recurring: bool,
    pub(crate) created_since: Option<String>,
}

impl CountKeys {
    pub(crate) fn of(query: &CountQuery<'_>) -> Self {
        CountKeys {
            requester: query.requester.map(ToString::to_string),
            stream: query.stream.as_str().to_owned(),
            created_by: query.created_by.map(id_key),
            recurring: query.recurring,
            created_since: query.created_since.map(crate::codec::time_text),
        }
    }
}

/// The figures of the caps on task creation, in one statement (each figure an index lookup:
/// the partial indexes of unfinished tasks per requester and per stream, and the index of
/// sub-tasks by the task that made them). The recurring figures read each unfinished task's
/// trigger from its record, so they are taken only when asked (`CASE` evaluates one branch).
pub(crate) fn count_tasks(
    connection: &Connection,
    keys: &CountKeys,
) -> Result<TaskCounts, StoreError> {
    macro_rules! unfinished {
        () => {
            "status IN ('scheduled', 'pending', 'running', 'waiting_input', 'paused')"
        };
    }
    macro_rules! cron {
        () => {
            "json_extract(record, '$.trigger.kind') = 'cron'"
        };
    }
    const SQL: &str = concat!(
        "SELECT (SELECT count(*) FROM tasks WHERE requester = ?1 AND ",
        unfinished!(),
        "), (SELECT count(*) FROM tasks WHERE stream_id = ?2 AND ",
        unfinished!(),
        "), CASE WHEN ?4 THEN (SELECT count(*) FROM tasks WHERE requester = ?1 AND ",
        unfinished!(),
        " AND ",
        cron!(),
        ") ELSE 0 END, CASE WHEN ?4 THEN (SELECT count(*) FROM tasks WHERE stream_id = ?2 AND ",
        unfinished!(),
        " AND ",
        cron!(),
        ") ELSE 0 END, (SELECT count(*) FROM tasks WHERE created_by = ?3), ",
        // The daily task budgets: tasks created since the day began, reply tasks excepted.
        "CASE WHEN ?5 IS NULL THEN 0 ELSE (SELECT count(*) FROM tasks WHERE requester = ?1 \
         AND created_at >= ?5 AND json_extract(record, '$.metadata.is_reply') IS NOT 1) END, ",
        "CASE WHEN ?5 IS NULL THEN 0 ELSE (SELECT count(*) FROM tasks WHERE stream_id = ?2 \
         AND created_at >= ?5 AND json_extract(record, '$.metadata.is_reply') IS NOT 1) END"
    );
    const DOING: &str = "counting tasks";
    let mut select = connection.prepare_cached(SQL).map_err(db(DOING))?;
    let figures: [i64; 7] = select
        .query_row(
            params![
                keys.requester,
                keys.stream,
                keys.created_by,
                keys.recurring,
                keys.created_since
            ],
            |row| {
                Ok([
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                ])
            },
        )
        .map_err(db(DOING))?;
    let figure = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(TaskCounts {
        unfinished_by_requester: figure(figures[0]),
        unfinished_in_stream: figure(figures[1]),
        recurring_by_requester: figure(figures[2]),
        recurring_in_stream: figure(figures[3]),
        children: figure(figures[4]),
        created_by_requester_since: figure(figures[5]),
        created_in_stream_since: figure(figures[6]),
    })
}

pub(crate) fn list_active_tasks(connection: &Connection) -> Result<Vec<TaskRecord>, StoreError> {
    let active: Vec<TaskStatus> = TaskStatus::ALL
        .into_iter()
        .filter(|status| !status.is_terminal())
        .collect();
    let mut sql = String::from(select_tasks!(" WHERE 1 = 1"));
    let mut values = Vec::new();
    push_status_filter(&mut sql, &mut values, &active);
    sql.push_str(" ORDER BY t.created_at, t.id");
    tasks_of(connection, &sql, &values, "listing active tasks")
}

/// The history of `id` from `from_seq` on; empty for a task that does not exist.
pub(crate) fn read_history(
    connection: &Connection,
    id: TaskId,
    from_seq: u64,
) -> Result<Vec<HistoryEntry>, StoreError> {
    const DOING: &str = "reading task history";
    let Ok(from_seq) = i64::try_from(from_seq) else {
        return Ok(Vec::new());
    };
    if from_seq > 0xFFFF_FFFF {
        return Ok(Vec::new());
    }
    let mut select = connection
        .prepare_cached(
            "SELECT h.seq, h.round, h.kind, h.payload, h.at FROM tasks t, task_history h \
             WHERE t.id = ?1 AND h.key >= ((t.num << 32) | ?2) AND h.key < ((t.num + 1) << 32) \
             ORDER BY h.key",
        )
        .map_err(db(DOING))?;
    let rows = select
        .query_map(params![id_key(id), from_seq], |row| {
            Ok(decode_history(
                id,
                row.get(0)?,
                row.get(1)?,
                &row.get::<_, String>(2)?,
                &row.get::<_, String>(3)?,
                &row.get::<_, String>(4)?,
            ))
        })
        .map_err(db(DOING))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db(DOING))?;
    rows.into_iter().collect()
}

/// One more than [`AMBIGUOUS_LIMIT`] is enough to know a reference is ambiguous.
fn ambiguity_probe() -> i64 {
    i64::try_from(AMBIGUOUS_LIMIT + 1).unwrap_or(i64::MAX)
}

fn push_status_filter(sql: &mut String, values: &mut Vec<Value>, statuses: &[TaskStatus]) {
    if statuses.is_empty() {
        return;
    }
    sql.push_str(" AND t.status IN (");
    for (n, status) in statuses.iter().enumerate() {
        sql.push_str(if n == 0 { "?" } else { ", ?" });
        values.push(Value::Text(status.as_str().to_owned()));
    }
    sql.push(')');
}
