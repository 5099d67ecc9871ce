//! The write transactions on PostgreSQL: insert, compare-and-set save/checkpoint, history
//! append. Each runs inside a transaction its caller opened; returning an error undoes it.
//!
//! Compare-and-set holds across instances because the `UPDATE … WHERE status = expected` takes
//! the row's lock and PostgreSQL re-checks the condition on the newest committed row: of two
//! saves expecting the same status, the second finds the first's status and writes nothing.
//! While a write holds the row, status-log and history numbers cannot be taken by anyone else.
//! Values are encoded by the shared codec before the transaction starts.

use mai_core::store::{NewHistoryEntry, SaveOutcome, StoreError, TaskWrite};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use sqlx::PgConnection;

use crate::agent_history::{HistoryRow, encode_history};
use crate::codec::{LogLine, TaskRow, id_key, parse_status};
use crate::error::{is_pg_unique_violation, pg};
use crate::status_log::{StoredTail, first_difference_in};

/// Who writes, for the lease columns: the instance (none: a command that runs no tasks) and how
/// long a lease it takes when it saves a task as running.
#[derive(Debug, Clone, Default)]
pub(crate) struct Holder {
    pub(crate) instance: Option<String>,
    pub(crate) lease_secs: f64,
}

/// Why a group of writes wrote nothing (the caller rolls back).
#[derive(Debug)]
pub(crate) enum Failure {
    Conflict(SaveOutcome),
    Unchanged,
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

/// One [`TaskWrite`] as rows.
#[derive(Debug)]
pub(crate) enum Rows {
    Insert {
        row: TaskRow,
        log: Vec<LogLine>,
    },
    Save {
        id: TaskId,
        row: TaskRow,
        expected: Option<TaskStatus>,
        question: Option<String>,
        log: Vec<LogLine>,
        history: Vec<HistoryRow>,
    },
    Usage(Vec<crate::usage::UsageRow>),
}

impl Rows {
    pub(crate) fn insert(task: &TaskRecord) -> Result<Self, StoreError> {
        Ok(Rows::Insert {
            row: TaskRow::encode(task)?,
            log: task.status_log.iter().map(LogLine::encode).collect(),
        })
    }

    pub(crate) fn save(
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
    ) -> Result<Self, StoreError> {
        Self::encode(&TaskWrite::Save {
            task,
            expected,
            expected_question: None,
            history,
        })
    }

    pub(crate) fn encode(write: &TaskWrite<'_>) -> Result<Self, StoreError> {
        Ok(match *write {
            TaskWrite::InsertIfAbsent(task) => Self::insert(task)?,
            TaskWrite::Save {
                task,
                expected,
                expected_question,
                history,
            } => Rows::Save {
                id: task.id,
                row: TaskRow::encode(task)?,
                expected,
                question: expected_question.map(str::to_owned),
                log: task.status_log.iter().map(LogLine::encode).collect(),
                history: encode_history(task.id, history)?,
            },
            TaskWrite::Usage(records) => Rows::Usage(crate::usage::encode_usage(records)),
        })
    }
}

/// The writes, all or nothing (an `Err` tells the caller to roll back).
pub(crate) async fn write_all(
    connection: &mut PgConnection,
    holder: &Holder,
    writes: &[Rows],
    doing: &'static str,
) -> Result<(), Failure> {
    for write in writes {
        match write {
            Rows::Insert { row, log } => {
                insert(connection, holder, row, log, doing).await?;
            }
            Rows::Save {
                id,
                row,
                expected,
                question,
                log,
                history,
            } => {
                let save = Save {
                    id: *id,
                    row,
                    expected: *expected,
                    question: question.as_deref(),
                    log,
                    history,
                };
                if let Some(conflict) = save_in(connection, holder, &save, doing).await? {
                    return Err(Failure::Conflict(conflict));
                }
            }
            Rows::Usage(rows) => super::usage::insert_usage(connection, rows, doing).await?,
        }
    }
    Ok(())
}

/// Inserts a task row and its log; `false` when a task with its id exists (nothing written). A
/// task inserted as running is leased to the inserting instance.
pub(crate) async fn insert(
    connection: &mut PgConnection,
    holder: &Holder,
    row: &TaskRow,
    log: &[LogLine],
    doing: &'static str,
) -> Result<bool, StoreError> {
    let inserted = sqlx::query(
        "INSERT INTO tasks (id, title, owner, stream_id, status, level, created_at, updated_at, \
         record, requester, created_by, lease_owner, lease_until, parent_id) VALUES ($1, $2, $3, \
         $4, $5, $6, $7, $8, $9, $10, $11, CASE WHEN $5 = 'running' THEN $12::text END, \
         CASE WHEN $5 = 'running' AND $12::text IS NOT NULL \
         THEN now() + make_interval(secs => $13::float8) END, $14) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&row.id)
    .bind(&row.title)
    .bind(&row.owner)
    .bind(&row.stream_id)
    .bind(row.status)
    .bind(row.level)
    .bind(&row.created_at)
    .bind(&row.updated_at)
    .bind(&row.record)
    .bind(row.requester.as_deref())
    .bind(row.created_by.as_deref())
    .bind(holder.instance.as_deref())
    .bind(holder.lease_secs)
    .bind(row.parent_id.as_deref())
    .execute(&mut *connection)
    .await;
    let inserted = match inserted {
        Err(error) if is_pg_unique_violation(&error) => return Ok(false),
        other => other.map_err(pg(doing))?,
    };
    if inserted.rows_affected() == 0 {
        return Ok(false);
    }
    insert_log_lines(connection, &row.id, 0, log, doing).await?;
    Ok(true)
}

/// A compare-and-set save, borrowed.
struct Save<'a> {
    id: TaskId,
    row: &'a TaskRow,
    expected: Option<TaskStatus>,
    question: Option<&'a str>,
    log: &'a [LogLine],
    history: &'a [HistoryRow],
}

/// The stored status of task `key` (locking its row); `None` when there is no such task.
async fn stored_status(
    connection: &mut PgConnection,
    key: &str,
    doing: &'static str,
) -> Result<Option<(String, Option<String>)>, StoreError> {
    sqlx::query_as(
        "SELECT status, record::jsonb #>> '{metadata,waiting,call_id}' FROM tasks \
         WHERE id = $1 FOR UPDATE",
    )
    .bind(key)
    .fetch_optional(&mut *connection)
    .await
    .map_err(pg(doing))
}

/// The update, the status-log lines the store lacks and the history. `Some(conflict)` when an
/// expectation did not hold — or when the task runs under another instance's live lease (the
/// fence: a save from an instance whose lease was taken over is refused, `Conflict` with the
/// status `running`). A save that leaves the task running takes (or renews) the writer's lease;
/// one that moves it out of `running` clears the lease and any stop request.
async fn save_in(
    connection: &mut PgConnection,
    holder: &Holder,
    save: &Save<'_>,
    doing: &'static str,
) -> Result<Option<SaveOutcome>, StoreError> {
    let row = save.row;
    let conflict = |actual: &str| -> Result<Option<SaveOutcome>, StoreError> {
        Ok(Some(SaveOutcome::Conflict {
            actual: parse_status(&row.id, actual)?,
        }))
    };
    if let Some(question) = save.question {
        match stored_status(connection, &row.id, doing).await? {
            None => return Err(StoreError::NotFound(save.id)),
            Some((actual, call)) if call.as_deref() != Some(question) => return conflict(&actual),
            Some(_) => {}
        }
    }
    let updated = sqlx::query(
        "UPDATE tasks SET title = $2, owner = $3, stream_id = $4, status = $5, level = $6, \
         created_at = $7, updated_at = $8, record = $9, \
         lease_owner = CASE WHEN $5 = 'running' THEN COALESCE($11::text, lease_owner) END, \
         lease_until = CASE WHEN $5 <> 'running' THEN NULL WHEN $11::text IS NULL THEN lease_until \
         ELSE now() + make_interval(secs => $12::float8) END, \
         stop_request = CASE WHEN $5 = 'running' THEN stop_request END \
         WHERE id = $1 AND ($10::text IS NULL OR status = $10) \
         AND (status <> 'running' OR lease_owner IS NULL OR lease_owner = $11::text \
         OR lease_until < now())",
    )
    .bind(&row.id)
    .bind(&row.title)
    .bind(&row.owner)
    .bind(&row.stream_id)
    .bind(row.status)
    .bind(row.level)
    .bind(&row.created_at)
    .bind(&row.updated_at)
    .bind(&row.record)
    .bind(save.expected.map(TaskStatus::as_str))
    .bind(holder.instance.as_deref())
    .bind(holder.lease_secs)
    .execute(&mut *connection)
    .await
    .map_err(pg(doing))?;
    if updated.rows_affected() == 0 {
        return match stored_status(connection, &row.id, doing).await? {
            None => Err(StoreError::NotFound(save.id)),
            Some((actual, _)) => conflict(&actual),
        };
    }
    append_new_log_lines(connection, &row.id, save.log, doing).await?;
    let next_seq = next_history_seq(connection, &row.id, doing).await?;
    insert_history(connection, &row.id, next_seq, save.history, doing).await?;
    Ok(None)
}

/// Appends the lines of `log` the store does not have yet (see `status_log` for the rule).
async fn append_new_log_lines(
    connection: &mut PgConnection,
    key: &str,
    log: &[LogLine],
    doing: &'static str,
) -> Result<(), StoreError> {
    let tail: Option<(i64, String, String, String, String)> = sqlx::query_as(
        "SELECT seq, at, status, actor, reason FROM task_status_log WHERE task_id = $1 \
         ORDER BY seq DESC LIMIT 1",
    )
    .bind(key)
    .fetch_optional(&mut *connection)
    .await
    .map_err(pg(doing))?;
    let stored = match tail {
        None => StoredTail::new(0, None),
        Some((seq, at, status, actor, reason)) => StoredTail::new(
            usize::try_from(seq).unwrap_or(usize::MAX).saturating_add(1),
            Some(LogLine {
                at,
                status,
                actor,
                reason,
            }),
        ),
    };
    let first_new = if stored.extended_by(log) {
        stored.len()
    } else {
        let lines: Vec<(String, String, String, String)> = sqlx::query_as(
            "SELECT at, status, actor, reason FROM task_status_log WHERE task_id = $1 \
             ORDER BY seq",
        )
        .bind(key)
        .fetch_all(&mut *connection)
        .await
        .map_err(pg(doing))?;
        let lines: Vec<LogLine> = lines
            .into_iter()
            .map(|(at, status, actor, reason)| LogLine {
                at,
                status,
                actor,
                reason,
            })
            .collect();
        first_difference_in(log, &lines)
    };
    let new_lines = log.get(first_new..).unwrap_or_default();
    insert_log_lines(connection, key, stored.len(), new_lines, doing).await
}

/// Inserts `lines` numbered from `first_seq`, in one statement.
async fn insert_log_lines(
    connection: &mut PgConnection,
    key: &str,
    first_seq: usize,
    lines: &[LogLine],
    doing: &'static str,
) -> Result<(), StoreError> {
    if lines.is_empty() {
        return Ok(());
    }
    let first_seq = i64::try_from(first_seq).unwrap_or(i64::MAX);
    let column = |pick: fn(&LogLine) -> &String| -> Vec<String> {
        lines.iter().map(|line| pick(line).clone()).collect()
    };
    sqlx::query(
        "INSERT INTO task_status_log (task_id, seq, at, status, actor, reason) \
         SELECT $1, $2 + n - 1, at, status, actor, reason \
         FROM UNNEST($3::text[], $4::text[], $5::text[], $6::text[]) \
         WITH ORDINALITY AS u(at, status, actor, reason, n)",
    )
    .bind(key)
    .bind(first_seq)
    .bind(column(|line| &line.at))
    .bind(column(|line| &line.status))
    .bind(column(|line| &line.actor))
    .bind(column(|line| &line.reason))
    .execute(&mut *connection)
    .await
    .map_err(pg(doing))?;
    Ok(())
}

async fn next_history_seq(
    connection: &mut PgConnection,
    key: &str,
    doing: &'static str,
) -> Result<i64, StoreError> {
    sqlx::query_scalar("SELECT COALESCE(MAX(seq) + 1, 0) FROM task_history WHERE task_id = $1")
        .bind(key)
        .fetch_one(&mut *connection)
        .await
        .map_err(pg(doing))
}

/// Appends `rows` numbered from `first_seq`, in one statement.
async fn insert_history(
    connection: &mut PgConnection,
    key: &str,
    first_seq: i64,
    rows: &[HistoryRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let rounds: Vec<i64> = rows.iter().map(|row| row.round).collect();
    let kinds: Vec<&str> = rows.iter().map(|row| row.kind).collect();
    let payloads: Vec<&str> = rows.iter().map(|row| row.payload.as_str()).collect();
    let ats: Vec<&str> = rows.iter().map(|row| row.at.as_str()).collect();
    sqlx::query(
        "INSERT INTO task_history (task_id, seq, round, kind, payload, at) \
         SELECT $1, $2 + n - 1, round, kind, payload, at \
         FROM UNNEST($3::bigint[], $4::text[], $5::text[], $6::text[]) \
         WITH ORDINALITY AS u(round, kind, payload, at, n)",
    )
    .bind(key)
    .bind(first_seq)
    .bind(rounds)
    .bind(kinds)
    .bind(payloads)
    .bind(ats)
    .execute(&mut *connection)
    .await
    .map_err(pg(doing))?;
    Ok(())
}

/// Appends history to an existing task (locking it, so numbers are taken in turn).
pub(crate) async fn append_history(
    connection: &mut PgConnection,
    id: TaskId,
    history: &[HistoryRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    let key = id_key(id);
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(&key)
        .fetch_optional(&mut *connection)
        .await
        .map_err(pg(doing))?;
    if exists.is_none() {
        return Err(StoreError::NotFound(id));
    }
    let next_seq = next_history_seq(connection, &key, doing).await?;
    insert_history(connection, &key, next_seq, history, doing).await
}
