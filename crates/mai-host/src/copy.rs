//! Moving up from SQLite: copying every host table of a SQLite database into the host tables of
//! an empty PostgreSQL database (`mai-agent storage migrate`), keeping ids, then counting both
//! sides. The rows travel as plain values through the same [`Sql`](crate::sql::Sql) seam the
//! host's queries use; what differs is filled in on the way: `is_bot` becomes a boolean, and
//! messages and notes get their search trigrams. Must not: write into a database that already
//! holds host rows, or change the source.

use mai_core::host::HostError;

use crate::grams::trigrams;
use crate::sql::{Connection, Query, SqlError, Value};

/// The host's tables in an order that keeps foreign keys satisfied, with their columns.
const TABLES: &[(&str, &[&str])] = &[
    (
        "host_streams",
        &[
            "stream_id",
            "platform",
            "kind",
            "target_id",
            "name",
            "last_active",
        ],
    ),
    ("host_persons", &["person_id", "name"]),
    ("host_person_aliases", &["person_id", "alias"]),
    (
        "host_accounts",
        &[
            "platform",
            "user_id",
            "person_id",
            "display_name",
            "last_seen",
        ],
    ),
    ("host_person_notes", &["note_id", "person_id", "note"]),
    (
        "host_messages",
        &[
            "message_id",
            "stream_id",
            "user_id",
            "sender_name",
            "text",
            "at",
            "is_bot",
        ],
    ),
    ("host_notes", &["note_id", "stream_id", "text", "at"]),
    ("host_jargon", &["scope", "term", "meaning"]),
    ("host_frequency", &["stream_id", "value"]),
    (
        "host_context_notes",
        &["note_id", "stream_id", "note", "at"],
    ),
    ("host_members", &["stream_id", "user_id"]),
];

/// Identity columns whose sequence must start after the copied ids.
const IDENTITIES: &[(&str, &str)] = &[
    ("host_persons", "person_id"),
    ("host_person_notes", "note_id"),
    ("host_messages", "message_id"),
    ("host_notes", "note_id"),
    ("host_context_notes", "note_id"),
];

/// Rows per INSERT statement.
const CHUNK: usize = 200;

/// Every host table's rows, read from the source.
pub(crate) type Tables = Vec<(&'static str, Vec<Vec<Value>>)>;

const ACTION: &str = "copy the host tables";

fn failed(error: SqlError) -> HostError {
    HostError::new(ACTION, error)
}

/// Reads every row of every host table (on the SQLite source).
pub(crate) fn read_all(conn: &Connection) -> Result<Tables, HostError> {
    TABLES
        .iter()
        .map(|(table, columns)| {
            let sql = format!("SELECT {} FROM {table}", columns.join(", "));
            conn.rows(&sql, &[])
                .map(|rows| (*table, rows))
                .map_err(failed)
        })
        .collect()
}

/// How many rows each host table holds.
pub(crate) fn counts(conn: &Connection) -> Result<Vec<(&'static str, u64)>, HostError> {
    TABLES
        .iter()
        .map(|(table, _)| {
            let count: i64 = Query::new(format!("SELECT count(*) FROM {table}"))
                .scalar(conn)
                .map_err(failed)?;
            Ok((*table, u64::try_from(count).unwrap_or(0)))
        })
        .collect()
}

/// A source row as the target stores it: `is_bot` as a boolean, trigrams for searchable text.
fn target_row(table: &str, mut row: Vec<Value>) -> Vec<Value> {
    let text_at = match table {
        "host_messages" => {
            if let Some(flag) = row.get_mut(6) {
                *flag = Value::Bool(matches!(flag, Value::Integer(n) if *n != 0));
            }
            Some(4)
        }
        "host_notes" => Some(2),
        _ => None,
    };
    if let Some(index) = text_at {
        let grams = match row.get(index) {
            Some(Value::Text(text)) => trigrams(text),
            _ => Vec::new(),
        };
        row.push(Value::TextArray(grams));
    }
    row
}

/// Writes `tables` into the (empty) target, then moves each identity past the copied ids.
pub(crate) fn write_all(conn: &Connection, tables: Tables) -> Result<(), HostError> {
    for ((table, columns), (_, rows)) in TABLES.iter().zip(tables) {
        let mut names = columns.join(", ");
        if matches!(*table, "host_messages" | "host_notes") {
            names.push_str(", grams");
        }
        let rows: Vec<Vec<Value>> = rows.into_iter().map(|row| target_row(table, row)).collect();
        for chunk in rows.chunks(CHUNK) {
            let mut insert = Query::new(format!("INSERT INTO {table} ({names}) VALUES "));
            for (n, row) in chunk.iter().enumerate() {
                insert.push(if n == 0 { "(" } else { ", (" });
                for (position, value) in row.iter().enumerate() {
                    if position > 0 {
                        insert.push(", ");
                    }
                    insert.push_bind(value.clone());
                }
                insert.push(")");
            }
            // The members trigger may have added a member a copied row repeats.
            insert.push(" ON CONFLICT DO NOTHING");
            insert.execute(conn).map_err(failed)?;
        }
    }
    for (table, column) in IDENTITIES {
        Query::new(format!(
            "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
             (SELECT COALESCE(MAX({column}), 0) + 1 FROM {table}), false)"
        ))
        .rows_only(conn)
        .map_err(failed)?;
    }
    Ok(())
}
