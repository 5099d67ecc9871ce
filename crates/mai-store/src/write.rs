//! The write transactions' statements: insert, compare-and-set save/checkpoint, history
//! append. They run on the writer's thread inside the transaction the writer opened (`BEGIN
//! IMMEDIATE`: the write lock is held before anything is read, so "read the stored status,
//! then write" is one atomic step); returning an error undoes everything the write did.
//!
//! Values are encoded before they reach the writer ([`Encoded`]), so its thread only runs SQL —
//! except in [`update`], whose record is made on the writer's thread (read, changed, written in
//! one turn) and so is encoded there.

use mai_core::store::{Change, SaveOutcome, StoreError, TaskWrite};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use rusqlite::{Connection, OptionalExtension, params};

use crate::agent_history::{HistoryAt, HistoryRow, encode_history, insert_history};
use crate::codec::{LogLine, TaskRow, parse_status};
use crate::error::{db, is_unique_violation};
use crate::status_log::{StoredTail, TaskKey, append_new_log_lines, insert_log_lines};

/// What a save needs after its update: the stored status-log tail as JSON `[seq, at, status,
/// actor, reason]` (NULL when empty), the task's number (its history's and status log's key
/// range, see `agent_history`) and the last history key. A separate statement, not a
/// `RETURNING` clause: SQLite buffers returned rows in a temporary b-tree it opens and frees on
/// every update, which cost more than this second lookup.
const SELECT_TAILS: &str = "SELECT \
     (SELECT json_array(l.seq, l.at, l.status, l.actor, l.reason) \
      FROM task_status_log l WHERE l.key >= (t.num << 32) \
      AND l.key < ((t.num + 1) << 32) ORDER BY l.key DESC LIMIT 1), \
     t.num, \
     (SELECT h.key FROM task_history h WHERE h.key >= (t.num << 32) \
      AND h.key < ((t.num + 1) << 32) ORDER BY h.key DESC LIMIT 1) \
     FROM tasks t WHERE t.id = ?1";

/// The common write (a checkpoint within one status): only columns no index covers change, so
/// SQLite rewrites no index entry. It matches only if every indexed column, the status
/// included, already holds the record's value; otherwise the full update runs.
const UPDATE_UNINDEXED: &str = "UPDATE tasks SET updated_at = ?, record = ? WHERE id = ? \
     AND status = ? AND title = ? AND owner = ? AND stream_id = ? AND level = ? AND created_at = ?";

/// A status change: of the indexes only those on the status (and the partial ones that depend
/// on it) are rewritten. It matches only if every other indexed column already holds the
/// record's value; with the expected status bound last when there is one.
macro_rules! update_status {
    ($condition:literal) => {
        concat!(
            "UPDATE tasks SET status = ?, updated_at = ?, record = ? WHERE id = ? AND title = ? \
             AND owner = ? AND stream_id = ? AND level = ? AND created_at = ?",
            $condition,
        )
    };
}
const UPDATE_STATUS_IF_STATUS: &str = update_status!(" AND status = ?");
const UPDATE_STATUS: &str = update_status!("");

/// The full update; with the expected status bound last when there is one.
macro_rules! update_all {
    ($condition:literal) => {
        concat!(
            "UPDATE tasks SET title = ?, owner = ?, stream_id = ?, status = ?, level = ?, \
             created_at = ?, updated_at = ?, record = ? WHERE id = ?",
            $condition,
        )
    };
}
const UPDATE_ALL_IF_STATUS: &str = update_all!(" AND status = ?");
const UPDATE_ALL: &str = update_all!("");

/// The row of [`SELECT_TAILS`].
type Tails = (Option<String>, i64, Option<i64>);

/// Why a group of writes wrote nothing.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A compare-and-set expectation did not hold.
    Conflict(SaveOutcome),
    /// An update found no task, or its change left the task as it was.
    Unchanged,
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

/// A new task as rows.
#[derive(Debug)]
pub(crate) struct NewRow {
    row: TaskRow,
    log: Vec<LogLine>,
}

impl NewRow {
    pub(crate) fn encode(task: &mai_core::task::TaskRecord) -> Result<Self, StoreError> {
        Ok(NewRow {
            row: TaskRow::encode(task)?,
            log: task.status_log.iter().map(LogLine::encode).collect(),
        })
    }
}

/// A compare-and-set save as rows.
#[derive(Debug)]
pub(crate) struct SaveRows {
    id: TaskId,
    row: TaskRow,
    expected: Option<TaskStatus>,
    /// The waiting question the stored task must still be on (`metadata.waiting.call_id`).
    question: Option<String>,
    /// The record's whole status log.
    log: Vec<LogLine>,
    history: Vec<HistoryRow>,
}

/// One [`TaskWrite`], encoded.
#[derive(Debug)]
pub(crate) enum Encoded {
    InsertIfAbsent(NewRow),
    Save(SaveRows),
    Usage(Vec<crate::usage::UsageRow>),
}

impl Encoded {
    pub(crate) fn encode(write: &TaskWrite<'_>) -> Result<Self, StoreError> {
        Ok(match *write {
            TaskWrite::InsertIfAbsent(task) => Encoded::InsertIfAbsent(NewRow::encode(task)?),
            TaskWrite::Save {
                task,
                expected,
                expected_question,
                history,
            } => Encoded::Save(SaveRows {
                id: task.id,
                row: TaskRow::encode(task)?,
                expected,
                question: expected_question.map(str::to_owned),
                log: task.status_log.iter().map(LogLine::encode).collect(),
                history: encode_history(task.id, history)?,
            }),
            TaskWrite::Usage(records) => Encoded::Usage(crate::usage::encode_usage(records)),
        })
    }
}

/// `save`, `checkpoint` and `write`: the writes, all or nothing (an `Err` undoes them).
pub(crate) fn write_all(
    connection: &Connection,
    writes: &[Encoded],
    doing: &'static str,
) -> Result<(), Failure> {
    for write in writes {
        match write {
            Encoded::InsertIfAbsent(new) => {
                insert(connection, new, doing)?;
            }
            Encoded::Save(save) => {
                if let Some(conflict) = save_in(connection, save, doing)? {
                    return Err(Failure::Conflict(conflict));
                }
            }
            Encoded::Usage(rows) => crate::usage::insert_usage(connection, rows, doing)?,
        }
    }
    Ok(())
}

/// `update`: reads task `id`, applies `change` and saves the result, all inside the writer's
/// transaction, so nothing writes the task in between. Returns the record as written.
pub(crate) fn update(
    connection: &Connection,
    id: TaskId,
    change: Change,
    doing: &'static str,
) -> Result<TaskRecord, Failure> {
    let Some(mut task) = crate::read::get_task(connection, id)? else {
        return Err(Failure::Unchanged);
    };
    let read = task.status;
    if !change(&mut task) {
        return Err(Failure::Unchanged);
    }
    let save = Encoded::encode(&TaskWrite::Save {
        task: &task,
        expected: Some(read),
        expected_question: None,
        history: &[],
    })?;
    write_all(connection, std::slice::from_ref(&save), doing)?;
    Ok(task)
}

/// Inserts a task that must not exist yet.
pub(crate) fn insert_new(
    connection: &Connection,
    new: &NewRow,
    id: TaskId,
    doing: &'static str,
) -> Result<(), StoreError> {
    if insert(connection, new, doing)? {
        Ok(())
    } else {
        Err(StoreError::Duplicate(id))
    }
}

/// Inserts `new` and its log; `false` if a task with its id exists (nothing written).
fn insert(connection: &Connection, new: &NewRow, doing: &'static str) -> Result<bool, StoreError> {
    let row = &new.row;
    // The next task number, bound into the insert and keying the task's log lines.
    let num: i64 = connection
        .prepare_cached("SELECT COALESCE(MAX(num), 0) + 1 FROM tasks")
        .and_then(|mut next| next.query_row([], |r| r.get(0)))
        .map_err(db(doing))?;
    let inserted = connection
        .prepare_cached(
            "INSERT INTO tasks (title, owner, stream_id, status, level, created_at, updated_at, \
             record, requester, created_by, parent_id, num, id) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .and_then(|mut insert| {
            insert.execute(params![
                row.title,
                row.owner,
                row.stream_id,
                row.status,
                row.level,
                row.created_at,
                row.updated_at,
                row.record,
                row.requester,
                row.created_by,
                row.parent_id,
                num,
                row.id,
            ])
        });
    match inserted {
        Err(error) if is_unique_violation(&error) => return Ok(false),
        other => other.map_err(db(doing))?,
    };
    let task = TaskKey { id: &row.id, num };
    insert_log_lines(connection, task, 0, &new.log, doing)?;
    Ok(true)
}

/// The compare-and-set save: the update, the status-log lines the store lacks and the
/// history. `Some(conflict)` when an expectation did not hold (the caller undoes the write).
fn save_in(
    connection: &Connection,
    save: &SaveRows,
    doing: &'static str,
) -> Result<Option<SaveOutcome>, StoreError> {
    let row = &save.row;
    let conflict = |actual: String| -> Result<Option<SaveOutcome>, StoreError> {
        Ok(Some(SaveOutcome::Conflict {
            actual: parse_status(&row.id, &actual)?,
        }))
    };
    if let Some(question) = &save.question {
        let stored: Option<(String, Option<String>)> = connection
            .prepare_cached(
                "SELECT status, json_extract(record, '$.metadata.waiting.call_id') FROM tasks \
                 WHERE id = ?",
            )
            .and_then(|mut select| {
                select
                    .query_row([&row.id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(db(doing))?;
        match stored {
            None => return Err(StoreError::NotFound(save.id)),
            Some((actual, call)) if call.as_deref() != Some(question) => return conflict(actual),
            Some(_) => {}
        }
    }
    let mut updated = false;
    if save
        .expected
        .is_none_or(|expected| expected.as_str() == row.status)
    {
        updated = update_unindexed(connection, row).map_err(db(doing))?;
    }
    if !updated {
        updated = update_status(connection, row, save.expected).map_err(db(doing))?;
    }
    if !updated {
        updated = update_all(connection, row, save.expected).map_err(db(doing))?;
    }
    if !updated {
        let actual: Option<String> = connection
            .prepare_cached("SELECT status FROM tasks WHERE id = ?")
            .and_then(|mut select| select.query_row([&row.id], |r| r.get(0)).optional())
            .map_err(db(doing))?;
        return match actual {
            None => Err(StoreError::NotFound(save.id)),
            Some(actual) => conflict(actual),
        };
    }
    let (log_tail, num, last_key): Tails = connection
        .prepare_cached(SELECT_TAILS)
        .and_then(|mut select| {
            select.query_row([&row.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        })
        .map_err(db(doing))?;
    let history_at = HistoryAt::after(num, last_key);
    let tail = StoredTail::decode(&row.id, log_tail.as_deref())?;
    let task = TaskKey { id: &row.id, num };
    append_new_log_lines(connection, task, tail, &save.log, doing)?;
    insert_history(connection, &row.id, history_at, &save.history, doing)?;
    Ok(None)
}

/// [`UPDATE_UNINDEXED`]: `false` when the row does not match (another status, another indexed
/// value, or no such task).
fn update_unindexed(connection: &Connection, row: &TaskRow) -> rusqlite::Result<bool> {
    let mut update = connection.prepare_cached(UPDATE_UNINDEXED)?;
    update
        .execute(params![
            row.updated_at,
            row.record,
            row.id,
            row.status,
            row.title,
            row.owner,
            row.stream_id,
            row.level,
            row.created_at,
        ])
        .map(|changed| changed > 0)
}

/// [`UPDATE_STATUS`]: `false` when another indexed column changed, the stored status is not
/// `expected`, or there is no such task.
fn update_status(
    connection: &Connection,
    row: &TaskRow,
    expected: Option<TaskStatus>,
) -> rusqlite::Result<bool> {
    let columns = params![
        row.status,
        row.updated_at,
        row.record,
        row.id,
        row.title,
        row.owner,
        row.stream_id,
        row.level,
        row.created_at,
    ];
    if_status(
        connection,
        columns,
        expected,
        UPDATE_STATUS_IF_STATUS,
        UPDATE_STATUS,
    )
}

/// Runs the update `with` (the expected status bound after `columns`) or `without`; whether
/// it changed the row.
fn if_status(
    connection: &Connection,
    columns: &[&dyn rusqlite::ToSql],
    expected: Option<TaskStatus>,
    with: &str,
    without: &str,
) -> rusqlite::Result<bool> {
    let changed = match expected {
        Some(expected) => {
            let mut all = columns.to_vec();
            let expected = expected.as_str();
            all.push(&expected);
            connection.prepare_cached(with)?.execute(all.as_slice())?
        }
        None => connection.prepare_cached(without)?.execute(columns)?,
    };
    Ok(changed > 0)
}

/// The full compare-and-set update: `false` when the stored status is not `expected` or there
/// is no such task.
fn update_all(
    connection: &Connection,
    row: &TaskRow,
    expected: Option<TaskStatus>,
) -> rusqlite::Result<bool> {
    let columns = params![
        row.title,
        row.owner,
        row.stream_id,
        row.status,
        row.level,
        row.created_at,
        row.updated_at,
        row.record,
        row.id,
    ];
    if_status(
        connection,
        columns,
        expected,
        UPDATE_ALL_IF_STATUS,
        UPDATE_ALL,
    )
}

/// Appends history to an existing task.
pub(crate) fn append_history(
    connection: &Connection,
    id: TaskId,
    history: &[HistoryRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    let key = crate::codec::id_key(id);
    let tail: Option<(i64, Option<i64>)> = connection
        .prepare_cached(
            "SELECT t.num, (SELECT h.key FROM task_history h WHERE h.key >= (t.num << 32) \
             AND h.key < ((t.num + 1) << 32) ORDER BY h.key DESC LIMIT 1) \
             FROM tasks t WHERE t.id = ?",
        )
        .and_then(|mut select| {
            select
                .query_row([&key], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(db(doing))?;
    let Some((num, last_key)) = tail else {
        return Err(StoreError::NotFound(id));
    };
    insert_history(
        connection,
        &key,
        HistoryAt::after(num, last_key),
        history,
        doing,
    )
}
