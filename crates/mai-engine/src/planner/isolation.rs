//! Who a planner call acts as, and stream isolation for the `subagent_*` tools: a planner call
//! may only touch the tasks of the conversation it is made from, and acts as the person it
//! speaks with.
//!
//! The host injects `chat_id` (the current stream) into the arguments; it is in no schema, so
//! the model cannot forge it. When it is present and the model's `stream_id` differs, the call
//! is refused; without it (no host injection, e.g. a direct API call) the check is skipped. A
//! task reference is then resolved among that stream's tasks — a task of another stream is "not
//! found", never "not yours", so its existence does not leak.
//!
//! The speaker is the host's `user_id` (the front doors strip one the model wrote): the call
//! has the speaker's role in the stream, and the tasks it creates act for them. Without a
//! speaker the call has `[planner] default_role` and its tasks act for nobody.

use mai_core::host::ChatTarget;
use mai_core::ids::{ANONYMOUS_USER_ID, Owner, PersonId, StreamId};
use mai_core::permission::Speaker;
use mai_core::role::Role;
use mai_core::store::TaskFilter;
use mai_core::task::TaskRecord;
use mai_core::tool::ToolError;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::tasks::{Caller, Door, resolve_among};

/// The host-injected context keys of a planner call (none of them in a schema).
#[derive(Debug, Default, Clone)]
pub(crate) struct HostContext {
    pub chat_id: Option<String>,
    pub platform: Option<String>,
    pub group_id: Option<String>,
    /// The person the planner speaks with.
    pub user_id: Option<String>,
}

/// The stream a `subagent_*` call acts in: the model's `stream_id`, refused when the host's
/// `chat_id` names another one.
pub(crate) fn current_stream(stream_id: &str, host: &HostContext) -> Result<StreamId, ToolError> {
    let stream_id = stream_id.trim();
    let stream = StreamId::new(stream_id)
        .map_err(|e| ToolError::new(format!("{e}; pass the current conversation's stream_id")))?;
    if let Some(chat_id) = host.chat_id.as_deref().map(str::trim)
        && !chat_id.is_empty()
        && chat_id != stream_id
    {
        return Err(ToolError::new(format!(
            "stream_id `{stream_id}` is not the current conversation (`{chat_id}`): background \
             sub-agents can only be managed from the conversation they belong to; use \
             stream_id `{chat_id}`"
        )));
    }
    Ok(stream)
}

/// The planner as a facade caller in `stream`: owner `planner:{stream}`, acting for the speaker
/// with the speaker's role there. Platform and group come from the host context, else from what
/// the host knows about the stream.
pub(crate) async fn planner_caller(
    engine: &Engine,
    stream: StreamId,
    host: &HostContext,
) -> Result<Caller, ToolError> {
    let mut platform = non_empty(host.platform.clone());
    let mut group_id = non_empty(host.group_id.clone());
    if platform.is_none() || group_id.is_none() {
        // Best effort: a host that knows nothing about the stream still gets its task created.
        if let Ok(Some(info)) = engine.host.stream_info(&stream).await {
            platform.get_or_insert(info.platform);
            if group_id.is_none()
                && let ChatTarget::Group { group_id: group } = info.target
            {
                group_id = Some(group);
            }
        }
    }
    let platform = platform.unwrap_or_default();
    let speaker = speaker(host.user_id.as_deref(), &platform)?;
    let role = speaker_role(engine, speaker.as_ref(), group_id.as_deref());
    Ok(Caller {
        owner: Owner::planner(stream.clone()),
        requester: speaker,
        role,
        stream_id: stream,
        platform,
        group_id,
        door: Door::Planner,
    })
}

/// The person the host says the planner speaks with; a `user_id` that names nobody valid is
/// refused rather than dropped (dropping it would give the call `[planner] default_role`).
pub(crate) fn speaker(
    user_id: Option<&str>,
    platform: &str,
) -> Result<Option<PersonId>, ToolError> {
    let Some(user_id) = user_id.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    if user_id == ANONYMOUS_USER_ID {
        // Acting for nobody would give the call `[planner] default_role`; acting for the shared
        // id would let anonymous members steer each other's tasks. Neither: refuse.
        return Err(ToolError::new(
            "the host names an anonymous group member as the speaker: anonymous members have \
             no identity, so background tasks cannot act for them; ask them to speak without \
             anonymity",
        ));
    }
    PersonId::new(platform, user_id).map(Some).map_err(|e| {
        ToolError::new(format!(
            "the host's user_id `{user_id}` is not a person on platform `{platform}` ({e}); the \
             host must send the platform with the user_id"
        ))
    })
}

/// The speaker's role in the stream, or `[planner] default_role` without a speaker.
pub(crate) fn speaker_role(
    engine: &Engine,
    speaker: Option<&PersonId>,
    group_id: Option<&str>,
) -> Role {
    let snapshot = engine.config.load();
    match speaker {
        Some(person) => snapshot.permissions.resolve(&Speaker {
            platform: &person.platform,
            user_id: &person.user_id,
            group_id,
        }),
        None => snapshot.config.planner.default_role,
    }
}

/// Resolves `reference` among the tasks of the caller's stream only, whoever they act for
/// (what the caller may see or do with the task is checked after).
pub(crate) async fn resolve_in_stream(
    engine: &Engine,
    caller: &Caller,
    reference: &str,
) -> Result<TaskRecord, EngineError> {
    let reference = reference.trim();
    let reader = Caller::token(caller.stream_id.clone(), caller.platform.clone(), None);
    match engine.resolve(&reader, reference).await {
        Ok(task) if task.stream_id == caller.stream_id => Ok(task),
        Ok(_) | Err(EngineError::Ambiguous { .. }) => {
            // Another stream's task, or ambiguous across all streams; another stream's tasks
            // must neither make the reference ambiguous, show their ids, nor hide this
            // stream's task (an id prefix is tried before titles), so decide among this
            // stream's alone.
            let filter = TaskFilter {
                stream_id: Some(caller.stream_id.clone()),
                ..TaskFilter::default()
            };
            resolve_among(engine.list_stream(caller, filter).await?, reference)
        }
        // The reader sees every task, the caller only this stream's: say "not found" the way
        // another stream's task is not found, so the two cannot be told apart.
        Err(EngineError::NoSuchTask(reference)) => Err(EngineError::NotFound(reference)),
        Err(error) => Err(error),
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(chat: Option<&str>) -> HostContext {
        HostContext {
            chat_id: chat.map(Into::into),
            ..HostContext::default()
        }
    }

    #[test]
    fn a_forged_stream_is_refused() {
        let error = current_stream("b", &host(Some("a"))).err();
        assert!(error.is_some_and(|e| e.0.contains("not the current conversation")));
    }

    #[test]
    fn the_same_stream_or_no_host_context_passes() {
        assert!(current_stream("a", &host(Some("a"))).is_ok());
        assert!(current_stream("b", &host(None)).is_ok());
        assert!(current_stream("b", &host(Some("  "))).is_ok());
    }
}
