//! The `search` mode (best bm25 first) and the `hybrid` mode (relevance with recency).

use crate::sql::Connection;
use mai_core::host::{HostError, MemoryQuery};
use serde_json::{Value, json};

use super::matches::{Hit, ranked_hits};
use super::{Scope, candidates};
use crate::text_query::TextQuery;

/// Hybrid weights, the relevance of a substring-only hit and the recency half-life.
const RELEVANCE_WEIGHT: f64 = 0.6;
const RECENCY_WEIGHT: f64 = 0.4;
const SUBSTRING_RELEVANCE: f64 = 0.5;
const RECENCY_HALF_LIFE_MS: f64 = 7.0 * 24.0 * 3600.0 * 1000.0;

pub(crate) fn search(
    conn: &Connection,
    query: &MemoryQuery,
    text: &TextQuery,
    scope: &Scope,
    limit: usize,
) -> Result<Value, HostError> {
    let mut hits = ranked_hits(conn, text, scope, limit)?;
    hits.sort_by(|a, b| {
        let key = |hit: &Hit| (hit.score().is_none(), hit.score().unwrap_or(0.0));
        let (a_none, a_score) = key(a);
        let (b_none, b_score) = key(b);
        a_none
            .cmp(&b_none)
            .then(a_score.total_cmp(&b_score))
            .then(b.at().cmp(&a.at()))
    });
    hits.truncate(limit);
    let mut results = Vec::with_capacity(hits.len());
    for hit in &hits {
        let mut item = hit.to_json()?;
        item.insert("bm25".into(), json!(hit.score()));
        results.push(Value::Object(item));
    }
    Ok(json!({"mode": "search", "query": query.query, "results": results}))
}

pub(crate) fn hybrid(
    conn: &Connection,
    query: &MemoryQuery,
    text: &TextQuery,
    scope: &Scope,
    limit: usize,
) -> Result<Value, HostError> {
    let hits = ranked_hits(conn, text, scope, candidates(limit))?;
    let best = hits
        .iter()
        .filter_map(Hit::score)
        .min_by(f64::total_cmp)
        .filter(|best| *best < 0.0);
    let newest = hits.iter().map(Hit::at).max().unwrap_or(0);
    let mut scored: Vec<(f64, f64, f64, &Hit)> = hits
        .iter()
        .map(|hit| {
            let relevance = match (hit.score(), best) {
                (Some(score), Some(best)) => (score / best).clamp(0.0, 1.0),
                (None, Some(_)) => SUBSTRING_RELEVANCE,
                (_, None) => 1.0,
            };
            #[expect(clippy::cast_precision_loss, reason = "an age in ms fits an f64 well")]
            let age = (newest - hit.at()).max(0) as f64;
            let recency = 0.5_f64.powf(age / RECENCY_HALF_LIFE_MS);
            let score = RELEVANCE_WEIGHT * relevance + RECENCY_WEIGHT * recency;
            (score, relevance, recency, hit)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.3.at().cmp(&a.3.at())));
    scored.truncate(limit);
    let mut results = Vec::with_capacity(scored.len());
    for (score, relevance, recency, hit) in scored {
        let mut item = hit.to_json()?;
        item.insert("relevance".into(), json!(relevance));
        item.insert("recency".into(), json!(recency));
        item.insert("score".into(), json!(score));
        results.push(Value::Object(item));
    }
    Ok(json!({"mode": "hybrid", "query": query.query, "results": results}))
}
