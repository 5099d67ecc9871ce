//! The `episode` mode: the bursts of conversation around the matches.

use std::collections::HashSet;

use crate::sql::Connection;
use mai_core::host::{HostError, MemoryQuery};
use serde_json::{Value, json};

use crate::sql::Query;

use super::matches::{MessageRow, ranked_messages};
use super::{ACTION, MemorySettings, Scope, candidates, time_text};
use crate::error::db;
use crate::streams::sql_limit;
use crate::text_query::TextQuery;

/// The most messages one episode holds.
const EPISODE_MAX_MESSAGES: usize = 40;

/// One episode being built: a stream and a window that holds one or more matches.
struct Episode {
    stream_id: String,
    window_end: i64,
    best_rank: usize,
    best_at: i64,
    window_start: i64,
    matched: Vec<i64>,
}

pub(crate) fn episode(
    conn: &Connection,
    query: &MemoryQuery,
    text: &TextQuery,
    scope: &Scope,
    limit: usize,
    settings: MemorySettings,
) -> Result<Value, HostError> {
    let window_ms = i64::from(settings.episode_window_minutes) * 60_000;
    let matches = ranked_messages(conn, text, scope, candidates(limit))?;
    let mut by_stream: Vec<(usize, &MessageRow)> = matches.iter().enumerate().collect();
    by_stream.sort_by(|a, b| a.1.1.cmp(&b.1.1).then(a.1.4.cmp(&b.1.4)));
    let mut episodes: Vec<Episode> = Vec::new();
    for (rank, row) in by_stream {
        let (id, stream_id, at) = (row.0, &row.1, row.4);
        match episodes.last_mut() {
            Some(current)
                if current.stream_id == *stream_id && at - window_ms <= current.window_end =>
            {
                current.window_end = at + window_ms;
                current.matched.push(id);
                if rank < current.best_rank {
                    current.best_rank = rank;
                    current.best_at = at;
                }
            }
            _ => episodes.push(Episode {
                stream_id: stream_id.clone(),
                window_start: at - window_ms,
                window_end: at + window_ms,
                best_rank: rank,
                best_at: at,
                matched: vec![id],
            }),
        }
    }
    episodes.sort_by_key(|episode| episode.best_rank);
    episodes.truncate(limit);
    let mut out = Vec::with_capacity(episodes.len());
    for episode in episodes {
        out.push(episode_json(conn, &episode)?);
    }
    Ok(json!({
        "mode": "episode",
        "query": query.query,
        "window_minutes": settings.episode_window_minutes,
        "episodes": out,
    }))
}

fn episode_json(conn: &Connection, episode: &Episode) -> Result<Value, HostError> {
    let mut rows: Vec<MessageRow> = Query::new(
        "SELECT m.message_id, m.stream_id, m.sender_name, m.text, m.at, m.is_bot, NULL \
         FROM host_messages m WHERE m.stream_id = ? AND m.at BETWEEN ? AND ? \
         ORDER BY abs(m.at - ?), m.message_id LIMIT ?",
    )
    .bind(&episode.stream_id)
    .bind(episode.window_start)
    .bind(episode.window_end)
    .bind(episode.best_at)
    .bind(sql_limit(EPISODE_MAX_MESSAGES))
    .all(conn)
    .map_err(db(ACTION))?;
    rows.sort_by_key(|row| (row.4, row.0));
    let stream_name: Option<String> =
        Query::new("SELECT name FROM host_streams WHERE stream_id = ?")
            .bind(&episode.stream_id)
            .scalar_optional(conn)
            .map_err(db(ACTION))?;
    let matched: HashSet<i64> = episode.matched.iter().copied().collect();
    let mut messages = Vec::with_capacity(rows.len());
    for (id, _, sender, text, at, is_bot, _) in &rows {
        messages.push(json!({
            "id": id,
            "sender": sender,
            "text": text,
            "at": time_text(*at)?,
            "is_bot": is_bot,
            "matched": matched.contains(id),
        }));
    }
    let start = rows.first().map(|row| time_text(row.4)).transpose()?;
    let end = rows.last().map(|row| time_text(row.4)).transpose()?;
    Ok(json!({
        "stream_id": episode.stream_id,
        "stream_name": stream_name,
        "start": start,
        "end": end,
        "match_count": episode.matched.len(),
        "messages": messages,
    }))
}
