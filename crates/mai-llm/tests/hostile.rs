//! Hostile answers from a loopback fake server: bodies nested 10,000 deep, bodies over the size
//! limit, replies with 10,000 tool calls, megabyte error messages. Each ends in a bounded
//! response or a clear, short, non-retried error — never a crash, a hang or unbounded memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use mai_core::model::{ChatModel, ModelError, ModelPurpose};
use mai_llm::{MAX_BODY_BYTES, OpenAiClient};
use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

async fn answer_with(body: impl Into<Vec<u8>>, content_type: &str) -> (MockServer, OpenAiClient) {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_raw(body.into(), content_type))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();
    (server, client)
}

async fn requests(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

#[tokio::test]
async fn a_body_nested_ten_thousand_deep_is_a_clear_error_not_retried() {
    let body = format!(
        r#"{{"choices": [{{"message": {{"content": {}}}}}]}}"#,
        nested(10_000)
    );
    let (server, client) = answer_with(body, "application/json").await;

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "hi"))
        .await
        .unwrap_err();

    let ModelError::InvalidResponse { detail, .. } = &error else {
        panic!("expected an invalid response, got {error:?}");
    };
    assert!(detail.contains("recursion limit exceeded"), "{detail}");
    assert!(error.to_string().chars().count() < 600, "{error}");
    assert_eq!(requests(&server).await, 1, "a broken body is not retried");
}

#[tokio::test]
async fn a_streamed_chunk_nested_ten_thousand_deep_is_a_clear_error() {
    let body = format!(
        "data: {{\"choices\":[{{\"delta\":{{\"content\":{}}}}}]}}\n\n",
        nested(10_000)
    );
    let (_server, client) = answer_with(body, "text/event-stream").await;

    let error = client
        .complete_streaming(&user_request(ModelPurpose::Agent, "hi"), &mut |_| {})
        .await
        .unwrap_err();

    assert!(
        matches!(&error, ModelError::InvalidResponse { detail, .. } if detail.contains("recursion limit")),
        "{error:?}"
    );
    assert!(error.to_string().chars().count() < 600, "{error}");
}

#[tokio::test]
async fn a_body_over_the_size_limit_is_refused_without_reading_it_all() {
    // Valid JSON, so only the size can be the reason.
    let content = "x".repeat(MAX_BODY_BYTES);
    let body = completion(
        json!({"role": "assistant", "content": content}),
        json!("stop"),
    );
    let (server, client) =
        answer_with(serde_json::to_vec(&body).unwrap(), "application/json").await;

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "hi"))
        .await
        .unwrap_err();

    assert!(
        matches!(&error, ModelError::InvalidResponse { detail, .. } if detail.contains("larger than 8388608 bytes")),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    assert_eq!(requests(&server).await, 1);
}

#[tokio::test]
async fn ten_thousand_tool_calls_are_parsed_the_engine_bounds_how_many_run() {
    let calls: Vec<Value> = (0..10_000)
        .map(|i| {
            json!({"id": format!("c{i}"), "type": "function",
                   "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}})
        })
        .collect();
    let body = completion(
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
        json!("tool_calls"),
    );
    let (_server, client) =
        answer_with(serde_json::to_vec(&body).unwrap(), "application/json").await;

    let response = client
        .complete(&user_request(ModelPurpose::Agent, "hi"))
        .await
        .unwrap();

    assert_eq!(response.message.tool_calls.len(), 10_000);
    assert_eq!(response.message.tool_calls[9_999].id, "c9999");
}

#[tokio::test]
async fn a_megabyte_provider_error_message_is_cut() {
    let body = json!({"error": {"message": "E".repeat(1024 * 1024), "code": 400}});
    let (_server, client) =
        answer_with(serde_json::to_vec(&body).unwrap(), "application/json").await;

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "hi"))
        .await
        .unwrap_err();

    let ModelError::Provider { message, retryable } = &error else {
        panic!("expected a provider error, got {error:?}");
    };
    assert!(!retryable);
    assert!(
        message.chars().count() <= 501,
        "{} chars",
        message.chars().count()
    );
}

#[tokio::test]
async fn a_megabyte_error_status_body_is_cut() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(400).set_body_string("Z".repeat(4 * 1024 * 1024)))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "hi"))
        .await
        .unwrap_err();

    assert!(
        matches!(error, ModelError::Status { status: 400, .. }),
        "{error:?}"
    );
    assert!(error.to_string().chars().count() < 1_000, "{error}");
}
