//! The loop guard: a model that calls the same tool with the same arguments again and again is
//! told so instead of the call running again (from `[task] repeat_warn_after` identical calls),
//! and its task fails (at `[task] repeat_fail_after`) with an error naming the tool.
//!
//! Arguments are compared as canonical JSON (keys sorted, no whitespace; a raw string that is
//! JSON is parsed first), so `{"a":1,"b":2}` and `{ "b": 2, "a": 1 }` are the same call. A task's
//! counts are those of its conversation: counted again from the checkpointed history whenever a
//! run starts ([`counts_in`]), so they survive recovery without being stored twice; a cron
//! task's next fire starts a new conversation, and so afresh; a sub-agent keeps its own counts
//! for its one call. Must not: run tools or decide anything but whether a call repeats too often.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use uuid::Uuid;

use mai_core::config::TaskConfig;
use mai_core::model::{ChatMessage, MessageRole, ToolCall};
use mai_core::tool::{OutcomeKind, ToolOutcome};

use crate::prompts::{PromptName, Prompts};

/// What to do with one call.
#[derive(Debug)]
pub(crate) enum Verdict {
    Run,
    /// Do not run it; tell the model it repeats itself.
    Warn(ToolOutcome),
    /// End the task with this error.
    Fail(String),
}

/// The key of a call: its tool and a digest of its canonical arguments.
fn key(call: &ToolCall) -> String {
    let canonical = match &call.arguments {
        Value::String(raw) => serde_json::from_str::<Value>(raw)
            .map_or_else(|_| raw.clone(), |parsed| parsed.to_string()),
        other => other.to_string(),
    };
    let digest = Uuid::new_v5(&Uuid::NAMESPACE_OID, canonical.as_bytes());
    format!("{}:{}", call.name, digest.simple())
}

/// The counts of a conversation: every call of its assistant messages that has its result
/// (the calls still without one are counted when they are handled), except calls of `unwatched`
/// (`ask_user`, which the loop handles itself and never counts).
pub(crate) fn counts_in(messages: &[ChatMessage], unwatched: &str) -> BTreeMap<String, u32> {
    let answered: std::collections::HashSet<&str> = messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    let mut counts = BTreeMap::new();
    let calls = messages
        .iter()
        .filter(|m| m.role == MessageRole::Assistant)
        .flat_map(|m| &m.tool_calls);
    for call in calls {
        if call.name != unwatched && answered.contains(call.id.as_str()) {
            *counts.entry(key(call)).or_insert(0_u32) += 1;
        }
    }
    counts
}

/// Counts `call` in `repeats` and says whether it may run.
pub(crate) fn count(
    repeats: &mut BTreeMap<String, u32>,
    config: &TaskConfig,
    prompts: &Prompts,
    call: &ToolCall,
) -> Verdict {
    if config.repeat_warn_after == 0 && config.repeat_fail_after == 0 {
        return Verdict::Run;
    }
    let seen = repeats.entry(key(call)).or_insert(0);
    *seen = seen.saturating_add(1);
    let times = *seen;
    if config.repeat_fail_after > 0 && times >= config.repeat_fail_after {
        return Verdict::Fail(format!(
            "the model called `{}` {times} times with identical arguments ([task] \
             repeat_fail_after = {}); rephrase the task or raise the limit",
            call.name, config.repeat_fail_after
        ));
    }
    if config.repeat_warn_after > 0 && times >= config.repeat_warn_after {
        let text = prompts
            .render(
                PromptName::RepeatedCall,
                &json!({
                    "tool": call.name,
                    "times": times,
                    "fail_after": config.repeat_fail_after,
                }),
            )
            .unwrap_or_else(|_| format!("`{}` was already called with these arguments", call.name));
        return Verdict::Warn(ToolOutcome::error(OutcomeKind::Failed, text));
    }
    Verdict::Run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_in_another_key_order_are_the_same_call() {
        let a = ToolCall::new("c1", "search", json!({"a": 1, "b": [1, 2]}));
        let b = ToolCall::new(
            "c2",
            "search",
            Value::String("{ \"b\": [1,2], \"a\": 1 }".into()),
        );
        let c = ToolCall::new("c3", "search", json!({"a": 2, "b": [1, 2]}));
        assert_eq!(key(&a), key(&b));
        assert_ne!(key(&a), key(&c));
    }
}
