//! Streamed answers (`stream: true`): reading the server-sent events and assembling text,
//! reasoning and tool calls from their deltas.
//!
//! Owns the streaming quirks: tool calls split across chunks by `index` (or without one), ids sent
//! only in the first fragment or never, arguments as string fragments or as one object, a usage
//! chunk with no choices, errors sent as a chunk, and telling a finished stream from a truncated
//! one. Knows nothing of HTTP status codes or retries.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use mai_core::model::{ChatMessage, ChatResponse, FinishReason, StreamDelta, ToolCall, Usage};
use serde_json::Value;

use crate::openai::{self, WireError};

/// Largest streamed answer read, counting the raw event-stream bytes. Streaming costs ~30-50
/// bytes of framing per token, so this is far above any real answer; a server that streams
/// without end (or one endless event, which the SSE parser would buffer whole) is cut off here.
pub const MAX_STREAM_BYTES: usize = 64 * 1024 * 1024;

/// Why a stream did not produce a response; the client adds the URL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StreamError {
    Wire(WireError),
    /// No event within the idle timeout.
    Idle,
    /// The connection failed while reading.
    Broken(String),
    /// The stream ended before `[DONE]` or a `finish_reason`.
    Truncated(String),
    /// More than [`MAX_STREAM_BYTES`] arrived.
    TooLarge,
}

/// One tool call being assembled.
#[derive(Debug, Default)]
struct PartialToolCall {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
    /// Set when a provider sends the arguments as one JSON object instead of string fragments.
    arguments_object: Option<Value>,
}

/// Folds chunks into one response.
#[derive(Debug, Default)]
pub(crate) struct StreamAccumulator {
    content: String,
    reasoning: String,
    tool_calls: Vec<PartialToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
    chunks: usize,
}

impl StreamAccumulator {
    /// Applies one `data:` payload; text and reasoning deltas go to `on_delta` as they arrive.
    pub(crate) fn apply_data(
        &mut self,
        data: &str,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<(), WireError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            WireError::Invalid(format!(
                "stream chunk {} is not JSON ({e}): {:?}",
                self.chunks + 1,
                openai::excerpt(data, 200)
            ))
        })?;
        self.chunks += 1;
        if let Some(error) = openai::provider_error(&chunk) {
            return Err(error);
        }
        if let Some(usage) = openai::parse_usage(chunk.get("usage")) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            // The usage chunk (and keep-alive chunks of some servers) have no choices.
            return Ok(());
        };
        // Some servers put a whole message in a stream chunk instead of a delta.
        let delta = choice
            .get("delta")
            .or_else(|| choice.get("message"))
            .unwrap_or(&Value::Null);

        let reasoning = delta
            .get("reasoning_content")
            .or_else(|| delta.get("reasoning"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !reasoning.is_empty() {
            self.reasoning.push_str(reasoning);
            on_delta(StreamDelta::Reasoning(reasoning.to_owned()));
        }
        let text = openai::content_text(delta.get("content"));
        if !text.is_empty() {
            self.content.push_str(&text);
            on_delta(StreamDelta::Text(text));
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                self.apply_tool_call_delta(call);
            }
        }
        if let Some(reason) = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(())
    }

    fn apply_tool_call_delta(&mut self, call: &Value) {
        let index = call.get("index").and_then(Value::as_u64);
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let slot = self.slot_for(index, id);
        if slot.id.is_none() {
            slot.id = id.map(str::to_owned);
        }
        let function = call.get("function").unwrap_or(&Value::Null);
        if let Some(name) = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            // Most providers send the name once; some repeat it in every fragment. Appending a
            // repeat would corrupt it, appending a genuine split fragment rebuilds it.
            if slot.name != name {
                slot.name.push_str(name);
            }
        }
        match function.get("arguments") {
            Some(Value::String(fragment)) => slot.arguments.push_str(fragment),
            Some(Value::Null) | None => {}
            Some(object) => slot.arguments_object = Some(object.clone()),
        }
    }

    /// Which partial call a fragment belongs to: by `index` when given; otherwise a fragment with
    /// a new id starts a call and one without continues the last call.
    fn slot_for(&mut self, index: Option<u64>, id: Option<&str>) -> &mut PartialToolCall {
        let position = match index {
            Some(index) => self.tool_calls.iter().position(|c| c.index == Some(index)),
            None => match (self.tool_calls.last(), id) {
                (Some(last), Some(id)) if last.id.as_deref() != Some(id) => None,
                (Some(_), _) => Some(self.tool_calls.len() - 1),
                (None, _) => None,
            },
        };
        let position = position.unwrap_or_else(|| {
            self.tool_calls.push(PartialToolCall {
                index,
                ..PartialToolCall::default()
            });
            self.tool_calls.len() - 1
        });
        &mut self.tool_calls[position]
    }

    /// Whether the provider said the answer is complete.
    pub(crate) fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    /// The assembled response, or `Truncated` when the stream stopped early.
    pub(crate) fn finish(self) -> Result<ChatResponse, StreamError> {
        if !self.is_complete() {
            return Err(StreamError::Truncated(format!(
                "no [DONE] and no finish_reason after {} chunks, {} characters of text and {} \
                 tool calls",
                self.chunks,
                self.content.chars().count(),
                self.tool_calls.len()
            )));
        }
        let tool_calls: Vec<ToolCall> = self
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(position, call)| ToolCall {
                id: call.id.unwrap_or_else(|| {
                    openai::generated_call_id(call.index.unwrap_or(position as u64))
                }),
                name: call.name,
                arguments: call
                    .arguments_object
                    .unwrap_or_else(|| openai::parse_argument_text(&call.arguments)),
            })
            .collect();
        let finish_reason: FinishReason =
            openai::finish_reason(self.finish_reason, !tool_calls.is_empty());
        let reasoning_content = Some(self.reasoning).filter(|r| !r.is_empty());
        Ok(ChatResponse {
            message: ChatMessage {
                reasoning_content,
                ..ChatMessage::assistant_with_tool_calls(self.content, tool_calls)
            },
            finish_reason,
            usage: self.usage,
        })
    }
}

/// Reads a whole event stream. Each wait for the next event is bounded by `idle_timeout`, so a
/// stalled server fails while a long answer that keeps flowing is never cut.
pub(crate) async fn read_event_stream<S, B, E>(
    bytes: S,
    idle_timeout: Duration,
    on_delta: &mut (dyn FnMut(StreamDelta) + Send),
) -> Result<ChatResponse, StreamError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Display,
{
    read_event_stream_limited(bytes, idle_timeout, on_delta, MAX_STREAM_BYTES).await
}

/// [`read_event_stream`] with the byte limit as a parameter (tests use a small one).
pub(crate) async fn read_event_stream_limited<S, B, E>(
    bytes: S,
    idle_timeout: Duration,
    on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    max_bytes: usize,
) -> Result<ChatResponse, StreamError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Display,
{
    // The byte stream ends early once over the limit; the flag tells that apart from a real end.
    let over_limit = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&over_limit);
    let bytes = bytes.scan(0usize, move |seen, item| {
        if let Ok(chunk) = &item {
            *seen += chunk.as_ref().len();
            if *seen > max_bytes {
                flag.store(true, Ordering::Relaxed);
                return futures::future::ready(None);
            }
        }
        futures::future::ready(Some(item))
    });
    let mut events = Box::pin(bytes).eventsource();
    let mut accumulator = StreamAccumulator::default();
    loop {
        let next = tokio::time::timeout(idle_timeout, events.next())
            .await
            .map_err(|_| StreamError::Idle)?;
        match next {
            None if over_limit.load(Ordering::Relaxed) => return Err(StreamError::TooLarge),
            None => break,
            Some(Err(error)) => {
                // A connection that breaks mid-answer is a truncation (retryable), but say why.
                return Err(StreamError::Broken(error.to_string()));
            }
            Some(Ok(event)) => {
                accumulator
                    .apply_data(&event.data, on_delta)
                    .map_err(StreamError::Wire)?;
                if accumulator.done {
                    break;
                }
            }
        }
    }
    accumulator.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(chunks: &[&str]) -> (Result<ChatResponse, StreamError>, Vec<StreamDelta>) {
        let mut deltas = Vec::new();
        let mut accumulator = StreamAccumulator::default();
        for chunk in chunks {
            if let Err(e) = accumulator.apply_data(chunk, &mut |d| deltas.push(d)) {
                return (Err(StreamError::Wire(e)), deltas);
            }
        }
        (accumulator.finish(), deltas)
    }

    #[test]
    fn tool_calls_without_index_are_split_by_id() {
        let (response, _) = run(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":{"y":2}}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        let response = response.unwrap();
        assert_eq!(
            response.message.tool_calls,
            vec![
                ToolCall::new("a", "f", json!({"x": 1})),
                ToolCall::new("b", "g", json!({"y": 2})),
            ]
        );
    }

    #[test]
    fn repeated_names_are_not_doubled() {
        let (response, _) = run(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"fetch","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"fetch","arguments":"{}"}}]}}]}"#,
            "[DONE]",
        ]);
        let response = response.unwrap();
        assert_eq!(
            response.message.tool_calls,
            vec![ToolCall::new("call_0", "fetch", json!({}))]
        );
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn end_without_done_or_finish_reason_is_truncated() {
        let (response, deltas) = run(&[r#"{"choices":[{"delta":{"content":"Hel"}}]}"#]);
        assert!(
            matches!(response, Err(StreamError::Truncated(_))),
            "{response:?}"
        );
        assert_eq!(deltas, vec![StreamDelta::Text("Hel".into())]);
    }

    #[test]
    fn error_chunk_is_a_provider_error() {
        let (response, _) =
            run(&[r#"{"error":{"message":"overloaded","type":"overloaded_error"}}"#]);
        assert_eq!(
            response,
            Err(StreamError::Wire(WireError::Provider {
                message: "overloaded".into(),
                retryable: true
            }))
        );
    }

    #[tokio::test]
    async fn events_split_at_arbitrary_byte_boundaries_are_reassembled() {
        let body = "data: {\"choices\":[{\"delta\":{\"content\":\"héllo\"}}]}\n\n\
                    data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
                    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n\
                    data: [DONE]\n\n";
        // Three-byte pieces split the UTF-8 "é" and every line.
        let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
            body.as_bytes().chunks(3).map(|c| Ok(c.to_vec())).collect();
        let mut deltas = Vec::new();
        let response = read_event_stream(
            futures::stream::iter(pieces),
            Duration::from_secs(5),
            &mut |d| deltas.push(d),
        )
        .await
        .unwrap();
        assert_eq!(response.message.content, "héllo");
        assert_eq!(response.finish_reason, FinishReason::Stop);
        assert_eq!(
            response.usage,
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 1,
                total_tokens: 4,
                cached_tokens: 0,
            })
        );
        assert_eq!(deltas, vec![StreamDelta::Text("héllo".into())]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_fails_after_the_idle_timeout() {
        let first: Result<Vec<u8>, std::io::Error> =
            Ok(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n".to_vec());
        let stalled = futures::stream::iter(vec![first]).chain(futures::stream::pending());
        let result =
            read_event_stream(Box::pin(stalled), Duration::from_secs(30), &mut |_| {}).await;
        assert_eq!(result, Err(StreamError::Idle));
    }

    #[tokio::test]
    async fn a_stream_over_the_byte_limit_is_refused() {
        let chunk = "data: {\"choices\":[{\"delta\":{\"content\":\"aaaaaaaa\"}}]}\n\n";
        let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
            (0..100).map(|_| Ok(chunk.as_bytes().to_vec())).collect();
        let result = read_event_stream_limited(
            futures::stream::iter(pieces),
            Duration::from_secs(5),
            &mut |_| {},
            chunk.len() * 10,
        )
        .await;
        assert_eq!(result, Err(StreamError::TooLarge));
    }

    #[tokio::test]
    async fn one_endless_event_is_cut_at_the_limit_not_buffered() {
        // No line break ever: the SSE parser would buffer all of it waiting for the event's end.
        let endless = futures::stream::repeat_with(|| Ok::<_, std::io::Error>(vec![b'x'; 4096]));
        let result =
            read_event_stream_limited(endless, Duration::from_secs(5), &mut |_| {}, 1 << 20).await;
        assert_eq!(result, Err(StreamError::TooLarge));
    }
}
