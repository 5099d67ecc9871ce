//! A task's reach: the one rule for which chats a task may read or send to, used by every tool
//! that reads a chat's messages or sends to a chat, and by the planner for a reply stream.
//!
//! - An admin task reaches every chat.
//! - Every task reaches its own stream.
//! - A user task also reaches the chats its requester (the person it acts for) belongs to: their
//!   private chat and the groups the host has seen them in ([`Host::is_member`]). A task that
//!   acts for no one reaches only its own stream.
//! - A guest task reaches only its own stream, whoever it acts for: guests are people nobody
//!   granted anything, and a guest's task must not widen that through the host's memory.
//!
//! Reading and sending follow the same rule ([`Reach`] only changes the wording of a refusal):
//! the requester's private chat is one of their chats either way. Identity and role come from the
//! [`ToolContext`], never from arguments. Fails closed: a host that cannot answer, or answers with
//! an error, means no.

use mai_core::host::{ChatTarget, Host, StreamInfo};
use mai_core::ids::{PersonId, StreamId};
use mai_core::role::{Role, require};
use mai_core::tool::{ToolContext, ToolError};

/// What a task wants to do with a chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Read its messages (history, memory search).
    Read,
    /// Send a message to it.
    Send,
}

impl Reach {
    fn verb(self) -> &'static str {
        match self {
            Reach::Read => "read",
            Reach::Send => "send to",
        }
    }
}

/// `Ok` when the task of `ctx` may read or send to `stream` (see the module comment); otherwise
/// an error for the model that says what the task may reach and that an admin can do it.
pub async fn check_reach(
    host: &dyn Host,
    ctx: &ToolContext,
    stream: &StreamId,
    purpose: Reach,
) -> Result<(), ToolError> {
    let role = ctx.role();
    if stream == ctx.stream_id() || require(role, Role::Admin).is_ok() {
        return Ok(());
    }
    let verb = purpose.verb();
    let own = ctx.stream_id();
    if require(role, Role::User).is_err() {
        return Err(ToolError::new(format!(
            "a guest task may only {verb} its own chat (`{own}`), not `{stream}`; leave the chat \
             out to use this one, or ask an admin"
        )));
    }
    let Some(requester) = ctx.requester() else {
        return Err(ToolError::new(format!(
            "this task acts for no one, so it may only {verb} its own chat (`{own}`), not \
             `{stream}`; an admin can do it"
        )));
    };
    if belongs(host, requester, stream).await? {
        return Ok(());
    }
    Err(ToolError::new(format!(
        "a {role} task may only {verb} its own chat (`{own}`) and the chats of {requester}, \
         whom it acts for; {requester} is not in `{stream}`. An admin can do it"
    )))
}

/// Whether `person` belongs to `stream`: the host's membership answer, else (for a host that
/// does not answer membership) whether `stream` is the person's private chat.
async fn belongs(host: &dyn Host, person: &PersonId, stream: &StreamId) -> Result<bool, ToolError> {
    let unchecked = |error| {
        ToolError::new(format!(
            "could not check whether {person} is in `{stream}` ({error}); nothing was done, \
             retry later"
        ))
    };
    if host.is_member(person, stream).await.map_err(unchecked)? {
        return Ok(true);
    }
    let info = host.stream_info(stream).await.map_err(unchecked)?;
    Ok(matches!(
        info,
        Some(StreamInfo { platform, target: ChatTarget::Private { user_id }, .. })
            if platform == person.platform && user_id == person.user_id
    ))
}
