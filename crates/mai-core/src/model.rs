//! The chat model as a capability: provider-neutral messages, requests, responses and errors, and
//! the `ChatModel` trait that `mai-llm` implements over HTTP.
//!
//! Owns the shapes the engine stores in task history (they are checkpointed as JSON, so every type
//! here round-trips through serde and new fields must be optional). Must not do I/O or know any
//! provider's wire format: provider quirks are absorbed in `mai-llm`, never leak here.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who speaks a chat message. Named `MessageRole` so it is never confused with the permission
/// `Role` (guest/user/admin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    System,
    User,
    Assistant,
    Tool,
}

impl MessageRole {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageRole::System => "system",
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
            MessageRole::Tool => "tool",
        }
    }
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id, echoed back in the tool result; generated (`call_{index}`) when the
    /// provider sent none.
    pub id: String,
    pub name: String,
    /// Already parsed. When the provider sent a string that is not valid JSON, this is
    /// `Value::String(raw)` so the tool gate can report the bad arguments to the model instead of
    /// the loop failing.
    pub arguments: Value,
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: MessageRole,
    /// Text; empty when an assistant message only carries tool calls (providers send `null`).
    #[serde(default)]
    pub content: String,
    /// Tool calls of an assistant message; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Tool` messages: which call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Chain-of-thought some providers (DeepSeek, OpenRouter) return next to the answer. Kept for
    /// the timeline; nothing may require it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    fn plain(role: MessageRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_content: None,
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(MessageRole::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(MessageRole::User, content)
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(MessageRole::Assistant, content)
    }

    /// An assistant turn that calls tools (content may be empty).
    pub fn assistant_with_tool_calls(
        content: impl Into<String>,
        tool_calls: Vec<ToolCall>,
    ) -> Self {
        Self {
            tool_calls,
            ..Self::plain(MessageRole::Assistant, content)
        }
    }

    /// The result of one tool call, sent back to the model.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::plain(MessageRole::Tool, content)
        }
    }
}

/// A tool as presented to the model in the request's `tools` parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: ToolSchema,
}

/// A tool's argument schema as models see it: the JSON value and its compact JSON text, both
/// made once and shared — a schema is kilobytes and goes out with every round, so requests
/// copy the text instead of serializing the value again. Serializes as that text.
#[derive(Clone)]
pub struct ToolSchema(Arc<SchemaParts>);

struct SchemaParts {
    value: Value,
    /// `value` as compact JSON; `None` only if it could not be written (it always can).
    text: Option<Box<serde_json::value::RawValue>>,
}

impl ToolSchema {
    pub fn new(value: Value) -> Self {
        let text = serde_json::value::to_raw_value(&value).ok();
        ToolSchema(Arc::new(SchemaParts { value, text }))
    }

    pub fn value(&self) -> &Value {
        &self.0.value
    }
}

impl From<Value> for ToolSchema {
    fn from(value: Value) -> Self {
        ToolSchema::new(value)
    }
}

impl std::ops::Deref for ToolSchema {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0.value
    }
}

impl std::fmt::Debug for ToolSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.value.fmt(f)
    }
}

impl PartialEq for ToolSchema {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.value == other.0.value
    }
}

impl Serialize for ToolSchema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0.text {
            Some(text) => text.serialize(serializer),
            None => self.0.value.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ToolSchema {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(ToolSchema::new)
    }
}

/// What a request is for; each purpose maps to a configured model name (`[llm].models`), so a
/// cheap model can write titles while a strong one runs the agent loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelPurpose {
    /// The autonomous agent loop (tool calling).
    #[default]
    Agent,
    /// Writing/polishing the reply posted into a chat.
    Replyer,
    /// Short titles for tasks.
    Title,
}

impl ModelPurpose {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelPurpose::Agent => "agent",
            ModelPurpose::Replyer => "replyer",
            ModelPurpose::Title => "title",
        }
    }
}

/// One completion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub purpose: ModelPurpose,
}

impl ChatRequest {
    pub fn new(purpose: ModelPurpose, messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            tools: Vec::new(),
            temperature: None,
            max_tokens: None,
            purpose,
        }
    }

    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }

    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }
}

/// Why the model stopped. Unknown provider values are kept verbatim in `Other`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    /// Cut off by `max_tokens` or the context window.
    Length,
    ContentFilter,
    Other(String),
}

impl FinishReason {
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(other) => other,
        }
    }
}

impl From<String> for FinishReason {
    fn from(value: String) -> Self {
        match value.as_str() {
            "stop" | "end_turn" | "eos" => FinishReason::Stop,
            // "function_call" is the legacy name of the same thing.
            "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
            "length" | "max_tokens" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            _ => FinishReason::Other(value),
        }
    }
}

impl From<FinishReason> for String {
    fn from(value: FinishReason) -> Self {
        value.as_str().to_owned()
    }
}

/// Token accounting, when the provider reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    /// Of `prompt_tokens`, how many the provider served from its prompt cache (0 when it does
    /// not say).
    #[serde(default)]
    pub cached_tokens: u64,
}

/// One completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// Always an assistant message.
    pub message: ChatMessage,
    pub finish_reason: FinishReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl ChatResponse {
    /// A plain text answer (finish reason `stop`).
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            message: ChatMessage::assistant(content),
            finish_reason: FinishReason::Stop,
            usage: None,
        }
    }

    /// An answer that calls tools (finish reason `tool_calls`).
    pub fn tool_calls(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            message: ChatMessage::assistant_with_tool_calls(content, tool_calls),
            finish_reason: FinishReason::ToolCalls,
            usage: None,
        }
    }
}

/// A piece of a streamed answer, handed to the caller as it arrives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "text", rename_all = "snake_case")]
pub enum StreamDelta {
    /// More answer text.
    Text(String),
    /// More reasoning text (providers that stream `reasoning_content`).
    Reasoning(String),
    /// The attempt that produced the deltas so far failed and is being retried: discard what was
    /// received; the new attempt streams from the beginning.
    Restart,
}

/// Why a model call failed. Every message says what failed and what to do. Serializable so a
/// cassette can record failures and replay them.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelError {
    /// The API answered with a non-success HTTP status.
    #[error(
        "model API at {url} (model {model}) answered {status} {reason}: {detail}; {hint}",
        hint = status_hint(*status)
    )]
    Status {
        url: String,
        model: String,
        status: u16,
        reason: String,
        /// The provider's error message (or an excerpt of the body).
        detail: String,
        /// What the server asked us to wait (`Retry-After`), if it said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<Duration>,
    },
    /// The request could not be sent or the connection broke while reading the answer.
    #[error(
        "could not talk to the model API at {url}: {detail}; check [llm].base_url and that the \
         server is reachable"
    )]
    Transport { url: String, detail: String },
    /// No connection could be made at all (refused, unknown host, TLS handshake failed): the
    /// server is not there, so trying again at once would only delay the failure.
    #[error(
        "could not connect to the model API at {url}: {detail}; is the model server running? \
         check [llm].base_url"
    )]
    Unreachable { url: String, detail: String },
    /// No answer within the configured time.
    #[error(
        "model API at {url} did not answer within {timeout_secs}s; raise [llm].timeout_secs or \
         check the server"
    )]
    Timeout { url: String, timeout_secs: u64 },
    /// A streamed answer ended before the provider said it was finished.
    #[error(
        "the streamed answer from {url} ended before it was complete ({detail}); this is usually \
         a dropped connection and is retried"
    )]
    TruncatedStream { url: String, detail: String },
    /// A success status with a body we cannot understand (e.g. an HTML page from a wrong base URL).
    #[error(
        "model API at {url} sent an answer that is not an OpenAI-compatible chat completion: \
         {detail}; check [llm].base_url points at an OpenAI-compatible /v1 endpoint"
    )]
    InvalidResponse { url: String, detail: String },
    /// The provider reported an error inside a success response or a stream.
    #[error("model provider reported an error: {message}")]
    Provider { message: String, retryable: bool },
    /// The model client is misconfigured.
    #[error("invalid [llm] configuration: {message}")]
    Config { message: String },
    /// A scripted or replayed model has no response left.
    #[error("{message}")]
    Exhausted { message: String },
    /// A cassette file could not be read, parsed or written.
    #[error("cassette {path}{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Cassette {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<usize>,
        message: String,
    },
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => "check [llm].api_key / MAI_AGENT__LLM__API_KEY",
        404 => {
            "check [llm].base_url (usually ends in /v1) and that the model name in [llm].models \
             exists"
        }
        408 | 429 => {
            "the provider is rate-limiting or busy; such answers are retried up to [llm].max_retries \
             times, honouring Retry-After up to [llm].max_retry_after_secs"
        }
        413 => "the conversation is too long for this model; shorten it or use a larger model",
        400 | 422 => {
            "the provider rejected the request; check the model name in [llm].models and that \
             it supports tool calling"
        }
        500..=599 => {
            "the provider had an internal error; such answers are retried up to [llm].max_retries \
             times"
        }
        _ => "check the [llm] settings and the provider's status",
    }
}

impl ModelError {
    /// Whether trying the same request again may succeed: rate limits, request timeouts, server
    /// errors, dropped connections. Other 4xx and configuration errors never fix themselves.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Status { status, .. } => {
                matches!(status, 408 | 429) || (500..=599).contains(status)
            }
            ModelError::Transport { .. }
            | ModelError::Timeout { .. }
            | ModelError::TruncatedStream { .. } => true,
            ModelError::Provider { retryable, .. } => *retryable,
            ModelError::InvalidResponse { .. }
            | ModelError::Unreachable { .. }
            | ModelError::Config { .. }
            | ModelError::Exhausted { .. }
            | ModelError::Cassette { .. } => false,
        }
    }

    /// How long the server asked to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A chat model. Implementations retry transient failures themselves; an `Err` is final for this
/// call.
#[async_trait]
pub trait ChatModel: Send + Sync {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError>;

    /// Like `complete`, but hands text to `on_delta` as it arrives, then returns the assembled
    /// response. The default streams nothing incrementally: it emits the whole answer as one delta,
    /// which is right for models that cannot stream (scripted, replayed).
    async fn complete_streaming(
        &self,
        req: &ChatRequest,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ChatResponse, ModelError> {
        let response = self.complete(req).await?;
        if let Some(reasoning) = &response.message.reasoning_content {
            on_delta(StreamDelta::Reasoning(reasoning.clone()));
        }
        if !response.message.content.is_empty() {
            on_delta(StreamDelta::Text(response.message.content.clone()));
        }
        Ok(response)
    }
}

// Lets wrappers (recording, the engine) hold `Arc<dyn ChatModel>` and still be a `ChatModel`.
#[async_trait]
impl<M: ChatModel + ?Sized> ChatModel for Arc<M> {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        (**self).complete(req).await
    }

    async fn complete_streaming(
        &self,
        req: &ChatRequest,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ChatResponse, ModelError> {
        (**self).complete_streaming(req, on_delta).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_round_trip_through_json() {
        let messages = vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("hi"),
            ChatMessage::assistant_with_tool_calls(
                "",
                vec![
                    ToolCall::new("call_0", "list_my_tasks", json!({})),
                    ToolCall::new("call_1", "bad", Value::String("{not json".into())),
                ],
            ),
            ChatMessage::tool_result("call_0", "{\"success\":true}"),
            ChatMessage {
                reasoning_content: Some("thinking".into()),
                ..ChatMessage::assistant("done")
            },
        ];
        let request = ChatRequest::new(ModelPurpose::Title, messages)
            .with_tools(vec![ToolSpec {
                name: "t".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}).into(),
            }])
            .with_temperature(0.5)
            .with_max_tokens(10);
        let text = serde_json::to_string(&request).unwrap();
        let back: ChatRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, request);
    }

    #[test]
    fn old_checkpoints_without_optional_fields_still_load() {
        let message: ChatMessage = serde_json::from_str(r#"{"role":"assistant"}"#).unwrap();
        assert_eq!(message, ChatMessage::assistant(""));
        let request: ChatRequest = serde_json::from_str(r#"{"messages":[]}"#).unwrap();
        assert_eq!(request.purpose, ModelPurpose::Agent);
    }

    #[test]
    fn finish_reason_keeps_unknown_values() {
        let reason: FinishReason = serde_json::from_str("\"eaten_by_grue\"").unwrap();
        assert_eq!(reason, FinishReason::Other("eaten_by_grue".into()));
        assert_eq!(serde_json::to_string(&reason).unwrap(), "\"eaten_by_grue\"");
        let reason: FinishReason = serde_json::from_str("\"function_call\"").unwrap();
        assert_eq!(reason, FinishReason::ToolCalls);
    }

    #[test]
    fn response_and_errors_round_trip() {
        let response = ChatResponse {
            usage: Some(Usage {
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
                cached_tokens: 0,
            }),
            ..ChatResponse::tool_calls("", vec![ToolCall::new("a", "b", json!({"x": 1}))])
        };
        let back: ChatResponse =
            serde_json::from_str(&serde_json::to_string(&response).unwrap()).unwrap();
        assert_eq!(back, response);

        let error = ModelError::Status {
            url: "http://x/v1/chat/completions".into(),
            model: "m".into(),
            status: 429,
            reason: "Too Many Requests".into(),
            detail: "slow down".into(),
            retry_after: Some(Duration::from_secs(2)),
        };
        let back: ModelError =
            serde_json::from_str(&serde_json::to_string(&error).unwrap()).unwrap();
        assert_eq!(back, error);
    }

    #[test]
    fn errors_say_what_to_do_and_whether_to_retry() {
        let unauthorized = ModelError::Status {
            url: "http://x/v1/chat/completions".into(),
            model: "m".into(),
            status: 401,
            reason: "Unauthorized".into(),
            detail: "bad key".into(),
            retry_after: None,
        };
        let text = unauthorized.to_string();
        assert!(text.contains("answered 401 Unauthorized"), "{text}");
        assert!(text.contains("MAI_AGENT__LLM__API_KEY"), "{text}");
        assert!(!unauthorized.is_retryable());

        for status in [408, 429, 500, 503] {
            let error = ModelError::Status {
                url: String::new(),
                model: String::new(),
                status,
                reason: String::new(),
                detail: String::new(),
                retry_after: None,
            };
            assert!(error.is_retryable(), "{status}");
        }
        let cassette = ModelError::Cassette {
            path: "c.jsonl".into(),
            line: Some(3),
            message: "bad".into(),
        };
        assert_eq!(cassette.to_string(), "cassette c.jsonl line 3: bad");
    }
}
