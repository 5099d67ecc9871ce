//! Streamed calls (`stream: true`) against a loopback fake server: deltas handed out as they
//! arrive, tool calls assembled from fragments, truncation detected and retried.

mod common;

use std::time::Duration;

use common::*;
use mai_core::model::{
    ChatModel, ChatResponse, FinishReason, ModelError, ModelPurpose, StreamDelta, ToolCall, Usage,
};
use mai_llm::{LlmConfig, OpenAiClient};
use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

fn event_stream(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

async fn stream_call(
    client: &OpenAiClient,
) -> (Result<ChatResponse, ModelError>, Vec<StreamDelta>) {
    let mut deltas = Vec::new();
    let result = client
        .complete_streaming(&user_request(ModelPurpose::Agent, "x"), &mut |d| {
            deltas.push(d)
        })
        .await;
    (result, deltas)
}

#[tokio::test]
async fn text_and_reasoning_deltas_arrive_in_order_and_assemble() {
    let server = MockServer::start().await;
    let body = sse(
        &[
            delta(
                json!({"role": "assistant", "content": null, "reasoning_content": "Think"}),
                Value::Null,
            ),
            delta(json!({"reasoning_content": "ing."}), Value::Null),
            delta(json!({"content": "Hel"}), Value::Null),
            delta(json!({"content": "lo"}), Value::Null),
            delta(json!({}), json!("stop")),
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
        ],
        true,
    );
    completions()
        .respond_with(event_stream(body))
        .expect(1)
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let (result, deltas) = stream_call(&client).await;
    let response = result.unwrap();

    assert_eq!(
        deltas,
        vec![
            StreamDelta::Reasoning("Think".into()),
            StreamDelta::Reasoning("ing.".into()),
            StreamDelta::Text("Hel".into()),
            StreamDelta::Text("lo".into()),
        ]
    );
    assert_eq!(response.message.content, "Hello");
    assert_eq!(
        response.message.reasoning_content.as_deref(),
        Some("Thinking.")
    );
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(
        response.usage,
        Some(Usage {
            prompt_tokens: 5,
            completion_tokens: 2,
            total_tokens: 7,
            cached_tokens: 0,
        })
    );
    let body = &received_bodies(&server).await[0];
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["model"], "agent-model");
}

#[tokio::test]
async fn tool_call_deltas_split_across_chunks_are_assembled() {
    let server = MockServer::start().await;
    let call = |index: u64, extra: Value| {
        let mut call = json!({"index": index});
        call.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        delta(json!({"tool_calls": [call]}), Value::Null)
    };
    let body = sse(
        &[
            delta(json!({"role": "assistant", "content": null}), Value::Null),
            // Call 0: id and name first, arguments split in the middle of a key and a value.
            call(
                0,
                json!({"id": "call_x1", "type": "function", "function": {"name": "create_subtask", "arguments": ""}}),
            ),
            call(0, json!({"function": {"arguments": "{\"int"}})),
            // Call 1 starts before call 0 is finished and never gets an id.
            call(
                1,
                json!({"type": "function", "function": {"name": "list_my_tasks", "arguments": "{}"}}),
            ),
            call(0, json!({"function": {"arguments": "ent\": \"check "}})),
            call(0, json!({"function": {"arguments": "disk\"}"}})),
            delta(json!({}), json!("tool_calls")),
        ],
        true,
    );
    completions()
        .respond_with(event_stream(body))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let (result, deltas) = stream_call(&client).await;
    let response = result.unwrap();

    assert_eq!(
        response.message.tool_calls,
        vec![
            ToolCall::new("call_x1", "create_subtask", json!({"intent": "check disk"})),
            ToolCall::new("call_1", "list_my_tasks", json!({})),
        ]
    );
    assert_eq!(response.message.content, "");
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, None);
    assert!(
        deltas.is_empty(),
        "tool-call fragments are not text: {deltas:?}"
    );
}

#[tokio::test]
async fn truncated_stream_is_a_retryable_error() {
    let server = MockServer::start().await;
    // The connection ends mid-answer: no finish_reason, no [DONE].
    let body = sse(
        &[delta(json!({"content": "The disk is at "}), Value::Null)],
        false,
    );
    completions()
        .respond_with(event_stream(body))
        .expect(1)
        .mount(&server)
        .await;
    let client = OpenAiClient::new(LlmConfig {
        max_retries: 0,
        ..config(&server)
    })
    .unwrap();

    let (result, deltas) = stream_call(&client).await;
    let error = result.unwrap_err();

    assert!(
        matches!(error, ModelError::TruncatedStream { .. }),
        "{error:?}"
    );
    assert!(error.is_retryable());
    assert!(
        error.to_string().contains("ended before it was complete"),
        "{error}"
    );
    assert_eq!(deltas, vec![StreamDelta::Text("The disk is at ".into())]);
}

#[tokio::test]
async fn truncated_stream_is_retried_and_the_consumer_told_to_restart() {
    let server = MockServer::start().await;
    completions()
        .respond_with(event_stream(sse(
            &[delta(json!({"content": "The disk"}), Value::Null)],
            false,
        )))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    completions()
        .respond_with(event_stream(sse(
            &[delta(
                json!({"content": "The disk is at 50%."}),
                json!("stop"),
            )],
            true,
        )))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let (result, deltas) = stream_call(&client).await;

    assert_eq!(result.unwrap().message.content, "The disk is at 50%.");
    assert_eq!(
        deltas,
        vec![
            StreamDelta::Text("The disk".into()),
            StreamDelta::Restart,
            StreamDelta::Text("The disk is at 50%.".into()),
        ]
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn finish_reason_without_done_marker_is_complete() {
    let server = MockServer::start().await;
    completions()
        .respond_with(event_stream(sse(
            &[delta(json!({"content": "ok"}), json!("stop"))],
            false,
        )))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let (result, _) = stream_call(&client).await;
    assert_eq!(result.unwrap().message.content, "ok");
}

#[tokio::test]
async fn done_marker_without_finish_reason_is_complete() {
    let server = MockServer::start().await;
    completions()
        .respond_with(event_stream(sse(
            &[delta(json!({"content": "ok"}), Value::Null)],
            true,
        )))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let (result, _) = stream_call(&client).await;
    let response = result.unwrap();
    assert_eq!(response.message.content, "ok");
    assert_eq!(response.finish_reason, FinishReason::Stop);
}

#[tokio::test]
async fn server_ignoring_the_stream_flag_still_works() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({"content": "whole answer"}),
            json!("stop"),
        )))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let (result, deltas) = stream_call(&client).await;

    assert_eq!(result.unwrap().message.content, "whole answer");
    assert_eq!(deltas, vec![StreamDelta::Text("whole answer".into())]);
}

#[tokio::test]
async fn error_status_on_a_stream_is_not_retried_when_permanent() {
    let server = MockServer::start().await;
    completions()
        .respond_with(
            ResponseTemplate::new(401).set_body_json(json!({"error": {"message": "no key"}})),
        )
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let (result, _) = stream_call(&client).await;
    let error = result.unwrap_err();

    assert_eq!(server.received_requests().await.unwrap().len(), 1);
    assert!(
        error.to_string().contains("MAI_AGENT__LLM__API_KEY"),
        "{error}"
    );
}

#[tokio::test]
async fn stream_that_never_starts_times_out() {
    let server = MockServer::start().await;
    completions()
        .respond_with(
            event_stream(sse(
                &[delta(json!({"content": "late"}), json!("stop"))],
                true,
            ))
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

    let (result, deltas) = stream_call(&client).await;

    assert!(
        matches!(
            result,
            Err(ModelError::Timeout {
                timeout_secs: 1,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(deltas.is_empty());
}

#[tokio::test]
async fn error_event_mid_stream_is_reported() {
    let server = MockServer::start().await;
    let body = sse(
        &[
            delta(json!({"content": "partial"}), Value::Null),
            json!({"error": {"message": "content policy violation", "type": "invalid_request_error"}}),
        ],
        false,
    );
    completions()
        .respond_with(event_stream(body))
        .expect(1)
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let (result, _) = stream_call(&client).await;

    assert_eq!(
        result,
        Err(ModelError::Provider {
            message: "content policy violation".into(),
            retryable: false
        })
    );
}
