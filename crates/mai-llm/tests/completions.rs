//! Non-streamed calls against a loopback fake server: what is sent, and how real provider answers
//! (including their quirks) are read.

mod common;

use common::*;
use mai_core::model::{
    ChatMessage, ChatModel, ChatRequest, FinishReason, ModelError, ModelPurpose, ToolCall,
    ToolSpec, Usage,
};
use mai_llm::{LlmConfig, OpenAiClient};
use serde_json::{Value, json};
use wiremock::matchers::header;
use wiremock::{MockServer, ResponseTemplate};

#[tokio::test]
async fn text_answer_with_usage_is_returned() {
    let server = MockServer::start().await;
    let mut body = completion(
        json!({"role": "assistant", "content": "Hello!"}),
        json!("stop"),
    );
    body["usage"] = json!({"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11});
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .expect(1)
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let response = client
        .complete(&user_request(ModelPurpose::Agent, "hi"))
        .await
        .unwrap();

    assert_eq!(response.message, ChatMessage::assistant("Hello!"));
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(
        response.usage,
        Some(Usage {
            prompt_tokens: 9,
            completion_tokens: 2,
            total_tokens: 11,
            cached_tokens: 0,
        })
    );
}

#[tokio::test]
async fn tool_calls_with_string_object_invalid_arguments_and_missing_ids() {
    let server = MockServer::start().await;
    let message = json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [
            {"id": "call_abc", "type": "function",
             "function": {"name": "create_subtask", "arguments": "{\"intent\":\"check disk\"}"}},
            // Ollama-style: arguments as an object, and no id.
            {"type": "function", "function": {"name": "list_my_tasks", "arguments": {"all": true}}},
            // Invalid JSON from the model is kept raw for the tool gate to report.
            {"id": "", "type": "function", "function": {"name": "fetch", "arguments": "{\"url\": "}},
        ],
    });
    // No finish_reason and no usage at all.
    let mut body = completion(message, Value::Null);
    body["choices"][0]
        .as_object_mut()
        .unwrap()
        .remove("finish_reason");
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let response = client
        .complete(&user_request(ModelPurpose::Agent, "go"))
        .await
        .unwrap();

    assert_eq!(response.message.content, "");
    assert_eq!(
        response.message.tool_calls,
        vec![
            ToolCall::new(
                "call_abc",
                "create_subtask",
                json!({"intent": "check disk"})
            ),
            ToolCall::new("call_1", "list_my_tasks", json!({"all": true})),
            ToolCall::new("call_2", "fetch", Value::String("{\"url\": ".into())),
        ]
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, None);
}

#[tokio::test]
async fn deepseek_reasoning_content_is_kept() {
    let server = MockServer::start().await;
    let message = json!({
        "role": "assistant",
        "content": "42",
        "reasoning_content": "The user asks for the answer; it is 42.",
    });
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(message, json!("stop"))))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let response = client
        .complete(&user_request(ModelPurpose::Agent, "answer?"))
        .await
        .unwrap();

    assert_eq!(response.message.content, "42");
    assert_eq!(
        response.message.reasoning_content.as_deref(),
        Some("The user asks for the answer; it is 42.")
    );
}

#[tokio::test]
async fn each_purpose_uses_its_configured_model() {
    let server = MockServer::start().await;
    completions()
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"content": "ok"}), json!("stop"))),
        )
        .expect(3)
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    for purpose in [
        ModelPurpose::Agent,
        ModelPurpose::Replyer,
        ModelPurpose::Title,
    ] {
        client.complete(&user_request(purpose, "x")).await.unwrap();
    }

    let models: Vec<Value> = received_bodies(&server)
        .await
        .into_iter()
        .map(|b| b["model"].clone())
        .collect();
    assert_eq!(
        models,
        vec![
            json!("agent-model"),
            json!("replyer-model"),
            json!("title-model")
        ]
    );
}

#[tokio::test]
async fn authorization_header_carries_the_api_key() {
    let server = MockServer::start().await;
    completions()
        .and(header(
            "authorization",
            format!("Bearer {API_KEY}").as_str(),
        ))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"content": "ok"}), json!("stop"))),
        )
        .expect(1)
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    // Only the mock requiring the header answers 200; without it the fake server says 404.
    let response = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap();
    assert_eq!(response.message.content, "ok");
}

#[tokio::test]
async fn no_authorization_header_without_an_api_key() {
    let server = MockServer::start().await;
    completions()
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"content": "ok"}), json!("stop"))),
        )
        .mount(&server)
        .await;
    let client = OpenAiClient::new(LlmConfig {
        api_key: None,
        ..config(&server)
    })
    .unwrap();

    client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap();

    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].headers.get("authorization").is_none());
}

#[tokio::test]
async fn request_carries_tools_history_and_sampling_settings() {
    let server = MockServer::start().await;
    completions()
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"content": "done"}), json!("stop"))),
        )
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();
    let request = ChatRequest::new(
        ModelPurpose::Agent,
        vec![
            ChatMessage::system("You run tasks."),
            ChatMessage::user("disk?"),
            ChatMessage::assistant_with_tool_calls(
                "",
                vec![ToolCall::new(
                    "call_0",
                    "run_command",
                    json!({"cmd": "df -h"}),
                )],
            ),
            ChatMessage::tool_result("call_0", "{\"success\":true,\"output\":\"50%\"}"),
        ],
    )
    .with_tools(vec![ToolSpec {
        name: "run_command".into(),
        description: "Run a shell command".into(),
        parameters: json!({"type": "object", "properties": {"cmd": {"type": "string"}}}).into(),
    }])
    .with_temperature(0.25)
    .with_max_tokens(256);

    client.complete(&request).await.unwrap();

    let body = &received_bodies(&server).await[0];
    assert_eq!(body["temperature"], json!(0.25));
    assert_eq!(body["max_tokens"], json!(256));
    assert!(body.get("stream").is_none(), "{body}");
    assert_eq!(body["tools"][0]["function"]["name"], "run_command");
    assert_eq!(body["messages"][2]["content"], Value::Null);
    assert_eq!(
        body["messages"][2]["tool_calls"][0]["function"]["arguments"],
        "{\"cmd\":\"df -h\"}"
    );
    assert_eq!(body["messages"][3]["tool_call_id"], "call_0");
    assert_eq!(body["messages"][3]["role"], "tool");
}

#[tokio::test]
async fn a_success_status_with_an_html_body_is_an_invalid_response() {
    let server = MockServer::start().await;
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_raw("<html>login</html>", "text/html"))
        .expect(1)
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let error = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap_err();

    assert!(
        matches!(error, ModelError::InvalidResponse { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("[llm].base_url"), "{text}");
    assert!(text.contains("<html>login"), "{text}");
}

#[tokio::test]
async fn multi_part_content_is_joined() {
    let server = MockServer::start().await;
    let message =
        json!({"content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]});
    completions()
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(message, json!("stop"))))
        .mount(&server)
        .await;
    let client = OpenAiClient::new(config(&server)).unwrap();

    let response = client
        .complete(&user_request(ModelPurpose::Agent, "x"))
        .await
        .unwrap();
    assert_eq!(response.message.content, "Hello");
}
