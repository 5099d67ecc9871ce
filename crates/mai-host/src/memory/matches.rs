//! Finding messages and notes by text within a [`Scope`]: the shared SQL of every mode.

use crate::sql::Connection;
use mai_core::host::HostError;
use serde_json::{Value, json};

use crate::sql::Query;

use super::{ACTION, Scope, time_text};
use crate::error::{corrupt, db};
use crate::streams::sql_limit;
use crate::text_query::{MESSAGES, NOTES, TextQuery};

/// `(message_id, stream_id, sender_name, text, at, is_bot, score)`.
pub(crate) type MessageRow = (i64, String, String, String, i64, bool, Option<f64>);
pub(crate) const MESSAGE_COLUMNS: &str =
    "m.message_id, m.stream_id, m.sender_name, m.text, m.at, m.is_bot";

/// `(note_id, stream_id, text, at, score)`.
pub(crate) type NoteRow = (i64, Option<String>, String, i64, Option<f64>);

/// A message or a note found by text.
pub(crate) enum Hit {
    Message(MessageRow),
    Note(NoteRow),
}

impl Hit {
    pub(crate) fn score(&self) -> Option<f64> {
        match self {
            Hit::Message(row) => row.6,
            Hit::Note(row) => row.4,
        }
    }

    pub(crate) fn at(&self) -> i64 {
        match self {
            Hit::Message(row) => row.4,
            Hit::Note(row) => row.3,
        }
    }

    /// The fields every result item has.
    pub(crate) fn to_json(&self) -> Result<serde_json::Map<String, Value>, HostError> {
        let value = match self {
            Hit::Message((id, stream_id, sender, text, at, is_bot, _)) => json!({
                "kind": "message",
                "id": id,
                "stream_id": stream_id,
                "sender": sender,
                "text": text,
                "at": time_text(*at)?,
                "is_bot": is_bot,
            }),
            Hit::Note((id, stream_id, text, at, _)) => json!({
                "kind": "note",
                "id": id,
                "stream_id": stream_id,
                "text": text,
                "at": time_text(*at)?,
            }),
        };
        match value {
            Value::Object(map) => Ok(map),
            _ => Err(corrupt(ACTION, "a result item is not an object")),
        }
    }
}

/// The best `limit` messages and the best `limit` notes (notes only for a non-empty query and
/// no person filter).
pub(crate) fn ranked_hits(
    conn: &Connection,
    text: &TextQuery,
    scope: &Scope,
    limit: usize,
) -> Result<Vec<Hit>, HostError> {
    let mut hits: Vec<Hit> = ranked_messages(conn, text, scope, limit)?
        .into_iter()
        .map(Hit::Message)
        .collect();
    if !text.is_empty() && scope.person.is_none() {
        hits.extend(
            ranked_notes(conn, text, scope, limit)?
                .into_iter()
                .map(Hit::Note),
        );
    }
    Ok(hits)
}

/// Messages matching `text` in the scope, best bm25 first (substring-only hits after, newest
/// first); for an empty query, the newest messages.
pub(crate) fn ranked_messages(
    conn: &Connection,
    text: &TextQuery,
    scope: &Scope,
    limit: usize,
) -> Result<Vec<MessageRow>, HostError> {
    let mut qb;
    if text.is_empty() {
        qb = Query::new(format!(
            "SELECT {MESSAGE_COLUMNS}, CAST(NULL AS DOUBLE PRECISION) AS score"
        ));
        push_filtered_messages(&mut qb, text, scope, "");
        qb.push(" ORDER BY m.at DESC, m.message_id DESC LIMIT ");
    } else {
        qb = Query::new(format!(
            "SELECT {MESSAGE_COLUMNS}, MIN(h.score) AS score FROM ("
        ));
        text.push_ranked_hits(&mut qb, &MESSAGES);
        qb.push(
            ") h JOIN host_messages m ON m.message_id = h.id \
             JOIN host_streams s ON s.stream_id = m.stream_id WHERE TRUE",
        );
        push_scope(&mut qb, scope);
        qb.push(
            " GROUP BY m.message_id \
             ORDER BY MIN(h.score) IS NULL, MIN(h.score), m.at DESC, m.message_id DESC LIMIT ",
        );
    }
    qb.push_bind(sql_limit(limit));
    qb.all(conn).map_err(db(ACTION))
}

pub(crate) fn ranked_notes(
    conn: &Connection,
    text: &TextQuery,
    scope: &Scope,
    limit: usize,
) -> Result<Vec<NoteRow>, HostError> {
    let mut qb =
        Query::new("SELECT n.note_id, n.stream_id, n.text, n.at, MIN(h.score) AS score FROM (");
    text.push_ranked_hits(&mut qb, &NOTES);
    qb.push(") h JOIN host_notes n ON n.note_id = h.id WHERE TRUE");
    if let Some(stream) = &scope.stream {
        qb.push(" AND (n.stream_id = ");
        qb.push_bind(stream.clone());
        qb.push(" OR n.stream_id IS NULL)");
    }
    if let Some(start) = scope.start {
        qb.push(" AND n.at >= ");
        qb.push_bind(start);
    }
    if let Some(end) = scope.end {
        qb.push(" AND n.at <= ");
        qb.push_bind(end);
    }
    qb.push(" GROUP BY n.note_id ORDER BY MIN(h.score) IS NULL, MIN(h.score), n.at DESC LIMIT ");
    qb.push_bind(sql_limit(limit));
    qb.all(conn).map_err(db(ACTION))
}

/// ` FROM host_messages m JOIN host_streams s … WHERE <text matches> <scope>`.
pub(crate) fn push_filtered_messages(
    qb: &mut Query,
    text: &TextQuery,
    scope: &Scope,
    extra_joins: &str,
) {
    qb.push(" FROM host_messages m JOIN host_streams s ON s.stream_id = m.stream_id");
    qb.push(extra_joins);
    qb.push(" WHERE ");
    text.push_condition(qb, &MESSAGES, "m.message_id", "m.text");
    push_scope(qb, scope);
}

/// ` AND …` for each filter of the scope, over messages `m` of streams `s`.
pub(crate) fn push_scope(qb: &mut Query, scope: &Scope) {
    if let Some(stream) = &scope.stream {
        qb.push(" AND m.stream_id = ");
        qb.push_bind(stream.clone());
    }
    if let Some(start) = scope.start {
        qb.push(" AND m.at >= ");
        qb.push_bind(start);
    }
    if let Some(end) = scope.end {
        qb.push(" AND m.at <= ");
        qb.push_bind(end);
    }
    if let Some(person) = scope.person {
        qb.push(
            " AND NOT m.is_bot AND EXISTS (SELECT 1 FROM host_accounts fa \
             WHERE fa.platform = s.platform AND fa.user_id = m.user_id AND fa.person_id = ",
        );
        qb.push_bind(person);
        qb.push(")");
    }
}
