//! Appending to a task's agent history inside a write transaction: entries are numbered on
//! from the stored maximum and inserted in one statement.

use mai_core::store::{NewHistoryEntry, StoreError};
use mai_core::task::TaskId;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use crate::codec::time_text;
use crate::error::{corrupt, db};
use crate::status_log::ROWS_PER_INSERT;

/// A history entry as columns, encoded before the write lock is taken.
#[derive(Debug)]
pub(crate) struct HistoryRow {
    pub round: i64,
    pub kind: &'static str,
    pub payload: String,
    pub at: String,
}

pub(crate) fn encode_history(
    id: TaskId,
    entries: &[NewHistoryEntry],
) -> Result<Vec<HistoryRow>, StoreError> {
    entries
        .iter()
        .map(|entry| {
            Ok(HistoryRow {
                round: i64::from(entry.round),
                kind: entry.kind.as_str(),
                payload: serde_json::to_string(&entry.payload).map_err(|error| {
                    corrupt(id, format!("cannot encode a history payload: {error}"))
                })?,
                at: time_text(entry.at),
            })
        })
        .collect()
}

/// Appends `rows` numbered from `first_seq` (the stored maximum + 1), one statement per
/// [`ROWS_PER_INSERT`] rows.
pub(crate) async fn insert_history(
    tx: &mut SqliteConnection,
    key: &str,
    first_seq: i64,
    rows: &[HistoryRow],
    doing: &'static str,
) -> Result<(), StoreError> {
    let numbered: Vec<(i64, &HistoryRow)> = (first_seq..).zip(rows).collect();
    for chunk in numbered.chunks(ROWS_PER_INSERT) {
        let mut insert = QueryBuilder::<Sqlite>::new(
            "INSERT INTO task_history (task_id, seq, round, kind, payload, at) ",
        );
        insert.push_values(chunk, |mut values, (seq, row)| {
            values
                .push_bind(key)
                .push_bind(*seq)
                .push_bind(row.round)
                .push_bind(row.kind)
                .push_bind(row.payload.as_str())
                .push_bind(row.at.as_str());
        });
        insert.build().execute(&mut *tx).await.map_err(db(doing))?;
    }
    Ok(())
}
