//! Ingestion: a message a channel received becomes a stored message in its stream (created or
//! refreshed) from its sender's person (created on first sight). The bot's own delivered
//! messages are stored through [`insert_message`] too, flagged `is_bot`.

use crate::sql::Connection;
use chrono::{DateTime, Utc};
use mai_core::host::{ChatTarget, HostError};
use mai_core::ids::{PersonId, StreamId};
use serde::{Deserialize, Serialize};

use crate::grams::trigrams;
use crate::sql::{Dialect, Query};

use crate::error::db;
use crate::people::note_account;
use crate::schema::to_millis;
use crate::streams::{StreamNames, ensure_stream};

/// A message a channel received from a person.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingMessage {
    /// `qq`, `telegram`, `console`, … (no `:`, not `planner`).
    pub platform: String,
    /// The channel's own stream id, when it has one; otherwise it is derived from the platform
    /// and the group (or, for a private chat, the sender) by [`crate::stream_id_for`].
    #[serde(default)]
    pub stream_id: Option<StreamId>,
    /// Set for a group message; `None` means a private chat with the sender.
    #[serde(default)]
    pub group_id: Option<String>,
    /// The group's display name, when the channel knows it.
    #[serde(default)]
    pub group_name: Option<String>,
    pub user_id: String,
    /// The sender's display name; the user id stands in when empty.
    #[serde(default)]
    pub sender_name: String,
    pub text: String,
    pub at: DateTime<Utc>,
    /// The sender is an anonymous group member (QQ's anonymous chat: every such member shares
    /// one user id). The message is stored like any other, but its `user_id` names no one: the
    /// inbound pipeline treats it as a guest without an identity (no permission lookup, no
    /// commands, never the answer to a task's question).
    #[serde(default)]
    pub anonymous: bool,
    /// The platform's own id of the message (OneBot's `message_id`, MaiBot's), when the channel
    /// has one. On a shared store (PostgreSQL) a message whose id was taken in already — by
    /// another instance connected to the same OneBot implementation or bridge — is dropped.
    #[serde(default)]
    pub platform_message_id: Option<String>,
}

/// Where an ingested message was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestedMessage {
    pub stream_id: StreamId,
    /// `None` when nothing was stored: its platform message id was taken in already (by another
    /// instance on the same database); the message must not be processed again.
    pub message_id: Option<i64>,
}

/// Stores `message` (the caller holds the write transaction).
pub(crate) fn ingest(
    conn: &Connection,
    message: &IncomingMessage,
) -> Result<IngestedMessage, HostError> {
    const ACTION: &str = "ingest a message";
    let sender = PersonId::new(&message.platform, &message.user_id)
        .map_err(|error| HostError::new(ACTION, error))?;
    let sender_name = match message.sender_name.trim() {
        "" => sender.user_id.as_str(),
        name => name,
    };
    let target = match &message.group_id {
        Some(group_id) => ChatTarget::Group {
            group_id: group_id.clone(),
        },
        None => ChatTarget::Private {
            user_id: sender.user_id.clone(),
        },
    };
    let at_ms = to_millis(message.at);
    let names = StreamNames {
        group: message
            .group_name
            .as_deref()
            .map(str::trim)
            .filter(|name| !name.is_empty()),
        private: message.group_id.is_none().then_some(sender_name),
    };
    if !first_sight(conn, message)? {
        // Another instance stores it; its stream is the one asked for, else the target's.
        let stream_id = match &message.stream_id {
            Some(id) => id.clone(),
            None => crate::stream_id_for(&sender.platform, &target)
                .map_err(|error| HostError::new(ACTION, error))?,
        };
        return Ok(IngestedMessage {
            stream_id,
            message_id: None,
        });
    }
    let stream_id = ensure_stream(
        conn,
        message.stream_id.as_ref(),
        &sender.platform,
        &target,
        names,
        at_ms,
    )?;
    note_account(conn, &sender.platform, &sender.user_id, sender_name, at_ms)?;
    let message_id = insert_message(
        conn,
        &stream_id,
        &sender.user_id,
        sender_name,
        &message.text,
        at_ms,
        false,
    )?;
    Ok(IngestedMessage {
        stream_id,
        message_id: Some(message_id),
    })
}

/// Whether `message` is taken in for the first time: on PostgreSQL (shared by instances) its
/// platform message id is recorded with the time it was taken in — not the message's own time,
/// which may be old or skewed and would let the pruning forget the id before a late copy
/// arrives — and a second copy finds it there. Always true on SQLite (one instance) and for a
/// message without an id.
fn first_sight(conn: &Connection, message: &IncomingMessage) -> Result<bool, HostError> {
    let Some(id) = message.platform_message_id.as_deref().map(str::trim) else {
        return Ok(true);
    };
    if conn.dialect() != Dialect::Postgres || id.is_empty() {
        return Ok(true);
    }
    let inserted = Query::new(
        "INSERT INTO host_inbound_seen (platform, platform_message_id, at) VALUES (?, ?, ?)          ON CONFLICT DO NOTHING",
    )
    .bind(message.platform.as_str())
    .bind(id)
    .bind(to_millis(Utc::now()))
    .execute(conn)
    .map_err(db("record a message's platform id"))?;
    Ok(inserted == 1)
}

/// Appends one message to a stream that exists.
pub(crate) fn insert_message(
    conn: &Connection,
    stream: &StreamId,
    user_id: &str,
    sender_name: &str,
    text: &str,
    at_ms: i64,
    is_bot: bool,
) -> Result<i64, HostError> {
    // SQLite's triggers index the text; on PostgreSQL its trigrams are stored with it.
    let grams = (conn.dialect() == Dialect::Postgres).then(|| trigrams(text));
    let (column, value) = if grams.is_some() {
        (", grams", ", ?")
    } else {
        ("", "")
    };
    let mut insert = Query::new(format_args!(
        "INSERT INTO host_messages (stream_id, user_id, sender_name, text, at, is_bot{column}) \
         VALUES (?, ?, ?, ?, ?, ?{value}) RETURNING message_id"
    ))
    .bind(stream.as_str())
    .bind(user_id)
    .bind(sender_name)
    .bind(text)
    .bind(at_ms)
    .bind(is_bot);
    if let Some(grams) = grams {
        insert = insert.bind(grams);
    }
    insert.scalar(conn).map_err(db("store a message"))
}

/// Stored messages deleted per write by [`prune_messages`].
pub(crate) const PRUNE_BATCH: usize = 500;

/// Deletes up to [`PRUNE_BATCH`] stored messages (the bot's and people's) older than `before_ms`,
/// oldest first; their search index entries go with them (a trigger). Streams, people and
/// membership stay. Returns how many were deleted.
pub(crate) fn prune_messages(conn: &Connection, before_ms: i64) -> Result<usize, HostError> {
    if conn.dialect() == Dialect::Postgres {
        // The platform ids taken in before the messages' cutoff go (none is redelivered that
        // late).
        Query::new(
            "DELETE FROM host_inbound_seen WHERE (platform, platform_message_id) IN \
             (SELECT platform, platform_message_id FROM host_inbound_seen WHERE at < ?1 \
             ORDER BY at LIMIT ?2)",
        )
        .bind(before_ms)
        .bind(PRUNE_BATCH as i64)
        .execute(conn)
        .map_err(db("delete old platform message ids"))?;
    }
    Query::new(
        "DELETE FROM host_messages WHERE message_id IN (SELECT message_id FROM host_messages \
         WHERE at < ?1 ORDER BY at LIMIT ?2)",
    )
    .bind(before_ms)
    .bind(PRUNE_BATCH as i64)
    .execute(conn)
    .map_err(db("delete old messages"))
}
