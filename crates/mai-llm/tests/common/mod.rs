//! Shared fixtures for the integration tests: a loopback fake of an OpenAI-compatible server
//! (wiremock) and builders for its answers.
#![allow(dead_code)] // each test binary uses a different subset
#![allow(clippy::unwrap_used)] // fixtures panic on setup failure

use mai_core::model::{ChatMessage, ChatRequest, ModelPurpose};
use mai_llm::{LlmConfig, ModelNames};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockBuilder, MockServer};

pub const API_KEY: &str = "sk-test-key";

/// A client config pointing at `server`, with fast retries so tests stay quick.
pub fn config(server: &MockServer) -> LlmConfig {
    LlmConfig {
        base_url: format!("{}/v1", server.uri()),
        api_key: Some(API_KEY.to_owned()),
        models: ModelNames {
            agent: "agent-model".to_owned(),
            replyer: Some("replyer-model".to_owned()),
            title: Some("title-model".to_owned()),
        },
        timeout_secs: 5,
        max_retries: 2,
        retry_initial_delay_ms: 10,
        retry_max_delay_secs: 1,
        ..LlmConfig::default()
    }
}

/// Matches every Chat Completions call.
pub fn completions() -> MockBuilder {
    Mock::given(method("POST")).and(path("/v1/chat/completions"))
}

/// A non-streamed completion body around one assistant `message`.
pub fn completion(message: Value, finish_reason: Value) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "whatever",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    })
}

/// A server-sent-events body: one `data:` event per chunk.
pub fn sse(chunks: &[Value], done: bool) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    body
}

/// A streamed chunk with one delta.
pub fn delta(delta: Value, finish_reason: Value) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })
}

pub fn user_request(purpose: ModelPurpose, text: &str) -> ChatRequest {
    ChatRequest::new(purpose, vec![ChatMessage::user(text)])
}

/// The JSON bodies of all requests the server received.
pub async fn received_bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| r.body_json::<Value>().unwrap())
        .collect()
}
