//! Failure handling against a loopback fake server: which failures are retried, how long the
//! client waits, and what the final error tells the operator.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mai_core::model::{ChatModel, ModelError, ModelPurpose};
use mai_llm::{LlmConfig, OpenAiClient};
use serde_json::json;
use wiremock::{MockServer, ResponseTemplate};

fn ok_body() -> serde_json::Value {
    completion(
        json!({"role": "assistant", "content": "finally"}),
        json!("stop"),
    )
}

async fn request_count(server: &MockServer) -> usize {
    server.received_requests().await.unwrap_or_default().len()
}

#[tokio::test]
async fn rate_limit_waits_for_retry_after_then_succeeds() {
    let server = MockServer::start().await;
    completions()
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(json!({"error": {"message": "Rate limit reached"}})),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(ok_body()))
        .mount(&server)
        .await;
    // Backoff alone would wait 10–20 ms; only honouring the header explains a 1 s wait.
    let client = OpenAiClient::new(config(&server)).unwrap();

    let started = Instant::now();
    let response = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap();
    let waited = started.elapsed();

    assert_eq!(response.message.content, "finally");
    assert_eq!(request_count(&server).await, 2);
    assert!(waited >= Duration::from_secs(1), "waited only {waited:?}");
    assert!(waited < Duration::from_secs(4), "waited {waited:?}");
}

#[tokio::test]
async fn retry_after_longer_than_the_limit_fails_at_once() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "3600"))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap_err();

    assert_eq!(request_count(&server).await, 1);
    assert_eq!(error.retry_after(), Some(Duration::from_secs(3600)));
    assert!(
        error.to_string().contains("429 Too Many Requests"),
        "{error}"
    );
}

#[tokio::test]
async fn server_error_is_retried_then_succeeds() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(500).set_body_string("upstream exploded"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(ok_body()))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let response = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap();

    assert_eq!(response.message.content, "finally");
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn persistent_server_error_gives_up_after_max_retries() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(503).set_body_string("maintenance"))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap(); // max_retries = 2

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap_err();

    assert_eq!(request_count(&server).await, 3);
    assert!(
        matches!(error, ModelError::Status { status: 503, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("maintenance"), "{error}");
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_says_to_check_the_key() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}
        })))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap_err();

    assert_eq!(request_count(&server).await, 1);
    assert!(!error.is_retryable());
    let text = error.to_string();
    assert!(text.contains(&server.uri()), "{text}");
    assert!(text.contains("401 Unauthorized"), "{text}");
    assert!(text.contains("Incorrect API key provided"), "{text}");
    assert!(
        text.contains("[llm].api_key / MAI_AGENT__LLM__API_KEY"),
        "{text}"
    );
    assert!(
        !text.contains(API_KEY),
        "the key itself must not leak: {text}"
    );
}

#[tokio::test]
async fn bad_request_is_not_retried() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "error": {"message": "model `agent-model` does not support tools"}
        })))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap_err();

    assert_eq!(request_count(&server).await, 1);
    let text = error.to_string();
    assert!(text.contains("(model agent-model) answered 400"), "{text}");
    assert!(text.contains("does not support tools"), "{text}");
}

#[tokio::test]
async fn request_timeout_is_reported_with_the_setting_to_change() {
    let server = MockServer::start().await;
    completions()
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(ok_body())
                .set_delay(Duration::from_secs(10)),
        )
        .mount(&server)
        .await;
    let client = OpenAiClient::new(LlmConfig {
        timeout_secs: 1,
        max_retries: 0,
        ..config(&server)
    })
    .unwrap();

    let started = Instant::now();
    let error = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap_err();

    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(
            error,
            ModelError::Timeout {
                timeout_secs: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_retryable());
    assert!(error.to_string().contains("[llm].timeout_secs"), "{error}");
}

#[tokio::test]
async fn timeouts_are_retried() {
    let server = MockServer::start().await;
    completions()
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(ok_body())
                .set_delay(Duration::from_secs(10)),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(ok_body()))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(LlmConfig {
        timeout_secs: 1,
        ..config(&server)
    })
    .unwrap();

    let response = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap();

    assert_eq!(response.message.content, "finally");
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn a_refused_connection_fails_at_once_without_retries_naming_base_url() {
    // A port that was just free: nothing listens there, so the connection is refused.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = OpenAiClient::new(LlmConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        max_retries: 3,
        // Were it retried, the backoff alone would outlast the bound below.
        retry_initial_delay_ms: 2_000,
        ..LlmConfig::default()
    })
    .unwrap();

    let started = std::time::Instant::now();
    let error = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap_err();

    assert!(
        started.elapsed() < std::time::Duration::from_millis(1_500),
        "no retries: {:?}",
        started.elapsed()
    );
    assert!(matches!(error, ModelError::Unreachable { .. }), "{error:?}");
    assert!(!error.is_retryable());
    assert!(
        error.to_string().contains("is the model server running?"),
        "{error}"
    );
    let text = error.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("[llm].base_url"), "{text}");
}

#[tokio::test]
async fn provider_error_inside_a_success_body_is_retried_when_transient() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "error": {"message": "Upstream overloaded", "code": 502}
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(ok_body()))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let response = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap();

    assert_eq!(response.message.content, "finally");
    assert_eq!(request_count(&server).await, 2);
}
