//! Streams: the one place a stream id is derived from a platform and a chat target, and the
//! reads and upserts of `host_streams`. Creating a stream never deletes or renames another.

use crate::sql::Connection;
use mai_core::host::{ChatTarget, HostError, StreamInfo};
use mai_core::ids::{GroupId, IdError, PersonId, StreamId};

use crate::sql::Query;

use crate::error::{corrupt, db};

const GROUP: &str = "group";
const PRIVATE: &str = "private";

/// The stream id of a chat when its channel gives none: `platform:group:group_id` for a group,
/// `platform:user_id` for a private chat (the formats of `mai_core::ids`).
pub fn stream_id_for(platform: &str, target: &ChatTarget) -> Result<StreamId, IdError> {
    let id = match target {
        ChatTarget::Group { group_id } => GroupId::new(platform, group_id)?.to_string(),
        ChatTarget::Private { user_id } => PersonId::new(platform, user_id)?.to_string(),
    };
    StreamId::new(id)
}

/// `(kind, target_id)` as stored.
pub(crate) fn kind_and_target(target: &ChatTarget) -> (&'static str, &str) {
    match target {
        ChatTarget::Group { group_id } => (GROUP, group_id),
        ChatTarget::Private { user_id } => (PRIVATE, user_id),
    }
}

/// A `host_streams` row: `(stream_id, platform, kind, target_id, name)`.
pub(crate) type StreamRow = (String, String, String, String, String);

pub(crate) fn info_from_row(row: StreamRow) -> Result<StreamInfo, HostError> {
    const ACTION: &str = "read a stream";
    let (stream_id, platform, kind, target_id, name) = row;
    let target = match kind.as_str() {
        GROUP => ChatTarget::Group {
            group_id: target_id,
        },
        PRIVATE => ChatTarget::Private { user_id: target_id },
        other => return Err(corrupt(ACTION, format!("unknown stream kind `{other}`"))),
    };
    Ok(StreamInfo {
        stream_id: StreamId::new(stream_id).map_err(|error| corrupt(ACTION, error))?,
        platform,
        target,
        name,
    })
}

pub(crate) fn stream_info(
    conn: &Connection,
    stream: &StreamId,
) -> Result<Option<StreamInfo>, HostError> {
    let row: Option<StreamRow> = Query::new(
        "SELECT s.stream_id, s.platform, s.kind, s.target_id, s.name \
         FROM host_streams s WHERE s.stream_id = ?",
    )
    .bind(stream.as_str())
    .optional(conn)
    .map_err(db("read a stream"))?;
    row.map(info_from_row).transpose()
}

/// Known streams, most recently active first.
pub(crate) fn list_streams(conn: &Connection, limit: usize) -> Result<Vec<StreamInfo>, HostError> {
    let rows: Vec<StreamRow> = Query::new(
        "SELECT s.stream_id, s.platform, s.kind, s.target_id, s.name FROM host_streams s \
         ORDER BY s.last_active DESC, s.stream_id LIMIT ?",
    )
    .bind(sql_limit(limit))
    .all(conn)
    .map_err(db("list streams"))?;
    rows.into_iter().map(info_from_row).collect()
}

/// The names a stream takes, by kind, when a message arrives or a chat is opened; `None`
/// keeps the stored name.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StreamNames<'a> {
    pub group: Option<&'a str>,
    pub private: Option<&'a str>,
}

/// Finds the stream — by `wanted` id first, then by platform and target — or creates it (with
/// `wanted` as its id, or the derived one), and records activity at `at_ms`.
pub(crate) fn ensure_stream(
    conn: &Connection,
    wanted: Option<&StreamId>,
    platform: &str,
    target: &ChatTarget,
    names: StreamNames<'_>,
    at_ms: i64,
) -> Result<StreamId, HostError> {
    const ACTION: &str = "find or create a stream";
    let derived = stream_id_for(platform, target).map_err(|error| HostError::new(ACTION, error))?;
    let (kind, target_id) = kind_and_target(target);
    let lookup = Lookup {
        wanted,
        platform,
        kind,
        target_id,
        names,
        at_ms,
    };
    if let Some(id) = refresh(conn, &lookup)? {
        return Ok(id);
    }
    let id = wanted.cloned().unwrap_or(derived);
    let name = match target {
        ChatTarget::Group { .. } => names.group,
        ChatTarget::Private { .. } => names.private,
    }
    .unwrap_or(target_id);
    // Another instance on the same database may create it between the lookup and this insert:
    // then nothing is inserted, and the lookup (run again) finds theirs.
    let inserted = Query::new(
        "INSERT INTO host_streams (stream_id, platform, kind, target_id, name, last_active) \
         VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
    )
    .bind(id.as_str())
    .bind(platform)
    .bind(kind)
    .bind(target_id)
    .bind(name)
    .bind(at_ms)
    .execute(conn)
    .map_err(db(ACTION))?;
    if inserted == 1 {
        return Ok(id);
    }
    refresh(conn, &lookup)?.ok_or_else(|| {
        HostError::new(
            ACTION,
            format!("stream `{id}` exists with another platform or chat target"),
        )
    })
}

/// What [`ensure_stream`] looks a stream up by, and refreshes it with.
struct Lookup<'a> {
    wanted: Option<&'a StreamId>,
    platform: &'a str,
    kind: &'a str,
    target_id: &'a str,
    names: StreamNames<'a>,
    at_ms: i64,
}

/// The stream asked for, else the one of this target, refreshed (name, activity); `None` when
/// there is neither.
fn refresh(conn: &Connection, lookup: &Lookup<'_>) -> Result<Option<StreamId>, HostError> {
    const ACTION: &str = "find or create a stream";
    let (wanted, platform, kind, target_id, names, at_ms) = (
        lookup.wanted,
        lookup.platform,
        lookup.kind,
        lookup.target_id,
        lookup.names,
        lookup.at_ms,
    );
    // The stream asked for, else the one of this target: found and refreshed in one statement
    // (each statement is a round trip to the connection's thread, taken while holding the
    // write turn).
    let existing: Option<String> = Query::new(format_args!(
        "UPDATE host_streams SET \
         name = CASE kind WHEN 'group' THEN COALESCE(?, name) ELSE COALESCE(?, name) END, \
         last_active = {greatest}(last_active, ?) \
         WHERE stream_id = COALESCE( \
             (SELECT stream_id FROM host_streams WHERE stream_id = ?), \
             (SELECT stream_id FROM host_streams \
              WHERE platform = ? AND kind = ? AND target_id = ?)) \
         RETURNING stream_id",
        greatest = conn.dialect().greatest()
    ))
    .bind(names.group)
    .bind(names.private)
    .bind(at_ms)
    .bind(wanted.map(StreamId::as_str))
    .bind(platform)
    .bind(kind)
    .bind(target_id)
    .scalar_optional(conn)
    .map_err(db(ACTION))?;
    existing
        .map(|id| StreamId::new(id).map_err(|error| corrupt(ACTION, error)))
        .transpose()
}

/// Records activity in a stream (the bot spoke) without touching its name.
pub(crate) fn touch(conn: &Connection, stream: &StreamId, at_ms: i64) -> Result<(), HostError> {
    Query::new(format_args!(
        "UPDATE host_streams SET last_active = {}(last_active, ?) WHERE stream_id = ?",
        conn.dialect().greatest()
    ))
    .bind(at_ms)
    .bind(stream.as_str())
    .execute(conn)
    .map_err(db("record activity in a stream"))?;
    Ok(())
}

/// A row count as SQLite takes it.
pub(crate) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}
