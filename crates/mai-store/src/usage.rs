//! The `usage` table: one row per model call (migrations 4 and 6; PostgreSQL: its versions 2 and
//! 5, written by `postgres/usage.rs` from the same rows), a record's id stored once (a record
//! written again is skipped). Rows are encoded on the caller's
//! thread ([`UsageRows`]) and appended inside whatever write carries them — usually a task's
//! checkpoint, so recording usage costs no transaction of its own; sums are one grouped
//! `SELECT` on a reader.
//!
//! Must not: delete rows (retention never touches this table) or know what the figures mean
//! (budgets and prices are the engine's).

use mai_core::store::StoreError;
use mai_core::usage::{UsageGroup, UsageQuery, UsageRecord, UsageTotals};
use rusqlite::{Connection, params_from_iter};

use crate::codec::{id_key, time_text};
use crate::error::db;

/// One usage record as column values.
#[derive(Debug)]
pub(crate) struct UsageRow {
    pub(crate) record_id: String,
    pub(crate) at: String,
    pub(crate) day: String,
    pub(crate) task_id: Option<String>,
    pub(crate) round: i64,
    pub(crate) purpose: &'static str,
    pub(crate) model: String,
    pub(crate) prompt_tokens: i64,
    pub(crate) completion_tokens: i64,
    pub(crate) cached_tokens: i64,
    pub(crate) estimated: bool,
    pub(crate) latency_ms: i64,
    pub(crate) owner: String,
    pub(crate) requester: Option<String>,
    pub(crate) stream_id: String,
    pub(crate) cost: Option<f64>,
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Records as rows.
pub(crate) fn encode_usage(records: &[UsageRecord]) -> Vec<UsageRow> {
    records
        .iter()
        .map(|r| UsageRow {
            record_id: r.id.simple().to_string(),
            at: time_text(r.at),
            day: r.day.format("%Y-%m-%d").to_string(),
            task_id: r.task_id.map(id_key),
            round: i64::from(r.round),
            purpose: r.purpose.as_str(),
            model: r.model.clone(),
            prompt_tokens: count(r.prompt_tokens),
            completion_tokens: count(r.completion_tokens),
            cached_tokens: count(r.cached_tokens),
            estimated: r.estimated,
            latency_ms: count(r.latency_ms),
            owner: r.owner.clone(),
            requester: r.requester.clone(),
            stream_id: r.stream_id.clone(),
            cost: r.cost,
        })
        .collect()
}

/// Appends `rows` (inside the caller's transaction); a row whose record is stored already is
/// skipped.
pub(crate) fn insert_usage(
    connection: &Connection,
    rows: &[UsageRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = connection
        .prepare_cached(
            "INSERT INTO usage (at, day, task_id, round, purpose, model, prompt_tokens, \
             completion_tokens, cached_tokens, estimated, latency_ms, owner, requester, \
             stream_id, cost, record_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT DO NOTHING",
        )
        .map_err(db(doing))?;
    for row in rows {
        insert
            .execute(rusqlite::params![
                row.at,
                row.day,
                row.task_id,
                row.round,
                row.purpose,
                row.model,
                row.prompt_tokens,
                row.completion_tokens,
                row.cached_tokens,
                row.estimated,
                row.latency_ms,
                row.owner,
                row.requester,
                row.stream_id,
                row.cost,
                row.record_id,
            ])
            .map_err(db(doing))?;
    }
    Ok(())
}

pub(crate) fn group_column(group: UsageGroup) -> &'static str {
    match group {
        UsageGroup::Owner => "owner",
        UsageGroup::Requester => "requester",
        UsageGroup::Stream => "stream_id",
        UsageGroup::Model => "model",
        UsageGroup::Purpose => "purpose",
        UsageGroup::Day => "day",
        UsageGroup::Task => "task_id",
    }
}

/// The sums `query` asks for (see `TaskStore::usage`).
pub(crate) fn usage_totals(
    connection: &Connection,
    query: &UsageQuery,
) -> Result<Vec<UsageTotals>, StoreError> {
    const DOING: &str = "summing usage";
    let key = query.group_by.map_or("NULL", group_column);
    let mut sql = format!(
        "SELECT {key}, COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), \
         COALESCE(SUM(cached_tokens), 0), count(*), COALESCE(SUM(estimated), 0), \
         COALESCE(SUM(cost), 0.0) FROM usage WHERE 1 = 1"
    );
    let mut values: Vec<String> = Vec::new();
    let mut filter = |clause: &str, value: Option<String>| {
        if let Some(value) = value {
            sql.push_str(clause);
            values.push(value);
        }
    };
    filter(" AND at >= ?", query.since.map(time_text));
    filter(" AND at < ?", query.until.map(time_text));
    filter(" AND task_id = ?", query.task.map(id_key));
    filter(" AND owner = ?", query.owner.clone());
    filter(" AND requester = ?", query.requester.clone());
    filter(" AND stream_id = ?", query.stream.clone());
    if query.group_by.is_some() {
        sql.push_str(&format!(" GROUP BY {key} ORDER BY {key}"));
    }
    let mut select = connection.prepare(&sql).map_err(db(DOING))?;
    let rows = select
        .query_map(params_from_iter(values.iter()), |row| {
            let figure = |i: usize| -> rusqlite::Result<u64> {
                Ok(u64::try_from(row.get::<_, i64>(i)?).unwrap_or(0))
            };
            Ok(UsageTotals {
                key: row.get(0)?,
                prompt_tokens: figure(1)?,
                completion_tokens: figure(2)?,
                cached_tokens: figure(3)?,
                calls: figure(4)?,
                estimated_calls: figure(5)?,
                cost: row.get(6)?,
            })
        })
        .map_err(db(DOING))?;
    let mut totals = rows.collect::<Result<Vec<_>, _>>().map_err(db(DOING))?;
    if query.group_by == Some(UsageGroup::Task) {
        for total in &mut totals {
            total.key = total.key.take().map(|key| pretty_task_key(&key));
        }
    }
    Ok(totals)
}

/// A task key (32 hex digits) as the task id people read.
pub(crate) fn pretty_task_key(key: &str) -> String {
    crate::codec::parse_id_key(key).map_or_else(|| key.to_owned(), |id| id.to_string())
}
