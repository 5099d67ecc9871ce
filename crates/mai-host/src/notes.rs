//! What the host keeps besides messages and people: jargon (per stream or global), knowledge
//! notes (searched by `search_memory`), talk frequency per stream, and the invisible context
//! notes `append_context` adds for the planner.

use crate::sql::Connection;
use chrono::{DateTime, Utc};
use mai_core::host::{HostError, Jargon};
use mai_core::ids::StreamId;
use serde::{Deserialize, Serialize};

use crate::grams::trigrams;
use crate::sql::{Dialect, Query};

use crate::error::{corrupt, db};
use crate::schema::from_millis;
use crate::streams::sql_limit;

/// The `scope` of a jargon term every stream uses.
const GLOBAL_SCOPE: &str = "";

/// One invisible note of a stream's context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextNote {
    pub note: String,
    pub at: DateTime<Utc>,
}

/// Adds or replaces a term; `stream: None` makes it global.
pub(crate) fn add_jargon(
    conn: &Connection,
    stream: Option<&StreamId>,
    term: &str,
    meaning: &str,
) -> Result<(), HostError> {
    let term = term.trim();
    if term.is_empty() {
        return Err(HostError::new("add a jargon term", "the term is empty"));
    }
    Query::new(
        "INSERT INTO host_jargon (scope, term, meaning) VALUES (?, ?, ?) \
         ON CONFLICT (scope, term) DO UPDATE SET meaning = excluded.meaning",
    )
    .bind(stream.map_or(GLOBAL_SCOPE, StreamId::as_str))
    .bind(term)
    .bind(meaning.trim())
    .execute(conn)
    .map_err(db("add a jargon term"))?;
    Ok(())
}

/// Terms of the stream or global that occur in `text` (ASCII case-insensitively); a stream's
/// own meaning wins over a global one for the same term. Longest terms first.
pub(crate) fn jargon_in(
    conn: &Connection,
    stream: &StreamId,
    text: &str,
) -> Result<Vec<Jargon>, HostError> {
    let rows: Vec<(String, String)> = Query::new(format_args!(
        "SELECT term, meaning FROM host_jargon \
         WHERE (scope = ?1 OR scope = ?2) AND {position}(lower(?3), lower(term)) > 0 \
         ORDER BY scope = ?2, length(term) DESC, term",
        position = conn.dialect().position()
    ))
    .bind(stream.as_str())
    .bind(GLOBAL_SCOPE)
    .bind(text)
    .all(conn)
    .map_err(db("look up jargon"))?;
    let mut found: Vec<Jargon> = Vec::with_capacity(rows.len());
    for (term, meaning) in rows {
        if !found.iter().any(|seen| seen.term == term) {
            found.push(Jargon { term, meaning });
        }
    }
    Ok(found)
}

/// Stores a knowledge note; `stream: None` makes it visible from every stream.
pub(crate) fn add_note(
    conn: &Connection,
    stream: Option<&StreamId>,
    text: &str,
    at_ms: i64,
) -> Result<i64, HostError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(HostError::new("add a note", "the note is empty"));
    }
    let grams = (conn.dialect() == Dialect::Postgres).then(|| trigrams(text));
    let (column, value) = if grams.is_some() {
        (", grams", ", ?")
    } else {
        ("", "")
    };
    let mut insert = Query::new(format_args!(
        "INSERT INTO host_notes (stream_id, text, at{column}) VALUES (?, ?, ?{value}) \
         RETURNING note_id"
    ))
    .bind(stream.map(StreamId::as_str))
    .bind(text)
    .bind(at_ms);
    if let Some(grams) = grams {
        insert = insert.bind(grams);
    }
    insert.scalar(conn).map_err(db("add a note"))
}

pub(crate) fn set_frequency(
    conn: &Connection,
    stream: &StreamId,
    value: f64,
) -> Result<(), HostError> {
    if !value.is_finite() || value < 0.0 {
        return Err(HostError::new(
            "set the talk frequency",
            format!("the value must be a finite number ≥ 0, got {value}"),
        ));
    }
    Query::new(
        "INSERT INTO host_frequency (stream_id, value) VALUES (?, ?) \
         ON CONFLICT (stream_id) DO UPDATE SET value = excluded.value",
    )
    .bind(stream.as_str())
    .bind(value)
    .execute(conn)
    .map_err(db("set the talk frequency"))?;
    Ok(())
}

pub(crate) fn frequency(conn: &Connection, stream: &StreamId) -> Result<Option<f64>, HostError> {
    Query::new("SELECT value FROM host_frequency WHERE stream_id = ?")
        .bind(stream.as_str())
        .scalar_optional(conn)
        .map_err(db("read the talk frequency"))
}

pub(crate) fn append_context(
    conn: &Connection,
    stream: &StreamId,
    note: &str,
    at_ms: i64,
) -> Result<(), HostError> {
    Query::new("INSERT INTO host_context_notes (stream_id, note, at) VALUES (?, ?, ?)")
        .bind(stream.as_str())
        .bind(note)
        .bind(at_ms)
        .execute(conn)
        .map_err(db("append a context note"))?;
    Ok(())
}

/// The latest `limit` context notes of a stream, oldest first.
pub(crate) fn context_notes(
    conn: &Connection,
    stream: &StreamId,
    limit: usize,
) -> Result<Vec<ContextNote>, HostError> {
    const ACTION: &str = "read context notes";
    let rows: Vec<(String, i64)> = Query::new(
        "SELECT note, at FROM ( \
             SELECT note_id, note, at FROM host_context_notes WHERE stream_id = ? \
             ORDER BY note_id DESC LIMIT ? \
         ) latest ORDER BY note_id",
    )
    .bind(stream.as_str())
    .bind(sql_limit(limit))
    .all(conn)
    .map_err(db(ACTION))?;
    rows.into_iter()
        .map(|(note, at)| {
            let at = from_millis(at).ok_or_else(|| corrupt(ACTION, format!("time {at}")))?;
            Ok(ContextNote { note, at })
        })
        .collect()
}
