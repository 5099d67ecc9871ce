//! The OpenAI-compatible response parsing of mai-llm: whole bodies, `data:` payloads and raw
//! server-sent-event bodies cut at arbitrary byte boundaries. Arbitrary bytes must give `Ok` or
//! a short, non-empty error. An `Ok` response keeps the promises the agent loop relies on:
//! every tool call has a non-empty id, and a reply that calls tools never claims `stop`.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use mai_core::model::{ChatResponse, FinishReason};
use mai_llm::fuzzing;

/// Errors are shown to operators and stored as failure reasons: they must stay short whatever
/// the provider sent.
const MAX_ERROR_CHARS: usize = 2_000;

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
});

fn check(result: Result<ChatResponse, String>) {
    match result {
        Ok(response) => {
            let calls = &response.message.tool_calls;
            assert!(
                calls.iter().all(|c| !c.id.is_empty()),
                "empty id: {calls:?}"
            );
            assert!(
                calls.is_empty() || response.finish_reason != FinishReason::Stop,
                "tool calls with finish_reason stop"
            );
        }
        Err(message) => {
            assert!(!message.is_empty());
            let chars = message.chars().count();
            assert!(chars <= MAX_ERROR_CHARS, "error of {chars} chars");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => check(fuzzing::parse_completion(rest)),
        1 => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            check(fuzzing::parse_stream_chunks(text.split('\n')));
        }
        _ => {
            let piece_len = usize::from(mode / 3) + 1;
            check(RUNTIME.block_on(fuzzing::read_event_stream(rest, piece_len)));
        }
    }
});
