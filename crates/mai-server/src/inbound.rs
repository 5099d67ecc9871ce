//! The inbound pipeline: the one path every chat channel (HTTP ingestion, OneBot, console) hands
//! a received message to.
//!
//! For each message, in this order: store it in the embedded host (so memory search and the planner
//! see it) — or stop there when another instance on the same database took it in already (same
//! platform message id) — resolve the sender's role in that stream from the live `[permission]` config
//! (docs/design.md, "Roles and the permission model"), then either run it as a `/maitask` (`/mt`)
//! chat command — the reply is sent back **raw**, never polished ("Replies and delivery") — or
//! offer it as the answer to a task acting for that sender waiting in that stream
//! ("Asking the user": one reply wakes exactly one task).
//!
//! With `[channels.onebot] guest_replies = false`, a `/maitask` command that a guest or an
//! anonymous member sends in a group of that channel is stored and nothing more: no command
//! runs and nothing is sent, so the bot stays silent in groups where it is not wanted.
//!
//! A message from an anonymous group member ([`IncomingMessage::anonymous`]) is stored and
//! nothing more: its `user_id` is shared by every anonymous member, so it names no one. Such a
//! sender is a guest without an identity — never looked up in `[permission]`, never a requester
//! (a `/maitask` command is refused with a reply saying why), never the answer to a question.
//!
//! Must not: decide permissions itself (the command facade checks roles and ownership), reach
//! the store, or polish command replies.

use serde::Serialize;

use mai_core::host::Delivery;
use mai_core::ids::{PersonId, StreamId};
use mai_core::permission::Speaker;
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_engine::Caller;
use mai_engine::EngineError;
use mai_engine::handle_command;
use mai_host::IncomingMessage;

use crate::state::ServerState;

/// What happened to a delivered message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Inbound {
    /// It was a `/maitask` command; `reply` is what the command answered. `delivered` says
    /// whether the reply reached the stream through a channel registered for its platform (a
    /// program that feeds messages over HTTP without a channel gets the reply here instead).
    Command {
        stream_id: StreamId,
        reply: String,
        delivered: bool,
    },
    /// It answered the sender's oldest task waiting in this stream, which now resumes.
    Answered {
        stream_id: StreamId,
        task_id: TaskId,
    },
    /// It was stored; nothing was waiting for it.
    Stored { stream_id: StreamId },
    /// Its platform message id was taken in already, by another instance on the same database
    /// that received it too: nothing was stored or done here.
    Duplicate { stream_id: StreamId },
}

impl Inbound {
    /// The stream the message was stored in.
    pub fn stream_id(&self) -> &StreamId {
        match self {
            Inbound::Command { stream_id, .. }
            | Inbound::Answered { stream_id, .. }
            | Inbound::Stored { stream_id }
            | Inbound::Duplicate { stream_id } => stream_id,
        }
    }
}

/// Why a message could not be taken in.
#[derive(Debug, thiserror::Error)]
pub enum InboundError {
    /// The message itself is malformed (the sender's fault: fix and resend).
    #[error("{0}")]
    Invalid(String),
    /// The embedded host could not store it.
    #[error(transparent)]
    Host(#[from] mai_core::host::HostError),
    /// The engine failed while waking a waiting task.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Takes in one message a channel received; see the module comment for the order of steps.
pub async fn deliver(
    state: &ServerState,
    message: IncomingMessage,
) -> Result<Inbound, InboundError> {
    // Checked before storing, so a malformed sender is refused with a message saying which
    // part is wrong rather than failing half-way inside the host.
    let person = PersonId::new(&message.platform, &message.user_id)
        .map_err(|e| InboundError::Invalid(format!("platform/user_id: {e}")))?;
    if let Some(group_id) = &message.group_id
        && (group_id.trim().is_empty() || group_id.contains(':'))
    {
        return Err(InboundError::Invalid(format!(
            "group_id `{group_id}` must be non-empty and contain no `:`; omit it for a private chat"
        )));
    }
    if message.text.trim().is_empty() {
        return Err(InboundError::Invalid(
            "text is empty; send the message's text".into(),
        ));
    }
    let stored = state.host.ingest_message(&message).await?;
    let stream_id = stored.stream_id;
    if stored.message_id.is_none() {
        tracing::info!(%stream_id, platform = %message.platform,
            message_id = %message.platform_message_id.as_deref().unwrap_or_default(),
            "a message another instance took in already is skipped");
        return Ok(Inbound::Duplicate { stream_id });
    }
    if is_command(&message.text) && silent_to_guests(state, &message) {
        let role = if message.anonymous {
            Role::Guest
        } else {
            role_of(state, &message)
        };
        if role == Role::Guest {
            tracing::debug!(%stream_id, user = %message.user_id,
                "a guest's command in a group ignored ([channels.onebot] guest_replies = false)");
            return Ok(Inbound::Stored { stream_id });
        }
    }
    if message.anonymous {
        return Ok(from_anonymous(state, stream_id, &message.text).await);
    }
    let role = role_of(state, &message);
    let caller = Caller::person(
        person.clone(),
        role,
        stream_id.clone(),
        message.group_id.clone(),
    );
    if let Some(reply) = handle_command(&state.engine, &caller, &message.text).await {
        let delivered = send_raw(state, &stream_id, &reply).await;
        return Ok(Inbound::Command {
            stream_id,
            reply,
            delivered,
        });
    }
    match state
        .engine
        .handle_user_reply(&person, &stream_id, &message.text)
        .await?
    {
        Some(task_id) => Ok(Inbound::Answered { stream_id, task_id }),
        None => Ok(Inbound::Stored { stream_id }),
    }
}

/// What an anonymous member's (already stored) message does: a `/maitask` command gets a
/// refusal, anything else is just stored. No role is resolved and no waiting task is offered
/// the text, so whoever the shared anonymous id is listed as in `[permission]`, or whoever a
/// task is waiting on, an anonymous member neither acts as them nor answers for them.
async fn from_anonymous(state: &ServerState, stream_id: StreamId, text: &str) -> Inbound {
    if !is_command(text) {
        return Inbound::Stored { stream_id };
    }
    let reply = ANONYMOUS_REFUSAL.to_owned();
    let delivered = send_raw(state, &stream_id, &reply).await;
    Inbound::Command {
        stream_id,
        reply,
        delivered,
    }
}

/// The reply to a `/maitask` command from an anonymous group member.
const ANONYMOUS_REFUSAL: &str = "anonymous members cannot use task commands: a task needs \
    a person to act for and answer to; turn off anonymous mode and send the command again";

/// Whether `text` is a `/maitask` (`/mt`) command.
fn is_command(text: &str) -> bool {
    let first = text.split_whitespace().next().unwrap_or_default();
    first.eq_ignore_ascii_case("/maitask") || first.eq_ignore_ascii_case("/mt")
}

/// Whether a guest's command in this message's group goes unanswered: a group message of the
/// OneBot channel's platform with `[channels.onebot] guest_replies = false` (read live).
fn silent_to_guests(state: &ServerState, message: &IncomingMessage) -> bool {
    let config = state.engine.config().config();
    let onebot = &config.channels.onebot;
    message.group_id.is_some() && !onebot.guest_replies && message.platform == onebot.platform
}

/// The sender's role in the message's stream, from the live config (a `[permission]` reload
/// applies to the next message).
fn role_of(state: &ServerState, message: &IncomingMessage) -> Role {
    state.engine.config().load().permissions.resolve(&Speaker {
        platform: &message.platform,
        user_id: &message.user_id,
        group_id: message.group_id.as_deref(),
    })
}

/// Sends a command reply as is, through the engine's host (MaiBot's bridge in MaiBot mode, the
/// embedded host's channels otherwise). A failed send is logged, not an error: the command has
/// already run, and the caller still gets the reply in the [`Inbound::Command`] it returns.
async fn send_raw(state: &ServerState, stream: &StreamId, reply: &str) -> bool {
    match state.engine.host().send_text(stream, reply).await {
        Ok(Delivery::Sent) => true,
        Ok(Delivery::Rejected(why)) => {
            tracing::debug!(%stream, %why, "command reply not delivered");
            false
        }
        Err(error) => {
            tracing::warn!(%stream, %error, "could not send a command reply");
            false
        }
    }
}
