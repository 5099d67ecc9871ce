//! `send_message` (docs/tools.md#send_message): send text to one chat — a stream, a group or a
//! person — through the reply path ([`Messenger`]); discoverable, min_role user.
//!
//! Owns choosing the target, including **host context stripping**: a host injects the current
//! conversation (`stream_id`, `chat_id`, `group_id`, `user_id`, `platform`) into the arguments
//! when the model left them out. `chat_id` is host-only — accepted, never in the schema — and an
//! injected `stream_id` always equals it, so a `stream_id` equal to `chat_id` is the host's, not a
//! target, and is dropped before "exactly one of stream_id / group_id / user_id" is checked.
//! `chat_id` itself is never a target: it can only remove a target, so forging it gains nothing.
//! That is why this tool's arguments tolerate unknown keys, unlike the other tools.
//!
//! The resolved chat must be within the task's reach ([`crate::reach`], checked after a
//! `group_id`/`user_id` is opened and before anything is delivered): for a user task its own
//! stream, its requester's private chat and the groups the requester belongs to; every chat for
//! an admin task.
//!
//! Relayed words name their real author: with `relay`, the text goes out as
//! "<display name> (<platform:user_id>): text" — the requester of the task, never a name from the
//! arguments (the account id is always shown, since a display name is self-chosen) — and
//! unpolished (polishing would rewrite someone else's words and could drop the name). The old
//! `on_behalf_of` is no longer in the schema; a model that still sends it gets a relay in the
//! requester's name, whatever name it gave.
//! Must not: send anywhere but the one resolved target, or bypass the reply path.

use std::sync::Arc;

use mai_core::capabilities::Messenger;
use mai_core::host::{ChatTarget, Host};
use mai_core::ids::{PersonId, StreamId};
use mai_core::role::{Role, require};
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::reach::{Reach, check_reach};

const DESCRIPTION: &str = "Send a message to another chat, or proactively to a group or person. \
Give exactly one target: stream_id, group_id or user_id (search_users finds them). Not for \
answering the user of this task: your final answer reaches them anyway.";

/// The tool's name.
pub const SEND_MESSAGE: &str = "send_message";

/// `send_message`.
pub fn send_message_tool(
    host: Arc<dyn Host>,
    messenger: Arc<dyn Messenger>,
) -> Result<ToolDefinition, ToolDefinitionError> {
    ToolDefinition::typed(
        SEND_MESSAGE,
        DESCRIPTION,
        Visibility::Discoverable,
        Role::User,
        SendMessage { host, messenger },
    )
    .map(|tool| tool.with_effects(Effect::ContactsPeople))
}

// The message and its target, as both channels take them (the planner's `send_message` takes
// exactly this; the agent loop's adds `relay`). No `deny_unknown_fields`: hosts add `chat_id`
// (and may add other context keys). No doc comment either: it would become the schema's
// description.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// For group_id/user_id; default: this chat's platform.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// Rewrite in the bot's style (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polish: Option<bool>,
    /// Split long text into several messages (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<bool>,
    /// Host-only: the current conversation, injected by the host.
    #[schemars(skip)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SendMessageArgs {
    #[serde(flatten)]
    message: Message,
    /// Passing on the words of the person you act for: sent under their name, unpolished.
    relay: Option<bool>,
    /// Replaced by `relay`: any value relays in the requester's name; the name given is ignored.
    #[schemars(skip)]
    #[serde(default)]
    on_behalf_of: Option<String>,
}

struct SendMessage {
    host: Arc<dyn Host>,
    messenger: Arc<dyn Messenger>,
}

impl TypedTool for SendMessage {
    type Args = SendMessageArgs;

    async fn call(&self, ctx: &ToolContext, args: SendMessageArgs) -> Result<Value, ToolError> {
        require(ctx.role(), Role::User).map_err(ToolError::new)?;
        let SendMessageArgs {
            message: args,
            relay,
            on_behalf_of,
        } = args;
        let text = args.text.trim();
        if text.is_empty() {
            return Err(ToolError::new("text is empty; write the message to send"));
        }
        let target = choose_target(Given {
            stream_id: non_empty(args.stream_id),
            group_id: non_empty(args.group_id),
            user_id: non_empty(args.user_id),
            chat_id: non_empty(args.chat_id),
        })
        .map_err(ToolError::new)?;
        let platform = non_empty(args.platform).unwrap_or_else(|| ctx.platform().to_owned());
        let relay = relay.unwrap_or(false) || non_empty(on_behalf_of).is_some();
        let stream = match target {
            Target::Stream(id) => StreamId::new(id).map_err(ToolError::new)?,
            Target::Chat(chat) => self.host.open_stream(&platform, &chat).await.map_err(|e| {
                ToolError::new(format!(
                    "{e}; check the id and platform (search_users lists known ones)"
                ))
            })?,
        };
        check_reach(self.host.as_ref(), ctx, &stream, Reach::Send).await?;
        let (text, polish) = if relay {
            let author = self.author(ctx).await?;
            (format!("{author}: {text}"), false)
        } else {
            (text.to_owned(), args.polish.unwrap_or(true))
        };
        let split = args.split.unwrap_or(true);
        let parts = self
            .messenger
            .deliver(ctx, &stream, &text, polish, split)
            .await
            .map_err(|e| {
                ToolError::new(format!(
                    "could not deliver to `{stream}`: {e}; check the target or retry later"
                ))
            })?;
        if parts.is_empty() {
            return Err(ToolError::new(format!(
                "nothing was delivered to `{stream}`"
            )));
        }
        Ok(json!({"success": true, "stream_id": stream.as_str(), "parts": parts.len()}))
    }
}

impl SendMessage {
    /// Who relayed words are from: the task's requester, as "<display name> (<platform:user_id>)"
    /// when the host knows their name, else the account alone.
    async fn author(&self, ctx: &ToolContext) -> Result<String, ToolError> {
        let Some(requester) = ctx.requester() else {
            return Err(ToolError::new(
                "relay passes on the words of the person this task acts for, and it acts for no \
                 one; send without relay (the message is then the bot's own)",
            ));
        };
        let name = match self.host.display_name(requester).await {
            Ok(name) => name
                .map(|name| one_line(&name))
                .filter(|name| !name.is_empty()),
            Err(error) => {
                tracing::debug!(%error, "no display name for a relay; the account id stands alone");
                None
            }
        };
        Ok(relay_author(requester, name.as_deref()))
    }
}

fn relay_author(requester: &PersonId, name: Option<&str>) -> String {
    match name {
        Some(name) if name != requester.user_id => format!("{name} ({requester})"),
        _ => requester.to_string(),
    }
}

/// A display name on one line, whitespace runs (newlines included) made single spaces, so it
/// cannot start a line of its own that looks like someone else speaking.
fn one_line(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The target fields as given (blank strings already removed).
#[derive(Debug, Default)]
struct Given {
    stream_id: Option<String>,
    group_id: Option<String>,
    user_id: Option<String>,
    chat_id: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum Target {
    Stream(String),
    Chat(ChatTarget),
}

/// Host context stripping, then exactly one target.
fn choose_target(given: Given) -> Result<Target, String> {
    let mut stream_id = given.stream_id;
    let mut host_stream = None;
    if stream_id.is_some() && stream_id == given.chat_id {
        host_stream = stream_id.take();
    }
    let named: Vec<String> = [
        ("stream_id", &stream_id),
        ("group_id", &given.group_id),
        ("user_id", &given.user_id),
    ]
    .into_iter()
    .filter_map(|(field, value)| value.as_ref().map(|v| format!("{field} `{v}`")))
    .collect();
    match (stream_id, given.group_id, given.user_id) {
        (Some(stream), None, None) => Ok(Target::Stream(stream)),
        (None, Some(group_id), None) => Ok(Target::Chat(ChatTarget::Group { group_id })),
        (None, None, Some(user_id)) => Ok(Target::Chat(ChatTarget::Private { user_id })),
        (None, None, None) => Err(match host_stream {
            Some(current) => format!(
                "no target: stream_id `{current}` is the current conversation (the host's \
                 chat_id), not a target. Give exactly one of stream_id, group_id or user_id \
                 (search_users finds them)"
            ),
            None => "no target: give exactly one of stream_id, group_id or user_id \
                     (search_users finds them)"
                .to_owned(),
        }),
        _ => Err(format!(
            "give only one target, got {}; keep the one you mean",
            named.join(", ")
        )),
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(
        stream: Option<&str>,
        group: Option<&str>,
        user: Option<&str>,
        chat: Option<&str>,
    ) -> Given {
        Given {
            stream_id: stream.map(Into::into),
            group_id: group.map(Into::into),
            user_id: user.map(Into::into),
            chat_id: chat.map(Into::into),
        }
    }

    #[test]
    fn injected_stream_is_dropped_before_counting() {
        let target = choose_target(given(Some("c"), Some("g"), None, Some("c")));
        assert_eq!(
            target,
            Ok(Target::Chat(ChatTarget::Group {
                group_id: "g".into()
            }))
        );
    }

    #[test]
    fn a_stream_other_than_the_chat_is_a_target() {
        let target = choose_target(given(Some("s"), None, None, Some("c")));
        assert_eq!(target, Ok(Target::Stream("s".into())));
        // Without host context a stream_id is always a target.
        assert_eq!(
            choose_target(given(Some("s"), None, None, None)),
            Ok(Target::Stream("s".into()))
        );
    }

    #[test]
    fn only_the_injected_stream_left_is_no_target() {
        let error = choose_target(given(Some("c"), None, None, Some("c"))).unwrap_err();
        assert!(error.starts_with("no target"), "{error}");
        assert!(error.contains("current conversation"), "{error}");
    }

    #[test]
    fn several_targets_are_named() {
        let error = choose_target(given(Some("s"), Some("g"), Some("u"), Some("c"))).unwrap_err();
        assert!(error.contains("stream_id `s`"), "{error}");
        assert!(error.contains("group_id `g`"), "{error}");
        assert!(error.contains("user_id `u`"), "{error}");
    }
}
