//! The common writes as SQL that needs no answer half-way, so several of them — from several
//! tasks — run as one batch in one transaction and one round trip (see `group_commit`).
//!
//! sqlx runs each SQLite connection on its own thread and every statement (and `BEGIN`,
//! `COMMIT`) is a message to that thread and back: two or more thread wake-ups each. On a small
//! VM a wake-up costs tens of microseconds, far more than the SQL. Here one write (a [`Unit`]:
//! an insert, or a compare-and-set save, optionally followed by inserts of new tasks that stand
//! or fall with it) has two encodings with the same meaning:
//!
//! - **Alone** ([`Unit::push_sql`]): its own statements, all hanging on the first, e.g.
//!   `UPDATE … WHERE <CAS> AND <stored log ends where the record says> RETURNING <unit number>;
//!   INSERT log lines … WHERE changes() > 0; INSERT history … WHERE changes() > 0`. Few shapes,
//!   each prepared once: the fastest for one write.
//! - **Several** ([`Batch`]): rows of JSON arrays read by a fixed program ([`STEPS`]) with
//!   `json_each`: one statement inserts every new task, two update every saved task
//!   (status-changing saves, and saves within a status, which rewrite no index entry), then
//!   the dependent inserts, status-log lines and history rows. Each head and dependent insert
//!   carries a fresh random write id that its statement stores in the row (`tasks.write_id`);
//!   a unit's later rows are written only if its rows hold its ids, and the last statement
//!   returns the numbers of the units that wrote. A mix of units used to be a new SQL text to
//!   parse on every batch (~40 µs per unit); these programs are prepared once per connection.
//!
//! When the guess does not hold (a conflict, a changed indexed column, a log that diverged, an
//! existing id) the unit changes nothing; the caller then runs the general write in `write`,
//! which reports conflicts, duplicates and repairs logs. This module must not change what a
//! write means: same rows, same numbering, both-or-neither.

use mai_core::store::StoreError;
use mai_core::task::{TaskRecord, TaskStatus};
use serde_json::{Value, json};
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
    /// Whether the unit is small enough for a batch (the general path takes the rest).
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

/// A compare-and-set save over the rows `[write id, id, updated_at, record, expected status,
/// title, owner, stream_id, level, created_at, new status, waiting question, log tail seq, at,
/// status, actor, reason]`, setting `$status` first: only the status and unindexed columns
/// change, every other indexed column must already hold the record's value.
macro_rules! save_step {
    ($status:literal) => {
        concat!(
            "UPDATE tasks SET ",
            $status,
            "updated_at = u.value ->> 2, record = u.value ->> 3, write_id = u.value ->> 0 \
FROM json_each(?) AS u WHERE tasks.id = u.value ->> 1 \
AND tasks.status = u.value ->> 4 AND tasks.title = u.value ->> 5 AND tasks.owner = u.value ->> 6 \
AND tasks.stream_id = u.value ->> 7 AND tasks.level = u.value ->> 8 \
AND tasks.created_at = u.value ->> 9 \
AND (u.value ->> 11 IS NULL \
     OR json_extract(tasks.record, '$.metadata.waiting.call_id') = u.value ->> 11) \
AND EXISTS (SELECT 1 FROM task_status_log l WHERE l.task_id = tasks.id \
    AND l.seq = u.value ->> 12 AND l.at = u.value ->> 13 AND l.status = u.value ->> 14 \
    AND l.actor = u.value ->> 15 AND l.reason = u.value ->> 16) \
AND NOT EXISTS (SELECT 1 FROM task_status_log l WHERE l.task_id = tasks.id \
    AND l.seq > u.value ->> 12)"
        )
    };
}

/// The batch program's steps, one per parameter of [`Batch`] and in its order. A unit's write
/// id `w` is in its head's row and every dependent row; "the row holds `w`" is checked by
/// primary key, so the checks cost a lookup each. A batch runs the steps whose rows it has,
/// between `BEGIN IMMEDIATE` and `COMMIT`, always ending with the last (which returns the
/// numbers of the units that wrote): a handful of fixed programs, each prepared once per
/// connection. One `?` per step: sqlx binds numbered parameters wrongly across the statements
/// of one query.
const STEPS: [&str; 7] = [
    "INSERT INTO tasks (write_id, id, title, owner, stream_id, status, level, created_at, updated_at, \
record, requester, created_by) SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, \
value ->> 4, value ->> 5, value ->> 6, value ->> 7, value ->> 8, value ->> 9, value ->> 10, \
value ->> 11 FROM json_each(?) WHERE true ON CONFLICT DO NOTHING",
    save_step!("status = u.value ->> 10, "),
    save_step!(""),
    "INSERT INTO tasks (write_id, id, title, owner, stream_id, status, level, created_at, updated_at, \
record, requester, created_by) SELECT d.value ->> 0, d.value ->> 1, d.value ->> 2, \
d.value ->> 3, d.value ->> 4, d.value ->> 5, d.value ->> 6, d.value ->> 7, d.value ->> 8, \
d.value ->> 9, d.value ->> 10, d.value ->> 11 FROM json_each(?) AS d \
WHERE EXISTS (SELECT 1 FROM tasks p WHERE p.id = d.value ->> 12 AND p.write_id = d.value ->> 13) \
ON CONFLICT DO NOTHING",
    "INSERT INTO task_status_log (task_id, seq, at, status, actor, reason) \
SELECT value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6 \
FROM json_each(?) \
WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.id = value ->> 1 AND t.write_id = value ->> 0)",
    "INSERT INTO task_history (task_id, seq, round, kind, payload, at) \
SELECT h.value ->> 1, \
(SELECT COALESCE(MAX(x.seq) + 1, 0) FROM task_history x WHERE x.task_id = h.value ->> 1) \
+ (h.value ->> 2), h.value ->> 3, h.value ->> 4, h.value ->> 5, h.value ->> 6 \
FROM json_each(?) AS h \
WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.id = h.value ->> 1 AND t.write_id = h.value ->> 0)",
    "SELECT value ->> 0 FROM json_each(?) \
WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.id = value ->> 1 AND t.write_id = value ->> 2)",
];

/// A batch's units as the parameters of [`STEPS`] (JSON arrays of arrays).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// New tasks that head a unit.
    inserts: Vec<Value>,
    /// Saves that change the status; saves within a status.
    status_saves: Vec<Value>,
    same_status_saves: Vec<Value>,
    /// New tasks that stand or fall with their unit's head.
    dependents: Vec<Value>,
    /// Status-log lines and history rows, each with its unit's write id.
    lines: Vec<Value>,
    history: Vec<Value>,
    /// Per unit: its number, head task and write id.
    heads: Vec<Value>,
}

impl Batch {
    /// Encodes `units`. Every head and every dependent insert gets its own write id, counting
    /// from `first_write_id` (random per batch, so no row can already hold one of them).
    pub(crate) fn encode(units: &[&Unit], first_write_id: i64) -> Self {
        let mut batch = Batch::default();
        let mut write_ids =
            std::iter::successors(Some(first_write_id), |id| Some(id.wrapping_add(1)));
        for (number, unit) in (0_i64..).zip(units) {
            let write_id = write_ids.next().unwrap_or(first_write_id);
            let head_id = match &unit.head {
                Head::Insert(new) => {
                    batch
                        .inserts
                        .push(Value::Array(new_task_row(write_id, new)));
                    batch.push_lines(write_id, &new.row.id, 0, &new.log);
                    &new.row.id
                }
                Head::Save(save) => {
                    batch.push_save(write_id, save);
                    &save.row.id
                }
            };
            batch.heads.push(json!([number, head_id, write_id]));
            for new in &unit.inserts {
                let dependent_id = write_ids.next().unwrap_or(first_write_id);
                let mut row = new_task_row(dependent_id, new);
                row.push(json!(head_id));
                row.push(json!(write_id));
                batch.dependents.push(Value::Array(row));
                batch.push_lines(dependent_id, &new.row.id, 0, &new.log);
            }
        }
        batch
    }

    /// The batch's program and its parameters: the steps it has rows for, then the result.
    pub(crate) fn into_query(self) -> (String, Vec<String>) {
        let arrays = [
            self.inserts,
            self.status_saves,
            self.same_status_saves,
            self.dependents,
            self.lines,
            self.history,
            self.heads,
        ];
        let mut sql = String::from("BEGIN IMMEDIATE;\n");
        let mut params = Vec::with_capacity(arrays.len());
        for (step, rows) in STEPS.iter().zip(arrays) {
            if !rows.is_empty() {
                sql.push_str(step);
                sql.push_str(";\n");
                params.push(Value::Array(rows).to_string());
            }
        }
        sql.push_str("COMMIT");
        (sql, params)
    }

    fn push_save(&mut self, write_id: i64, save: &SaveRows) {
        let row = &save.row;
        let (tail_seq, tail) = &save.tail;
        let status_changes = save.expected.as_str() != row.status;
        let fields = json!([
            write_id,
            row.id,
            row.updated_at,
            row.record,
            save.expected.as_str(),
            row.title,
            row.owner,
            row.stream_id,
            row.level,
            row.created_at,
            row.status,
            save.question,
            tail_seq,
            tail.at,
            tail.status,
            tail.actor,
            tail.reason,
        ]);
        if status_changes {
            self.status_saves.push(fields);
        } else {
            self.same_status_saves.push(fields);
        }
        self.push_lines(write_id, &row.id, tail_seq + 1, &save.new_lines);
        // Numbered on from the stored maximum, like `agent_history::insert_history`.
        for (offset, entry) in (0_i64..).zip(&save.history) {
            self.history.push(json!([
                write_id,
                row.id,
                offset,
                entry.round,
                entry.kind,
                entry.payload,
                entry.at,
            ]));
        }
    }

    /// The log lines `lines` of task `key`, numbered from `first_seq`.
    fn push_lines(&mut self, write_id: i64, key: &str, first_seq: i64, lines: &[LogLine]) {
        for (seq, line) in (first_seq..).zip(lines) {
            self.lines.push(json!([
                write_id,
                key,
                seq,
                line.at,
                line.status,
                line.actor,
                line.reason,
            ]));
        }
    }
}

/// `[write id, id, title, owner, stream_id, status, level, created_at, updated_at, record,
/// requester, created_by]`.
fn new_task_row(write_id: i64, new: &NewRow) -> Vec<Value> {
    let row = &new.row;
    vec![
        json!(write_id),
        json!(row.id),
        json!(row.title),
        json!(row.owner),
        json!(row.stream_id),
        json!(row.status),
        json!(row.level),
        json!(row.created_at),
        json!(row.updated_at),
        json!(row.record),
        json!(row.requester),
        json!(row.created_by),
    ]
}

// ---------------------------------------------------------------------------------------------
// A lone unit as plain statements, chained on `changes()`.

/// `INSERT INTO tasks …` (returning `number`, or chained on the previous statement), then its
/// log lines.
fn push_insert(new: &NewRow, number: Option<i64>, sql: &mut QueryBuilder<Sqlite>) {
    let row = &new.row;
    sql.push(
        "INSERT INTO tasks (title, owner, stream_id, status, level, created_at, updated_at, \
         record, requester, created_by, id) SELECT ",
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
    .push_bind(&row.requester)
    .push(", ")
    .push_bind(&row.created_by)
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
    // Only the status and columns no index covers change (see `STEPS`).
    sql.push("UPDATE tasks SET ");
    if save.expected.as_str() != row.status {
        sql.push("status = ").push_bind(row.status).push(", ");
    }
    sql.push("updated_at = ")
        .push_bind(&row.updated_at)
        .push(", record = ")
        .push_bind(&row.record)
        .push(" WHERE id = ")
        .push_bind(&row.id)
        .push(" AND status = ")
        .push_bind(save.expected.as_str())
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
