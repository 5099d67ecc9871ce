//! The `time` mode: the messages of a time window, oldest first.

use crate::sql::Connection;
use mai_core::host::{HostError, MemoryQuery};
use serde_json::{Value, json};

use crate::sql::Query;

use super::matches::{MESSAGE_COLUMNS, MessageRow, push_filtered_messages};
use super::{ACTION, Scope, rfc3339, time_text};
use crate::error::db;
use crate::streams::sql_limit;
use crate::text_query::TextQuery;

pub(crate) fn time(
    conn: &Connection,
    query: &MemoryQuery,
    text: &TextQuery,
    scope: &Scope,
    limit: usize,
) -> Result<Value, HostError> {
    let forward = scope.start.is_some();
    let mut qb = Query::new(format!("SELECT {MESSAGE_COLUMNS}, NULL"));
    push_filtered_messages(&mut qb, text, scope, "");
    qb.push(if forward {
        " ORDER BY m.at, m.message_id LIMIT "
    } else {
        " ORDER BY m.at DESC, m.message_id DESC LIMIT "
    });
    qb.push_bind(sql_limit(limit));
    let mut rows: Vec<MessageRow> = qb.all(conn).map_err(db(ACTION))?;
    if !forward {
        rows.reverse();
    }
    let mut messages = Vec::with_capacity(rows.len());
    for (id, stream_id, sender, text, at, is_bot, _) in rows {
        messages.push(json!({
            "id": id,
            "stream_id": stream_id,
            "sender": sender,
            "text": text,
            "at": time_text(at)?,
            "is_bot": is_bot,
        }));
    }
    Ok(json!({
        "mode": "time",
        "query": query.query,
        "time_start": query.time_start.map(rfc3339),
        "time_end": query.time_end.map(rfc3339),
        "messages": messages,
    }))
}
