//! The common writes as SQL that needs no answer half-way, so several of them — from several
//! tasks — run as one batch in one transaction and one round trip (see `group_commit`).
//!
//! sqlx runs each SQLite connection on its own thread and every statement (and `BEGIN`,
//! `COMMIT`) is a message to that thread and back: two or more thread wake-ups each. On a small
//! VM a wake-up costs tens of microseconds, far more than the SQL. Here one write (a [`Unit`]:
//! an insert, or a compare-and-set save, optionally followed by inserts of new tasks that stand
//! or fall with it) becomes statements that all hang on its first one: e.g. `UPDATE … WHERE
//! <CAS> AND <stored log ends where the record says> RETURNING <unit number>; INSERT log lines …
//! WHERE changes() > 0; INSERT history … WHERE changes() > 0`. The first statement returns the
//! unit's number when it matched; every later statement of the unit runs only if the statement
//! before it wrote (`changes()` is the row count of the previous statement), so a unit writes
//! everything or nothing, and the batch learns which units wrote from the returned numbers.
//!
//! When the guess does not hold (a conflict, a changed indexed column, a log that diverged, an
//! existing id) the unit changes nothing; the caller then runs the general write in `write`,
//! which reports conflicts, duplicates and repairs logs. This module must not change what a
//! write means: same rows, same numbering, both-or-neither.

use mai_core::store::StoreError;
use mai_core::task::{TaskRecord, TaskStatus};
use sqlx::{QueryBuilder, Sqlite};

use crate::agent_history::HistoryRow;
use crate::codec::{LogLine, TaskRow};

/// At most this many status-log lines or history rows in one unit's statement.
const MAX_ROWS: usize = 64;

/// A new task as one unit's statements.
#[derive(Debug)]
pub(crate) struct NewRow {
    pub row: TaskRow,
    pub log: Vec<LogLine>,
}

impl NewRow {
    pub(crate) fn encode(task: &TaskRecord) -> Result<Self, StoreError> {
        Ok(NewRow {
            row: TaskRow::encode(task)?,
            log: task.status_log.iter().map(LogLine::encode).collect(),
        })
    }
}

/// What a unit's first statement is.
#[derive(Debug)]
pub(crate) enum Head {
    /// Insert a task that does not exist yet.
    Insert(NewRow),
    /// The compare-and-set update of an existing task.
    Save(SaveRows),
}

/// A compare-and-set save, encoded.
#[derive(Debug)]
pub(crate) struct SaveRows {
    pub row: TaskRow,
    pub expected: TaskStatus,
    /// The waiting question the stored task must still be on (`metadata.waiting.call_id`).
    pub question: Option<String>,
    /// The last line the store must already hold, and its number.
    pub tail: (i64, LogLine),
    /// The lines after it, which this write appends.
    pub new_lines: Vec<LogLine>,
    pub history: Vec<HistoryRow>,
}

impl SaveRows {
    /// `None` when the write does not fit one unit (no expected status, a record whose log is
    /// shorter than its new lines, too many rows): it takes the general path.
    pub(crate) fn encode(
        task: &TaskRecord,
        row: TaskRow,
        expected: Option<TaskStatus>,
        question: Option<&str>,
        history: Vec<HistoryRow>,
    ) -> Option<Self> {
        let expected = expected?;
        let log = &task.status_log;
        // How many lines of the log are new: the trailing lines since the last one in the
        // expected status. Within a status that is none; a claim adds one, a due claim two.
        let new = if expected == task.status {
            0
        } else {
            log.iter()
                .rev()
                .position(|line| line.status == expected)
                .filter(|&n| n > 0)?
        };
        let stored_len = log.len().checked_sub(new)?;
        let tail_index = stored_len.checked_sub(1)?;
        let tail = LogLine::encode(log.get(tail_index)?);
        if new > MAX_ROWS || history.len() > MAX_ROWS {
            return None;
        }
        Some(SaveRows {
            row,
            expected,
            question: question.map(str::to_owned),
            tail: (i64::try_from(tail_index).ok()?, tail),
            new_lines: log[stored_len..].iter().map(LogLine::encode).collect(),
            history,
        })
    }
}

/// One write of a batch: its head, then new tasks inserted only if the head wrote (a reply
/// task created with its parent's completion). Each insert leaves an existing task as it is.
#[derive(Debug)]
pub(crate) struct Unit {
    pub head: Head,
    pub inserts: Vec<NewRow>,
}

impl Unit {
    /// Whether the unit fits one batch statement list (the general path takes the rest).
    pub(crate) fn fits(&self) -> bool {
        let head_lines = match &self.head {
            Head::Insert(new) => new.log.len(),
            Head::Save(save) => save.new_lines.len(),
        };
        head_lines <= MAX_ROWS && self.inserts.iter().all(|new| new.log.len() <= MAX_ROWS)
    }

    /// Appends the unit's statements to `sql`; its first statement returns `number` if it
    /// matched.
    pub(crate) fn push_sql(&self, number: i64, sql: &mut QueryBuilder<Sqlite>) {
        match &self.head {
            Head::Insert(new) => {
                push_insert(new, Some(number), sql);
            }
            Head::Save(save) => push_save(save, number, sql),
        }
        for new in &self.inserts {
            push_insert(new, None, sql);
        }
    }
}

/// `INSERT INTO tasks …` (returning `number`, or chained on the previous statement), then its
/// log lines.
fn push_insert(new: &NewRow, number: Option<i64>, sql: &mut QueryBuilder<Sqlite>) {
    let row = &new.row;
    sql.push(
        "INSERT INTO tasks (title, owner, stream_id, status, level, created_at, updated_at, \
         record, id) SELECT ",
    )
    .push_bind(&row.title)
    .push(", ")
    .push_bind(&row.owner)
    .push(", ")
    .push_bind(&row.stream_id)
    .push(", ")
    .push_bind(row.status)
    .push(", ")
    .push_bind(row.level)
    .push(", ")
    .push_bind(&row.created_at)
    .push(", ")
    .push_bind(&row.updated_at)
    .push(", ")
    .push_bind(&row.record)
    .push(", ")
    .push_bind(&row.id);
    // `WHERE` is also what lets SQLite parse `ON CONFLICT` after a `SELECT`.
    match number {
        Some(number) => {
            sql.push(" WHERE true ON CONFLICT DO NOTHING RETURNING ")
                .push_bind(number)
                .push("; ");
        }
        None => {
            sql.push(" WHERE changes() > 0 ON CONFLICT DO NOTHING; ");
        }
    }
    push_log_lines(&row.id, 0, &new.log, sql);
}

/// The log lines `lines` numbered from `first_seq`, if the previous statement wrote.
fn push_log_lines(key: &str, first_seq: i64, lines: &[LogLine], sql: &mut QueryBuilder<Sqlite>) {
    if lines.is_empty() {
        return;
    }
    sql.push("INSERT INTO task_status_log (task_id, seq, at, status, actor, reason) SELECT ")
        .push_bind(key)
        .push(", ")
        .push_bind(first_seq)
        .push(" + v.column1, v.column2, v.column3, v.column4, v.column5 FROM (VALUES ");
    for (offset, line) in (0_i64..).zip(lines) {
        if offset > 0 {
            sql.push(", ");
        }
        sql.push("(")
            .push_bind(offset)
            .push(", ")
            .push_bind(line.at.as_str())
            .push(", ")
            .push_bind(line.status.as_str())
            .push(", ")
            .push_bind(line.actor.as_str())
            .push(", ")
            .push_bind(line.reason.as_str())
            .push(")");
    }
    sql.push(") AS v WHERE changes() > 0; ");
}

fn push_save(save: &SaveRows, number: i64, sql: &mut QueryBuilder<Sqlite>) {
    let row = &save.row;
    let status_changes = save.expected.as_str() != row.status;
    sql.push("UPDATE tasks SET ");
    if status_changes {
        sql.push("title = ")
            .push_bind(&row.title)
            .push(", owner = ")
            .push_bind(&row.owner)
            .push(", stream_id = ")
            .push_bind(&row.stream_id)
            .push(", status = ")
            .push_bind(row.status)
            .push(", level = ")
            .push_bind(row.level)
            .push(", created_at = ")
            .push_bind(&row.created_at)
            .push(", updated_at = ")
            .push_bind(&row.updated_at)
            .push(", record = ")
            .push_bind(&row.record)
            .push(" WHERE id = ")
            .push_bind(&row.id)
            .push(" AND status = ")
            .push_bind(save.expected.as_str());
    } else {
        // Only columns no index covers change, as in `write`'s unindexed update.
        sql.push("updated_at = ")
            .push_bind(&row.updated_at)
            .push(", record = ")
            .push_bind(&row.record)
            .push(" WHERE id = ")
            .push_bind(&row.id)
            .push(" AND status = ")
            .push_bind(row.status)
            .push(" AND title = ")
            .push_bind(&row.title)
            .push(" AND owner = ")
            .push_bind(&row.owner)
            .push(" AND stream_id = ")
            .push_bind(&row.stream_id)
            .push(" AND level = ")
            .push_bind(row.level)
            .push(" AND created_at = ")
            .push_bind(&row.created_at);
    }
    if let Some(question) = &save.question {
        sql.push(" AND json_extract(record, '$.metadata.waiting.call_id') = ")
            .push_bind(question.as_str());
    }
    let (tail_seq, tail) = &save.tail;
    sql.push(
        " AND EXISTS (SELECT 1 FROM task_status_log l WHERE l.task_id = tasks.id AND l.seq = ",
    )
    .push_bind(*tail_seq)
    .push(" AND l.at = ")
    .push_bind(tail.at.as_str())
    .push(" AND l.status = ")
    .push_bind(tail.status.as_str())
    .push(" AND l.actor = ")
    .push_bind(tail.actor.as_str())
    .push(" AND l.reason = ")
    .push_bind(tail.reason.as_str())
    .push(
        ") AND NOT EXISTS (SELECT 1 FROM task_status_log l WHERE l.task_id = tasks.id \
         AND l.seq > ",
    )
    .push_bind(*tail_seq)
    .push(") RETURNING ")
    .push_bind(number)
    .push("; ");
    push_log_lines(&row.id, tail_seq + 1, &save.new_lines, sql);
    if !save.history.is_empty() {
        // Numbered on from the stored maximum, like `agent_history::insert_history`.
        sql.push("INSERT INTO task_history (task_id, seq, round, kind, payload, at) SELECT ")
            .push_bind(&row.id)
            .push(
                ", base.n + v.column1, v.column2, v.column3, v.column4, v.column5 \
                 FROM (SELECT COALESCE(MAX(seq) + 1, 0) AS n FROM task_history \
                 WHERE task_id = ",
            )
            .push_bind(&row.id)
            .push(") AS base, (VALUES ");
        for (offset, entry) in (0_i64..).zip(&save.history) {
            if offset > 0 {
                sql.push(", ");
            }
            sql.push("(")
                .push_bind(offset)
                .push(", ")
                .push_bind(entry.round)
                .push(", ")
                .push_bind(entry.kind)
                .push(", ")
                .push_bind(entry.payload.as_str())
                .push(", ")
                .push_bind(entry.at.as_str())
                .push(")");
        }
        sql.push(") AS v WHERE changes() > 0; ");
    }
}
