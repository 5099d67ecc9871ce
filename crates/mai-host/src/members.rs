//! Membership: whether a person belongs to a stream, and the display name of an account — the
//! questions the tools' reach check asks. A private chat belongs to exactly its person; a group
//! to everyone seen writing in it (recorded by a trigger on `host_messages`) or added as a member.
//! Must not: answer yes for anything the tables do not show (an unknown stream, another platform).

use crate::sql::Connection;
use mai_core::host::HostError;
use mai_core::ids::{PersonId, StreamId};

use crate::sql::Query;

use crate::error::db;

/// Whether `person` belongs to `stream`: two primary-key lookups, no scan.
pub(crate) fn is_member(
    conn: &Connection,
    person: &PersonId,
    stream: &StreamId,
) -> Result<bool, HostError> {
    Query::new(
        "SELECT EXISTS (SELECT 1 FROM host_streams s \
         WHERE s.stream_id = ?1 AND s.platform = ?2 AND ( \
             (s.kind = 'private' AND s.target_id = ?3) \
             OR (s.kind = 'group' AND EXISTS (SELECT 1 FROM host_members m \
                 WHERE m.stream_id = s.stream_id AND m.user_id = ?3))))",
    )
    .bind(stream.as_str())
    .bind(&person.platform)
    .bind(&person.user_id)
    .scalar(conn)
    .map_err(db("check a person's membership of a stream"))
}

/// Records `person` as a member of the group `stream`. Refused for an unknown stream, a private
/// chat (it belongs to its person only) or a group on another platform.
pub(crate) fn add_member(
    conn: &Connection,
    person: &PersonId,
    stream: &StreamId,
) -> Result<(), HostError> {
    const ACTION: &str = "add a group member";
    let group: Option<String> = Query::new(
        "SELECT stream_id FROM host_streams \
         WHERE stream_id = ? AND platform = ? AND kind = 'group'",
    )
    .bind(stream.as_str())
    .bind(&person.platform)
    .scalar_optional(conn)
    .map_err(db(ACTION))?;
    if group.is_none() {
        return Err(HostError::new(
            ACTION,
            format!(
                "`{stream}` is not a known group chat on {}; members are added to group streams \
                 of the person's own platform",
                person.platform
            ),
        ));
    }
    Query::new(
        "INSERT INTO host_members (stream_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
    )
    .bind(stream.as_str())
    .bind(&person.user_id)
    .execute(conn)
    .map_err(db(ACTION))?;
    Ok(())
}

/// The latest display name of an account, if the host has seen it.
pub(crate) fn display_name(
    conn: &Connection,
    person: &PersonId,
) -> Result<Option<String>, HostError> {
    Query::new("SELECT display_name FROM host_accounts WHERE platform = ? AND user_id = ?")
        .bind(&person.platform)
        .bind(&person.user_id)
        .scalar_optional(conn)
        .map_err(db("look up a display name"))
}
