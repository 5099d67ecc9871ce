//! The `usage` table on PostgreSQL: the rows `crate::usage` encodes, appended inside the write
//! that carries them, and the grouped sums. Same columns and meaning as on SQLite.
//!
//! Must not: delete rows, or decide what the figures mean (budgets and prices are the engine's).

use mai_core::store::StoreError;
use mai_core::usage::{UsageGroup, UsageQuery, UsageTotals};
use sqlx::{PgConnection, QueryBuilder};

use crate::codec::{id_key, time_text};
use crate::error::pg;
use crate::usage::{UsageRow, group_column, pretty_task_key};

/// Appends `rows` (inside the caller's transaction); a row whose record is stored already is
/// skipped.
pub(crate) async fn insert_usage(
    connection: &mut PgConnection,
    rows: &[UsageRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = QueryBuilder::new(
        "INSERT INTO usage (at, day, task_id, round, purpose, model, prompt_tokens, \
         completion_tokens, cached_tokens, estimated, latency_ms, owner, requester, stream_id, \
         cost, record_id) ",
    );
    insert.push_values(rows, |mut values, row| {
        values
            .push_bind(&row.at)
            .push_bind(&row.day)
            .push_bind(&row.task_id)
            .push_bind(row.round)
            .push_bind(row.purpose)
            .push_bind(&row.model)
            .push_bind(row.prompt_tokens)
            .push_bind(row.completion_tokens)
            .push_bind(row.cached_tokens)
            .push_bind(row.estimated)
            .push_bind(row.latency_ms)
            .push_bind(&row.owner)
            .push_bind(&row.requester)
            .push_bind(&row.stream_id)
            .push_bind(row.cost)
            .push_bind(&row.record_id);
    });
    insert.push(" ON CONFLICT DO NOTHING");
    insert
        .build()
        .execute(&mut *connection)
        .await
        .map_err(pg(doing))?;
    Ok(())
}

/// One row of the sums: the group's key and the figures.
type Sums = (Option<String>, i64, i64, i64, i64, i64, f64);

/// The sums `query` asks for (see `TaskStore::usage`).
pub(crate) async fn usage_totals(
    connection: &mut PgConnection,
    query: &UsageQuery,
) -> Result<Vec<UsageTotals>, StoreError> {
    const DOING: &str = "summing usage";
    let key = query.group_by.map_or("NULL::text".to_owned(), |g| {
        format!("{}::text", group_column(g))
    });
    let mut select = QueryBuilder::new(format!(
        "SELECT {key}, COALESCE(SUM(prompt_tokens), 0)::bigint, \
         COALESCE(SUM(completion_tokens), 0)::bigint, COALESCE(SUM(cached_tokens), 0)::bigint, \
         count(*), count(*) FILTER (WHERE estimated), COALESCE(SUM(cost), 0.0)::float8 \
         FROM usage WHERE TRUE"
    ));
    let filters = [
        (" AND at >= ", query.since.map(time_text)),
        (" AND at < ", query.until.map(time_text)),
        (" AND task_id = ", query.task.map(id_key)),
        (" AND owner = ", query.owner.clone()),
        (" AND requester = ", query.requester.clone()),
        (" AND stream_id = ", query.stream.clone()),
    ];
    for (clause, value) in filters {
        if let Some(value) = value {
            select.push(clause).push_bind(value);
        }
    }
    if let Some(group) = query.group_by {
        let column = group_column(group);
        select.push(format!(" GROUP BY {column} ORDER BY {column}"));
    }
    let rows: Vec<Sums> = select
        .build_query_as()
        .fetch_all(&mut *connection)
        .await
        .map_err(pg(DOING))?;
    let figure = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(rows
        .into_iter()
        .map(
            |(key, prompt, completion, cached, calls, estimated, cost)| UsageTotals {
                key: match query.group_by {
                    Some(UsageGroup::Task) => key.map(|key| pretty_task_key(&key)),
                    _ => key,
                },
                prompt_tokens: figure(prompt),
                completion_tokens: figure(completion),
                cached_tokens: figure(cached),
                calls: figure(calls),
                estimated_calls: figure(estimated),
                cost,
            },
        )
        .collect())
}
