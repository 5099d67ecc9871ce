//! `search_users`: people and groups matching any of several keywords, as `send_message`
//! targets.
//!
//! Both sides are normalized before comparing: lowercased, everything that is not a letter or a
//! digit dropped (spaces, punctuation, symbols, emoji), and the filler characters `的` and `群`
//! dropped — so `"技术 群"`, `技术群的` and `技术` all find the group `【技术】交流群`. A keyword
//! matches a stream's name, its group or user id, its stream id, and for a person the person's
//! name, aliases and display names. Exact matches rank before prefix matches before substring
//! matches; then the most recently active first.
//!
//! Matching runs in Rust over the host's streams and accounts (Unicode-aware normalization is
//! not something SQLite can do); that is fine at the size of one bot's chat list.

use std::collections::HashMap;

use crate::sql::Connection;
use mai_core::host::{HostError, StreamInfo, UserQuery};

use crate::sql::Query;

use crate::error::db;
use crate::streams::info_from_row;

/// Characters that carry no meaning in a name search.
const FILLER: &[char] = &['的', '群'];

/// A match: an existing stream, or a person's account that has no private stream yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    Stream(StreamInfo),
    Account {
        platform: String,
        user_id: String,
        display_name: String,
    },
}

/// A found target and the name or id that matched it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundTarget {
    pub found: Found,
    pub matched: String,
}

/// Lowercased letters and digits, without filler characters.
pub(crate) fn normalize(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_alphanumeric() && !FILLER.contains(c))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Which chat kinds a query admits: `(groups, private chats)`.
fn kinds(chat_type: Option<&str>) -> Result<(bool, bool), HostError> {
    match chat_type.map(str::trim) {
        None | Some("") => Ok((true, true)),
        Some("group") => Ok((true, false)),
        Some("private") => Ok((false, true)),
        Some(other) => Err(HostError::new(
            "search users",
            format!("chat_type must be `group` or `private`, got `{other}`"),
        )),
    }
}

struct Candidate {
    found: Found,
    last_active: i64,
    /// Names and ids it can be found by, in the order they are reported as `matched`.
    names: Vec<String>,
}

type StreamCandidateRow = (
    String,
    String,
    String,
    String,
    String,
    i64,
    Option<i64>,
    Option<String>,
);
type AccountRow = (String, String, String, i64, i64, String);

const ACTION: &str = "search users";

/// The targets matching `query`, best first, at most `limit`.
pub(crate) fn find_targets(
    conn: &Connection,
    query: &UserQuery,
    limit: usize,
) -> Result<Vec<FoundTarget>, HostError> {
    let (groups, privates) = kinds(query.chat_type.as_deref())?;
    let platform = query
        .platform
        .as_deref()
        .map(str::trim)
        .filter(|platform| !platform.is_empty());
    let keywords: Vec<&str> = query
        .keywords
        .iter()
        .map(|keyword| keyword.trim())
        .filter(|keyword| !keyword.is_empty())
        .collect();
    let normalized: Vec<String> = keywords
        .iter()
        .map(|keyword| normalize(keyword))
        .filter(|keyword| !keyword.is_empty())
        .collect();
    if !keywords.is_empty() && normalized.is_empty() {
        return Ok(Vec::new());
    }
    let aliases_of = aliases_by_person(conn)?;
    let mut candidates = stream_candidates(conn, platform, (groups, privates), &aliases_of)?;
    // People known from groups only: found too, so they can be messaged privately.
    if privates && !keywords.is_empty() {
        candidates.extend(account_candidates(conn, platform, &aliases_of)?);
    }
    Ok(rank(candidates, &normalized, limit))
}

/// Every person's aliases, in alphabetical order.
fn aliases_by_person(conn: &Connection) -> Result<HashMap<i64, Vec<String>>, HostError> {
    let aliases: Vec<(i64, String)> =
        Query::new("SELECT person_id, alias FROM host_person_aliases ORDER BY alias")
            .all(conn)
            .map_err(db(ACTION))?;
    let mut aliases_of: HashMap<i64, Vec<String>> = HashMap::new();
    for (person_id, alias) in aliases {
        aliases_of.entry(person_id).or_default().push(alias);
    }
    Ok(aliases_of)
}

/// The streams of the admitted kinds (`(groups, private chats)`) on `platform` (any when
/// `None`), each findable by its name, its person's name and aliases (a private chat), its
/// target id and its stream id.
fn stream_candidates(
    conn: &Connection,
    platform: Option<&str>,
    (groups, privates): (bool, bool),
    aliases_of: &HashMap<i64, Vec<String>>,
) -> Result<Vec<Candidate>, HostError> {
    let streams: Vec<StreamCandidateRow> = Query::new(
        "SELECT s.stream_id, s.platform, s.kind, s.target_id, s.name, s.last_active, \
                p.person_id, p.name \
         FROM host_streams s \
         LEFT JOIN host_accounts a ON s.kind = 'private' \
              AND a.platform = s.platform AND a.user_id = s.target_id \
         LEFT JOIN host_persons p ON p.person_id = a.person_id \
         WHERE (?1 IS NULL OR s.platform = ?1) \
           AND ((?2 AND s.kind = 'group') OR (?3 AND s.kind = 'private'))",
    )
    .bind(platform)
    .bind(groups)
    .bind(privates)
    .all(conn)
    .map_err(db(ACTION))?;
    let mut candidates = Vec::with_capacity(streams.len());
    for (stream_id, stream_platform, kind, target_id, name, last_active, person_id, person) in
        streams
    {
        let mut names = vec![name.clone()];
        names.extend(person);
        names.extend(
            person_id
                .and_then(|id| aliases_of.get(&id))
                .into_iter()
                .flatten()
                .cloned(),
        );
        names.push(target_id.clone());
        names.push(stream_id.clone());
        let info = info_from_row((stream_id, stream_platform, kind, target_id, name))?;
        candidates.push(Candidate {
            found: Found::Stream(info),
            last_active,
            names,
        });
    }
    Ok(candidates)
}

/// The accounts on `platform` (any when `None`) that have no private stream yet, each findable
/// by its person's name, its display name, its person's aliases and its user id.
fn account_candidates(
    conn: &Connection,
    platform: Option<&str>,
    aliases_of: &HashMap<i64, Vec<String>>,
) -> Result<Vec<Candidate>, HostError> {
    let accounts: Vec<AccountRow> = Query::new(
        "SELECT a.platform, a.user_id, a.display_name, a.last_seen, p.person_id, p.name \
         FROM host_accounts a JOIN host_persons p ON p.person_id = a.person_id \
         WHERE (?1 IS NULL OR a.platform = ?1) \
           AND NOT EXISTS (SELECT 1 FROM host_streams s WHERE s.platform = a.platform \
                           AND s.kind = 'private' AND s.target_id = a.user_id)",
    )
    .bind(platform)
    .all(conn)
    .map_err(db(ACTION))?;
    let mut candidates = Vec::with_capacity(accounts.len());
    for (account_platform, user_id, display_name, last_seen, person_id, person) in accounts {
        let mut names = vec![person, display_name.clone()];
        names.extend(aliases_of.get(&person_id).into_iter().flatten().cloned());
        names.push(user_id.clone());
        candidates.push(Candidate {
            found: Found::Account {
                platform: account_platform,
                user_id,
                display_name,
            },
            last_active: last_seen,
            names,
        });
    }
    Ok(candidates)
}

/// The candidates matching any of the `normalized` keywords (all of them when there are
/// none), best match first, then most recently active first; at most `limit`.
fn rank(candidates: Vec<Candidate>, normalized: &[String], limit: usize) -> Vec<FoundTarget> {
    let mut ranked: Vec<(u8, i64, FoundTarget)> = Vec::new();
    for candidate in candidates {
        let best = if normalized.is_empty() {
            candidate.names.first().map(|name| (0, name.clone()))
        } else {
            best_match(&candidate.names, normalized)
        };
        if let Some((score, matched)) = best {
            ranked.push((
                score,
                candidate.last_active,
                FoundTarget {
                    found: candidate.found,
                    matched,
                },
            ));
        }
    }
    ranked.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    ranked
        .into_iter()
        .take(limit)
        .map(|(_, _, target)| target)
        .collect()
}

/// The best `(score, name)` of a candidate: 0 exact, 1 prefix, 2 substring.
fn best_match(names: &[String], keywords: &[String]) -> Option<(u8, String)> {
    let mut best: Option<(u8, String)> = None;
    for name in names {
        let normal = normalize(name);
        if normal.is_empty() {
            continue;
        }
        for keyword in keywords {
            let score = if normal == *keyword {
                0
            } else if normal.starts_with(keyword.as_str()) {
                1
            } else if normal.contains(keyword.as_str()) {
                2
            } else {
                continue;
            };
            if best.as_ref().is_none_or(|(current, _)| score < *current) {
                best = Some((score, name.clone()));
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_drops_spaces_punctuation_and_filler() {
        assert_eq!(normalize("【技术】 交流群"), "技术交流");
        assert_eq!(normalize("小明的"), "小明");
        assert_eq!(normalize("Alice B."), "aliceb");
        assert_eq!(normalize("群 的 ！"), "");
    }
}
