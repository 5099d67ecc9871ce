//! The OpenAI Chat Completions wire format: building request bodies and leniently reading
//! non-streamed answers.
//!
//! Owns every provider quirk of a whole response (string-or-object tool arguments, missing ids,
//! `null` or multi-part content, `reasoning_content`, missing `finish_reason`/`usage`, errors in a
//! 200 body). Pure functions on JSON: no HTTP, no retries (see `client` and `retry`); streamed
//! chunks are assembled in `stream`.

use mai_core::model::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, MessageRole, ToolCall, ToolSchema, Usage,
};
use serde::Serialize;
use serde_json::{Map, Value};

/// Why an answer body could not be turned into a `ChatResponse`; the client adds the URL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WireError {
    /// Not a chat completion (not JSON, no choices…).
    Invalid(String),
    /// The provider put an error object in the body.
    Provider { message: String, retryable: bool },
}

/// Options of the request body that come from configuration rather than the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyOptions {
    pub stream: bool,
    pub stream_include_usage: bool,
    pub send_reasoning_content: bool,
}

/// The JSON body of a Chat Completions request, borrowing the request: serialized straight
/// to bytes, never copied into a `Value` tree first (the tool schemas alone are kilobytes,
/// sent every round).
#[derive(Debug, Serialize)]
pub(crate) struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    // An empty `tools` array is rejected by several providers, so leave the key out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a ToolSchema,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    /// `None` is sent as `null`: assistant turns that only call tools (some providers reject "").
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct WireCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: WireCallFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireCallFunction<'a> {
    name: &'a str,
    arguments: std::borrow::Cow<'a, str>,
}

/// The body of a Chat Completions request for `req` on `model`.
pub(crate) fn request_body<'a>(
    req: &'a ChatRequest,
    model: &'a str,
    options: BodyOptions,
) -> Body<'a> {
    Body {
        model,
        messages: req
            .messages
            .iter()
            .map(|m| message_to_wire(m, options.send_reasoning_content))
            .collect(),
        tools: req
            .tools
            .iter()
            .map(|t| WireTool {
                r#type: "function",
                function: WireFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect(),
        temperature: req.temperature,
        max_tokens: req.max_tokens,
        stream: options.stream,
        stream_options: (options.stream && options.stream_include_usage).then_some(StreamOptions {
            include_usage: true,
        }),
    }
}

fn message_to_wire(message: &ChatMessage, send_reasoning: bool) -> WireMessage<'_> {
    let only_calls = message.role == MessageRole::Assistant
        && message.content.is_empty()
        && !message.tool_calls.is_empty();
    WireMessage {
        role: message.role.as_str(),
        content: (!only_calls).then_some(message.content.as_str()),
        tool_calls: message
            .tool_calls
            .iter()
            .map(|call| WireCall {
                id: &call.id,
                r#type: "function",
                function: WireCallFunction {
                    name: &call.name,
                    arguments: arguments_to_wire(&call.arguments),
                },
            })
            .collect(),
        tool_call_id: message.tool_call_id.as_deref(),
        reasoning_content: message
            .reasoning_content
            .as_deref()
            .filter(|_| send_reasoning),
    }
}

/// The wire wants arguments as a JSON string. Unparseable arguments were kept as the raw string
/// the model produced, so they go back verbatim (the model sees what it actually sent).
fn arguments_to_wire(arguments: &Value) -> std::borrow::Cow<'_, str> {
    match arguments {
        Value::String(raw) => std::borrow::Cow::Borrowed(raw),
        other => std::borrow::Cow::Owned(other.to_string()),
    }
}

/// Reads a non-streamed Chat Completions answer.
pub(crate) fn parse_completion(body: &[u8]) -> Result<ChatResponse, WireError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        WireError::Invalid(format!(
            "body is not JSON ({e}); it starts with {:?}",
            excerpt(&String::from_utf8_lossy(body), 200)
        ))
    })?;
    if let Some(error) = provider_error(&value) {
        return Err(error);
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| WireError::Invalid("the answer has no `choices`".to_owned()))?;
    let message = choice
        .get("message")
        .or_else(|| choice.get("delta"))
        .unwrap_or(&Value::Null);

    let mut tool_calls: Vec<ToolCall> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(position, call)| {
                    let function = call.get("function").unwrap_or(&Value::Null);
                    ToolCall {
                        id: non_empty_str(call.get("id"))
                            .map(str::to_owned)
                            .unwrap_or_else(|| generated_call_id(position as u64)),
                        name: non_empty_str(function.get("name"))
                            .unwrap_or_default()
                            .to_owned(),
                        arguments: parse_arguments(function.get("arguments")),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    // The pre-tools `function_call` shape, still produced by some older servers.
    if tool_calls.is_empty()
        && let Some(function) = message.get("function_call").filter(|f| f.is_object())
    {
        tool_calls.push(ToolCall {
            id: generated_call_id(0),
            name: non_empty_str(function.get("name"))
                .unwrap_or_default()
                .to_owned(),
            arguments: parse_arguments(function.get("arguments")),
        });
    }

    let reasoning_content = non_empty_str(message.get("reasoning_content"))
        .or_else(|| non_empty_str(message.get("reasoning")))
        .map(str::to_owned);
    let content = content_text(message.get("content"));
    let finish_reason = finish_reason(
        choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned),
        !tool_calls.is_empty(),
    );
    Ok(ChatResponse {
        message: ChatMessage {
            reasoning_content,
            ..ChatMessage::assistant_with_tool_calls(content, tool_calls)
        },
        finish_reason,
        usage: parse_usage(value.get("usage")),
    })
}

/// The id for a tool call the provider sent without one. Derived from the call's position so the
/// same answer always gets the same ids (replays and checkpoints stay consistent).
pub(crate) fn generated_call_id(index: u64) -> String {
    format!("call_{index}")
}

/// A missing `finish_reason` is inferred from whether tools were called; a provider that says
/// `stop` while calling tools is corrected, so callers can trust `ToolCalls` to mean "run tools".
pub(crate) fn finish_reason(raw: Option<String>, has_tool_calls: bool) -> FinishReason {
    match raw.filter(|r| !r.is_empty()).map(FinishReason::from) {
        Some(FinishReason::Stop) | None if has_tool_calls => FinishReason::ToolCalls,
        Some(reason) => reason,
        None => FinishReason::Stop,
    }
}

/// Tool arguments arrive as a JSON string (OpenAI), an object (several local servers), a
/// double-encoded string, an empty string or nothing (no-argument tools). Invalid JSON is kept as
/// the raw string so the tool gate can tell the model what was wrong.
pub(crate) fn parse_arguments(raw: Option<&Value>) -> Value {
    match raw {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(text)) => parse_argument_text(text),
        Some(other) => other.clone(),
    }
}

pub(crate) fn parse_argument_text(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::String(inner)) => match serde_json::from_str::<Value>(&inner) {
            Ok(decoded @ Value::Object(_)) => decoded,
            _ => Value::String(text.to_owned()),
        },
        Ok(parsed) => parsed,
        Err(_) => Value::String(text.to_owned()),
    }
}

/// Content is a string, `null` (tool calls only) or a list of parts (`[{"type":"text",...}]`).
pub(crate) fn content_text(raw: Option<&Value>) -> String {
    match raw {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                other => other.get("text").and_then(Value::as_str),
            })
            .collect(),
        Some(other) => other.to_string(),
    }
}

pub(crate) fn parse_usage(raw: Option<&Value>) -> Option<Usage> {
    let usage = raw.filter(|u| u.is_object())?;
    let field = |name: &str| usage.get(name).and_then(Value::as_u64);
    let prompt_tokens = field("prompt_tokens").unwrap_or(0);
    let completion_tokens = field("completion_tokens").unwrap_or(0);
    Some(Usage {
        prompt_tokens,
        completion_tokens,
        // Saturating: the counts are the provider's word, and an absurd pair must not overflow.
        total_tokens: field("total_tokens")
            .unwrap_or(prompt_tokens.saturating_add(completion_tokens)),
        cached_tokens: cached_tokens(usage).min(prompt_tokens),
    })
}

/// The prompt tokens served from the provider's cache: OpenAI's
/// `prompt_tokens_details.cached_tokens`, or DeepSeek's `prompt_cache_hit_tokens`; 0 when
/// neither is sent.
fn cached_tokens(usage: &Value) -> u64 {
    usage
        .get("prompt_tokens_details")
        .and_then(|details| details.get("cached_tokens"))
        .or_else(|| usage.get("prompt_cache_hit_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// At most this many characters of a provider's error message are kept.
const MAX_PROVIDER_MESSAGE_CHARS: usize = 500;

/// An `{"error": …}` object in a 200 body or a stream chunk (OpenRouter, some proxies).
pub(crate) fn provider_error(value: &Value) -> Option<WireError> {
    let error = value.get("error").filter(|e| !e.is_null())?;
    // The message ends up in logs and task failure reasons: keep it short whatever was sent.
    let message = match error {
        Value::String(text) => excerpt(text, MAX_PROVIDER_MESSAGE_CHARS),
        other => excerpt(
            &other
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| other.to_string()),
            MAX_PROVIDER_MESSAGE_CHARS,
        ),
    };
    // Overload and rate-limit errors are worth retrying; anything else (bad request, policy) is not.
    let code = error.get("code");
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
    let retryable = code
        .and_then(Value::as_u64)
        .is_some_and(|c| c == 429 || c == 408 || (500..600).contains(&c))
        || ["overloaded", "rate_limit", "server_error", "timeout"]
            .iter()
            .any(|k| {
                kind.contains(k) || code.and_then(Value::as_str).is_some_and(|c| c.contains(k))
            });
    Some(WireError::Provider { message, retryable })
}

fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// At most `max` characters of `text`, for error messages.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mai_core::model::{ModelPurpose, ToolSpec};
    use serde_json::json;

    #[test]
    fn arguments_in_every_shape() {
        assert_eq!(parse_arguments(None), json!({}));
        assert_eq!(parse_arguments(Some(&json!(""))), json!({}));
        assert_eq!(parse_arguments(Some(&json!("{\"a\":1}"))), json!({"a": 1}));
        assert_eq!(parse_arguments(Some(&json!({"a": 1}))), json!({"a": 1}));
        assert_eq!(
            parse_arguments(Some(&json!("\"{\\\"a\\\":1}\""))),
            json!({"a": 1}),
            "double-encoded arguments are decoded"
        );
        assert_eq!(
            parse_arguments(Some(&json!("{\"a\":"))),
            Value::String("{\"a\":".into())
        );
    }

    #[test]
    fn content_parts_are_joined() {
        let parts = json!([{"type": "text", "text": "a"}, "b", {"type": "image_url"}]);
        assert_eq!(content_text(Some(&parts)), "ab");
        assert_eq!(content_text(Some(&Value::Null)), "");
    }

    #[test]
    fn finish_reason_is_inferred_and_corrected() {
        assert_eq!(finish_reason(None, false), FinishReason::Stop);
        assert_eq!(finish_reason(None, true), FinishReason::ToolCalls);
        assert_eq!(
            finish_reason(Some("stop".into()), true),
            FinishReason::ToolCalls
        );
        assert_eq!(
            finish_reason(Some("length".into()), true),
            FinishReason::Length
        );
        assert_eq!(
            finish_reason(Some(String::new()), false),
            FinishReason::Stop
        );
    }

    #[test]
    fn error_in_a_success_body_is_reported() {
        let body = br#"{"error": {"message": "Provider overloaded", "code": 503}}"#;
        assert_eq!(
            parse_completion(body),
            Err(WireError::Provider {
                message: "Provider overloaded".into(),
                retryable: true
            })
        );
        let body = br#"{"error": {"message": "bad", "type": "invalid_request_error"}}"#;
        assert!(matches!(
            parse_completion(body),
            Err(WireError::Provider {
                retryable: false,
                ..
            })
        ));
    }

    /// Regression: `prompt_tokens + completion_tokens` overflowed (a panic in debug builds, and
    /// in the fuzz build) when a body gave both near `u64::MAX` and no total.
    #[test]
    fn cached_prompt_tokens_are_read_from_either_dialect() {
        let openai = parse_usage(Some(&json!({
            "prompt_tokens": 100, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 60}
        })))
        .unwrap();
        assert_eq!(openai.cached_tokens, 60);
        let deepseek = parse_usage(Some(&json!({
            "prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 30
        })))
        .unwrap();
        assert_eq!(deepseek.cached_tokens, 30);
    }

    #[test]
    fn absurd_usage_counts_do_not_overflow() {
        let usage = parse_usage(Some(&json!({
            "prompt_tokens": u64::MAX, "completion_tokens": 2
        })))
        .unwrap();
        assert_eq!(usage.total_tokens, u64::MAX);
    }

    #[test]
    fn provider_error_messages_are_cut() {
        let body = json!({"error": "x".repeat(100_000)}).to_string();
        let Err(WireError::Provider { message, .. }) = parse_completion(body.as_bytes()) else {
            panic!("expected a provider error");
        };
        assert_eq!(message.chars().count(), MAX_PROVIDER_MESSAGE_CHARS + 1);
    }

    #[test]
    fn html_body_is_invalid_with_an_excerpt() {
        let Err(WireError::Invalid(detail)) = parse_completion(b"<html>nginx</html>") else {
            panic!("expected invalid");
        };
        assert!(detail.contains("<html>nginx"), "{detail}");
    }

    #[test]
    fn legacy_function_call_becomes_a_tool_call() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":null,
            "function_call":{"name":"f","arguments":"{}"}},"finish_reason":"function_call"}]}"#;
        let response = parse_completion(body).unwrap();
        assert_eq!(
            response.message.tool_calls,
            vec![ToolCall::new("call_0", "f", json!({}))]
        );
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn request_body_shapes_history_for_the_wire() {
        let req = ChatRequest::new(
            ModelPurpose::Agent,
            vec![
                ChatMessage::user("hi"),
                ChatMessage {
                    reasoning_content: Some("hmm".into()),
                    ..ChatMessage::assistant_with_tool_calls(
                        "",
                        vec![
                            ToolCall::new("c1", "f", json!({"x": 1})),
                            ToolCall::new("c2", "g", Value::String("{bad".into())),
                        ],
                    )
                },
                ChatMessage::tool_result("c1", "ok"),
            ],
        )
        .with_tools(vec![ToolSpec {
            name: "f".into(),
            description: "does f".into(),
            parameters: json!({"type": "object"}).into(),
        }]);
        let options = BodyOptions {
            stream: false,
            stream_include_usage: true,
            send_reasoning_content: false,
        };
        let body = serde_json::to_value(request_body(&req, "m", options)).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}},
                        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{bad"}},
                    ]},
                    {"role": "tool", "content": "ok", "tool_call_id": "c1"},
                ],
                "tools": [{"type": "function", "function": {
                    "name": "f", "description": "does f", "parameters": {"type": "object"}}}],
            })
        );
        let empty = ChatRequest::new(ModelPurpose::Agent, vec![]);
        let streamed = serde_json::to_value(request_body(
            &empty,
            "m",
            BodyOptions {
                stream: true,
                send_reasoning_content: true,
                ..options
            },
        ))
        .unwrap();
        assert_eq!(streamed["stream"], json!(true));
        assert_eq!(streamed["stream_options"], json!({"include_usage": true}));
        assert!(streamed.get("tools").is_none());
        let with_reasoning = serde_json::to_value(request_body(
            &req,
            "m",
            BodyOptions {
                send_reasoning_content: true,
                ..options
            },
        ))
        .unwrap();
        assert_eq!(with_reasoning["messages"][1]["reasoning_content"], "hmm");
    }
}
