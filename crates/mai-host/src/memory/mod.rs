//! `search_memory`: the embedded host's long-term memory over stored messages and knowledge
//! notes, in five modes with distinct result shapes (also in docs/host.md).
//!
//! Every mode takes the same filters: `stream` (messages of that stream; notes of that stream
//! or global), `person_name` (resolved by exact name or alias to the person's accounts; only
//! their messages, never notes or the bot's messages), `time_start`/`time_end` (inclusive) and
//! `limit` (0 means 5; at most 200). The query text is parsed by `text_query`: terms of 3+
//! characters use the trigram full-text index, shorter ones substring matching, terms are
//! OR-ed, and no input can produce an SQL or FTS syntax error. An empty query matches every
//! message in the filters. Times are RFC 3339 UTC strings.
//!
//! - **search** — full-text matches of messages and notes, best bm25 first (substring-only hits
//!   after every full-text hit, newest first).
//!   `{"mode":"search","query","results":[{"kind":"message"|"note","id","stream_id","sender"?,
//!   "text","at","is_bot"?,"bm25"}]}` (`sender`/`is_bot` on messages only; `bm25`: lower is
//!   better, null for a substring-only hit; a global note's `stream_id` is null).
//! - **time** — the messages in `[time_start, time_end]`, oldest first; the query, if any,
//!   filters. With a start, the first `limit` messages from it; without one, the last `limit`
//!   up to the end (or the latest). Notes are not included.
//!   `{"mode":"time","query","time_start","time_end","messages":[{"id","stream_id","sender",
//!   "text","at","is_bot"}]}`
//! - **hybrid** — full-text candidates re-ranked by `0.6 × relevance + 0.4 × recency`, best
//!   first. relevance = bm25 ÷ the best candidate's bm25 (1 = best match; a substring-only hit
//!   gets 0.5, or 1 when no candidate is a full-text hit); recency = 0.5^(age ÷ 7 days), age counted from the newest candidate.
//!   `{"mode":"hybrid","query","results":[{"kind","id","stream_id","sender"?,"text","at",
//!   "is_bot"?,"relevance","recency","score"}]}`
//! - **episode** — for each message match, the burst of surrounding messages of its stream
//!   (everyone's, within the episode window, default 10 minutes, either side); overlapping
//!   bursts in one stream merge into one episode. Episodes are ordered by their best match,
//!   each holds at most 40 messages (those nearest the best match), oldest first.
//!   `{"mode":"episode","query","window_minutes","episodes":[{"stream_id","stream_name","start",
//!   "end","match_count","messages":[{"id","sender","text","at","is_bot","matched"}]}]}`
//! - **aggregate** — counts of the matching messages, not the messages: in total, per person
//!   (the bot counts under its name; at most `limit`, most first) and per UTC day (the latest
//!   `limit` days, in date order).
//!   `{"mode":"aggregate","query","total","first_at","last_at","by_person":[{"name","count",
//!   "is_bot"}],"by_day":[{"day":"YYYY-MM-DD","count"}]}`
//!
//! A `person_name` nobody has gives the mode's shape with empty lists and a `warning`.

mod aggregate;
mod episode;
mod matches;
mod ranked;
mod window;

use crate::sql::Connection;
use chrono::{DateTime, SecondsFormat, Utc};
use mai_core::host::{HostError, MemoryMode, MemoryQuery};
use serde_json::{Value, json};

use crate::error::corrupt;
use crate::people::resolve_person;
use crate::schema::{from_millis, to_millis};
use crate::text_query::TextQuery;

const ACTION: &str = "search memory";
/// What a `limit` of 0 means.
const DEFAULT_LIMIT: usize = 5;
/// The most results any mode returns.
const MAX_LIMIT: usize = 200;
/// Candidates hybrid and episode consider per requested result.
const CANDIDATES_PER_RESULT: usize = 4;
const MIN_CANDIDATES: usize = 50;
const MAX_CANDIDATES: usize = 400;

/// How episodes are cut.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemorySettings {
    pub episode_window_minutes: u32,
}

/// The filters every mode applies.
pub(crate) struct Scope {
    pub stream: Option<String>,
    pub person: Option<i64>,
    pub start: Option<i64>,
    pub end: Option<i64>,
}

/// Runs `query` in its mode.
pub(crate) fn search_memory(
    conn: &Connection,
    query: &MemoryQuery,
    settings: MemorySettings,
) -> Result<Value, HostError> {
    let limit = match query.limit {
        0 => DEFAULT_LIMIT,
        limit => limit.min(MAX_LIMIT),
    };
    let text = TextQuery::parse_for(&query.query, conn.dialect());
    let mut scope = Scope {
        stream: query
            .stream
            .as_ref()
            .map(|stream| stream.as_str().to_owned()),
        person: None,
        start: query.time_start.map(to_millis),
        end: query.time_end.map(to_millis),
    };
    let mut warning = None;
    if let Some(name) = query
        .person_name
        .as_deref()
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        match resolve_person(conn, name)? {
            Some(person) => scope.person = Some(person),
            None => warning = Some(format!("no person is named `{name}`")),
        }
    }
    let mut result = match (query.mode, warning.is_some()) {
        (MemoryMode::Search, false) => ranked::search(conn, query, &text, &scope, limit)?,
        (MemoryMode::Time, false) => window::time(conn, query, &text, &scope, limit)?,
        (MemoryMode::Hybrid, false) => ranked::hybrid(conn, query, &text, &scope, limit)?,
        (MemoryMode::Episode, false) => {
            episode::episode(conn, query, &text, &scope, limit, settings)?
        }
        (MemoryMode::Aggregate, false) => aggregate::aggregate(conn, query, &text, &scope, limit)?,
        (mode, true) => empty_shape(query, mode, settings),
    };
    if let (Some(warning), Value::Object(map)) = (warning, &mut result) {
        map.insert("warning".into(), Value::String(warning));
    }
    Ok(result)
}

/// The shape of `mode` with nothing in it (an unknown person).
fn empty_shape(query: &MemoryQuery, mode: MemoryMode, settings: MemorySettings) -> Value {
    match mode {
        MemoryMode::Search => json!({"mode": "search", "query": query.query, "results": []}),
        MemoryMode::Hybrid => json!({"mode": "hybrid", "query": query.query, "results": []}),
        MemoryMode::Time => json!({
            "mode": "time",
            "query": query.query,
            "time_start": query.time_start.map(rfc3339),
            "time_end": query.time_end.map(rfc3339),
            "messages": [],
        }),
        MemoryMode::Episode => json!({
            "mode": "episode",
            "query": query.query,
            "window_minutes": settings.episode_window_minutes,
            "episodes": [],
        }),
        MemoryMode::Aggregate => json!({
            "mode": "aggregate",
            "query": query.query,
            "total": 0,
            "first_at": null,
            "last_at": null,
            "by_person": [],
            "by_day": [],
        }),
    }
}

/// How many candidates a re-ranking mode considers for `limit` results.
pub(crate) fn candidates(limit: usize) -> usize {
    (limit * CANDIDATES_PER_RESULT).clamp(MIN_CANDIDATES, MAX_CANDIDATES)
}

pub(crate) fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(crate) fn time_text(millis: i64) -> Result<String, HostError> {
    from_millis(millis)
        .map(rfc3339)
        .ok_or_else(|| corrupt(ACTION, format!("time {millis}")))
}
