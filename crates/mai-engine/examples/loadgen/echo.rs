//! The script of workload (b), as the original's benchmark has it: the model calls an echo tool
//! until the conversation holds `ROUNDS` tool results, then answers; a
//! request without tools (a title, a reply polish) is answered "ok". Owns the echo tool and the
//! in-process model that plays this script; the HTTP fake plays it too (`fake_openai`). Must
//! not know about engines or workloads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use mai_core::model::{ChatModel, ChatRequest, ChatResponse, ModelError, ModelPurpose, ToolCall};
use mai_core::role::Role;
use mai_core::tool::{ToolContext, ToolDefinition, ToolError, ToolHandler, Visibility};
use serde_json::{Value, json};

use crate::support;

/// Tool rounds per task.
pub const ROUNDS: usize = 5;
/// The tool the model calls.
pub const TOOL: &str = "bench_echo";
/// The final answer of an agent task.
pub const ANSWER: &str = "final answer";
/// The answer to a request without tools (title, polish).
pub const PLAIN: &str = "ok";

/// What the model says next in an agent conversation that holds `done` tool results:
/// `Some(call id)` for another echo call, `None` for the answer.
pub fn next_call(done: usize) -> Option<String> {
    (done < ROUNDS).then(|| format!("call_{}", done + 1))
}

/// The echo tool's arguments in the round after `done` results. The original's fake model
/// sends `{"text": "ping"}` every round; here the text carries the round number, because five
/// identical calls would (rightly) trip the loop guard (`[task] repeat_warn_after` = 3 and
/// `repeat_fail_after` = 5 by default), which the benchmark keeps on as shipped.
pub fn arguments(done: usize) -> Value {
    json!({"text": format!("ping {}", done + 1)})
}

/// A tool that returns the text it was given, presented every round to everyone.
pub fn tool() -> ToolDefinition {
    ToolDefinition::new(
        TOOL,
        "Echo the given text back (benchmark no-op tool).",
        json!({
            "type": "object",
            "properties": {"text": {"type": "string", "description": "text to echo"}},
            "required": ["text"],
        }),
        Visibility::Essential,
        Role::Guest,
        Arc::new(Echo),
    )
    .unwrap()
}

struct Echo;

#[async_trait]
impl ToolHandler for Echo {
    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        Ok(json!({"success": true, "echo": args.get("text").cloned().unwrap_or_default()}))
    }
}

/// The in-process model playing the script at once, counting agent and other calls.
#[derive(Default)]
pub struct InstantEcho {
    pub agent_calls: AtomicUsize,
    pub other_calls: AtomicUsize,
}

#[async_trait]
impl ChatModel for InstantEcho {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        if req.purpose != ModelPurpose::Agent {
            self.other_calls.fetch_add(1, Ordering::Relaxed);
            return Ok(ChatResponse::text(PLAIN));
        }
        self.agent_calls.fetch_add(1, Ordering::Relaxed);
        let done = support::tool_results(req);
        Ok(match next_call(done) {
            Some(id) => {
                ChatResponse::tool_calls("", vec![ToolCall::new(id, TOOL, arguments(done))])
            }
            None => ChatResponse::text(ANSWER),
        })
    }
}
