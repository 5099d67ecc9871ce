//! Moving up from SQLite: copying the task tables of a SQLite database into an empty PostgreSQL
//! one (`mai-agent storage migrate`). Rows are copied as they are — both schemas have the same
//! columns and the same text encodings (src/codec.rs) — in one transaction, then counted on both
//! sides; usage records keep their ids (a record is stored once). Must not: write into a
//! database that already holds tasks, or change the source.

use mai_core::store::StoreError;
use mai_core::usage::UsagePurpose;
use rusqlite::Connection;

use super::PgStore;
use super::usage::insert_usage;
use crate::database::Database;
use crate::error::{closed, db, pg};
use crate::usage::UsageRow;

/// Rows per INSERT statement.
const CHUNK: usize = 500;

/// How many rows of each task table were copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskRows {
    pub tasks: u64,
    pub status_log: u64,
    pub history: u64,
    /// Usage records (model calls).
    pub usage: u64,
}

type TaskRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
);
type LogRow = (String, i64, String, String, String, String);
type HistoryRow = (String, i64, i64, String, String, String);

/// Every row of the task tables of a SQLite database.
struct Source {
    tasks: Vec<TaskRow>,
    log: Vec<LogRow>,
    history: Vec<HistoryRow>,
    usage: Vec<UsageRow>,
}

/// A row of six columns whose third is text in the log and a number in the history.
type SixColumns = (String, i64, rusqlite::types::Value, String, String, String);

fn six_columns(connection: &Connection, sql: &str) -> rusqlite::Result<Vec<SixColumns>> {
    connection
        .prepare(sql)?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect()
}

fn read_tasks(connection: &Connection) -> rusqlite::Result<Vec<TaskRow>> {
    connection
        .prepare(
            "SELECT id, title, owner, stream_id, status, level, created_at, updated_at, record, \
             requester, created_by FROM tasks ORDER BY id",
        )?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
            ))
        })?
        .collect()
}

fn read_source(connection: &Connection) -> Result<Source, StoreError> {
    const DOING: &str = "reading the SQLite task tables";
    let tasks = read_tasks(connection).map_err(db(DOING))?;
    let text = |value| match value {
        rusqlite::types::Value::Text(text) => text,
        _ => String::new(),
    };
    let number = |value| match value {
        rusqlite::types::Value::Integer(n) => n,
        _ => 0,
    };
    let log = six_columns(
        connection,
        "SELECT task_id, seq, at, status, actor, reason FROM task_status_log",
    )
    .map_err(db(DOING))?
    .into_iter()
    .map(|(task, seq, at, status, actor, reason)| (task, seq, text(at), status, actor, reason))
    .collect();
    let history = six_columns(
        connection,
        "SELECT task_id, seq, round, kind, payload, at FROM task_history",
    )
    .map_err(db(DOING))?
    .into_iter()
    .map(|(task, seq, round, kind, payload, at)| (task, seq, number(round), kind, payload, at))
    .collect();
    let usage = read_usage(connection).map_err(db(DOING))?;
    Ok(Source {
        tasks,
        log,
        history,
        usage,
    })
}

/// Every usage record, oldest first (a purpose this version does not know is refused).
fn read_usage(connection: &Connection) -> rusqlite::Result<Vec<UsageRow>> {
    connection
        .prepare(
            "SELECT at, day, task_id, round, purpose, model, prompt_tokens, completion_tokens, \
             cached_tokens, estimated, latency_ms, owner, requester, stream_id, cost, record_id \
             FROM usage ORDER BY id",
        )?
        .query_map([], |r| {
            let purpose: String = r.get(4)?;
            let purpose = UsagePurpose::parse(&purpose).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    4,
                    rusqlite::types::Type::Text,
                    format!("unknown usage purpose {purpose:?}").into(),
                )
            })?;
            Ok(UsageRow {
                at: r.get(0)?,
                day: r.get(1)?,
                task_id: r.get(2)?,
                round: r.get(3)?,
                purpose: purpose.as_str(),
                model: r.get(5)?,
                prompt_tokens: r.get(6)?,
                completion_tokens: r.get(7)?,
                cached_tokens: r.get(8)?,
                estimated: r.get(9)?,
                latency_ms: r.get(10)?,
                owner: r.get(11)?,
                requester: r.get(12)?,
                stream_id: r.get(13)?,
                cost: r.get(14)?,
                record_id: r.get(15)?,
            })
        })?
        .collect()
}

impl PgStore {
    /// How many tasks the database holds (0: a database `storage migrate` may fill).
    pub async fn task_count(&self) -> Result<u64, StoreError> {
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
            .fetch_one(&self.pool)
            .await
            .map_err(pg("counting tasks"))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Copies every task, status-log line, history entry and usage record of the SQLite
    /// database `source` into this database, which must hold no task; checks the counts on both
    /// sides.
    pub async fn copy_tasks_from(&self, source: &Database) -> Result<TaskRows, StoreError> {
        const DOING: &str = "copying the tasks into PostgreSQL";
        if self.task_count().await? > 0 {
            return Err(StoreError::Database {
                doing: DOING,
                source: "the PostgreSQL database already holds tasks: give an empty database"
                    .into(),
            });
        }
        let rows = source
            .read(read_source)
            .await
            .map_err(closed("reading the SQLite task tables"))??;
        let mut transaction = self.pool.begin().await.map_err(pg(DOING))?;
        for chunk in rows.tasks.chunks(CHUNK) {
            insert_tasks(&mut transaction, chunk).await?;
        }
        for chunk in rows.log.chunks(CHUNK) {
            insert_log(&mut transaction, chunk).await?;
        }
        for chunk in rows.history.chunks(CHUNK) {
            insert_history(&mut transaction, chunk).await?;
        }
        for chunk in rows.usage.chunks(CHUNK) {
            insert_usage(&mut transaction, chunk, "copying usage rows").await?;
        }
        let counted: (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM task_status_log), \
             (SELECT count(*) FROM task_history), (SELECT count(*) FROM usage)",
        )
        .fetch_one(&mut *transaction)
        .await
        .map_err(pg(DOING))?;
        let copied = TaskRows {
            tasks: rows.tasks.len() as u64,
            status_log: rows.log.len() as u64,
            history: rows.history.len() as u64,
            usage: rows.usage.len() as u64,
        };
        let found = TaskRows {
            tasks: counted.0 as u64,
            status_log: counted.1 as u64,
            history: counted.2 as u64,
            usage: counted.3 as u64,
        };
        if found != copied {
            return Err(StoreError::Database {
                doing: DOING,
                source: format!(
                    "the counts differ after the copy (read {copied:?}, found {found:?}); \
                     nothing was kept"
                )
                .into(),
            });
        }
        transaction.commit().await.map_err(pg(DOING))?;
        Ok(copied)
    }
}

async fn insert_tasks(
    connection: &mut sqlx::PgConnection,
    rows: &[TaskRow],
) -> Result<(), StoreError> {
    let column = |pick: fn(&TaskRow) -> &String| -> Vec<String> {
        rows.iter().map(|row| pick(row).clone()).collect()
    };
    let optional = |pick: fn(&TaskRow) -> &Option<String>| -> Vec<Option<String>> {
        rows.iter().map(|row| pick(row).clone()).collect()
    };
    sqlx::query(
        "INSERT INTO tasks (id, title, owner, stream_id, status, level, created_at, updated_at, \
         record, requester, created_by) SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], \
         $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
         $11::text[])",
    )
    .bind(column(|r| &r.0))
    .bind(column(|r| &r.1))
    .bind(column(|r| &r.2))
    .bind(column(|r| &r.3))
    .bind(column(|r| &r.4))
    .bind(column(|r| &r.5))
    .bind(column(|r| &r.6))
    .bind(column(|r| &r.7))
    .bind(column(|r| &r.8))
    .bind(optional(|r| &r.9))
    .bind(optional(|r| &r.10))
    .execute(&mut *connection)
    .await
    .map_err(pg("copying task rows"))?;
    // The parent column (SQLite's version 5 has it too; read from the records, as its
    // migration does, so a file of any version copies the same).
    sqlx::query(
        "UPDATE tasks SET parent_id = replace(record::jsonb #>> '{metadata,parent_task_id}', \
         '-', '') WHERE parent_id IS NULL \
         AND record::jsonb #>> '{metadata,parent_task_id}' IS NOT NULL",
    )
    .execute(&mut *connection)
    .await
    .map_err(pg("copying task rows"))?;
    Ok(())
}

async fn insert_log(
    connection: &mut sqlx::PgConnection,
    rows: &[LogRow],
) -> Result<(), StoreError> {
    let text = |pick: fn(&LogRow) -> &String| -> Vec<String> {
        rows.iter().map(|row| pick(row).clone()).collect()
    };
    let seqs: Vec<i64> = rows.iter().map(|row| row.1).collect();
    sqlx::query(
        "INSERT INTO task_status_log (task_id, seq, at, status, actor, reason) \
         SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
         $6::text[])",
    )
    .bind(text(|r| &r.0))
    .bind(seqs)
    .bind(text(|r| &r.2))
    .bind(text(|r| &r.3))
    .bind(text(|r| &r.4))
    .bind(text(|r| &r.5))
    .execute(&mut *connection)
    .await
    .map_err(pg("copying status-log rows"))?;
    Ok(())
}

async fn insert_history(
    connection: &mut sqlx::PgConnection,
    rows: &[HistoryRow],
) -> Result<(), StoreError> {
    let text = |pick: fn(&HistoryRow) -> &String| -> Vec<String> {
        rows.iter().map(|row| pick(row).clone()).collect()
    };
    let seqs: Vec<i64> = rows.iter().map(|row| row.1).collect();
    let rounds: Vec<i64> = rows.iter().map(|row| row.2).collect();
    sqlx::query(
        "INSERT INTO task_history (task_id, seq, round, kind, payload, at) \
         SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], \
         $6::text[])",
    )
    .bind(text(|r| &r.0))
    .bind(seqs)
    .bind(rounds)
    .bind(text(|r| &r.3))
    .bind(text(|r| &r.4))
    .bind(text(|r| &r.5))
    .execute(&mut *connection)
    .await
    .map_err(pg("copying history rows"))?;
    Ok(())
}
