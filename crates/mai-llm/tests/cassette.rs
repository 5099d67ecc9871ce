//! Scripted, recorded and replayed models: what a cassette holds and how replay fails when the
//! run leaves the recording.

use std::sync::Arc;

use mai_core::model::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, ModelError, ModelPurpose, StreamDelta,
    ToolCall, ToolSpec,
};
use mai_llm::{CassetteEntry, CassetteOutcome, RecordingModel, ReplayModel, ScriptedModel};
use serde_json::json;

fn request(purpose: ModelPurpose, text: &str) -> ChatRequest {
    ChatRequest::new(
        purpose,
        vec![ChatMessage::system("sys"), ChatMessage::user(text)],
    )
}

fn rate_limited() -> ModelError {
    ModelError::Status {
        url: "http://127.0.0.1:1/v1/chat/completions".into(),
        model: "m".into(),
        status: 429,
        reason: "Too Many Requests".into(),
        detail: "slow down".into(),
        retry_after: None,
    }
}

fn script() -> Vec<Result<ChatResponse, ModelError>> {
    vec![
        Ok(ChatResponse::tool_calls(
            "",
            vec![ToolCall::new("call_0", "list_my_tasks", json!({}))],
        )),
        Err(rate_limited()),
        Ok(ChatResponse::text("Two tasks are running.")),
    ]
}

#[tokio::test]
async fn scripted_model_records_the_requests_it_answered() {
    let model = ScriptedModel::new(script());
    let first = request(ModelPurpose::Agent, "what runs?").with_tools(vec![ToolSpec {
        name: "list_my_tasks".into(),
        description: "List".into(),
        parameters: json!({"type": "object"}).into(),
    }]);

    let response = model.complete(&first).await.unwrap();
    assert_eq!(response.message.tool_calls[0].name, "list_my_tasks");
    assert_eq!(model.complete(&first).await, Err(rate_limited()));
    assert_eq!(model.requests(), vec![first.clone(), first]);
    assert_eq!(model.remaining(), 1);
}

#[tokio::test]
async fn recording_then_replaying_gives_the_same_answers_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let calls = [
        request(ModelPurpose::Agent, "what runs?"),
        request(ModelPurpose::Agent, "retry"),
        request(ModelPurpose::Replyer, "polish"),
    ];

    // Recording wraps any model, including a shared `Arc<dyn ChatModel>`.
    let inner: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new(script()));
    let recorder = RecordingModel::create(inner, &path).unwrap();
    let mut recorded = Vec::new();
    for call in &calls {
        recorded.push(recorder.complete(call).await);
    }

    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<CassetteEntry> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0].request.purpose, ModelPurpose::Agent);
    assert_eq!(lines[0].request.messages, 2);
    assert_eq!(lines[0].request.last_content, "what runs?");
    assert_eq!(lines[1].outcome, CassetteOutcome::Error(rate_limited()));
    assert_eq!(lines[2].request.purpose, ModelPurpose::Replyer);

    let replay = ReplayModel::open(&path).unwrap();
    assert_eq!(replay.remaining(), 3);
    for (call, expected) in calls.iter().zip(recorded) {
        assert_eq!(replay.complete(call).await, expected);
    }
    let error = replay
        .complete(&request(ModelPurpose::Agent, "one more"))
        .await
        .unwrap_err();
    assert!(matches!(error, ModelError::Exhausted { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("3 recorded calls"), "{text}");
    assert!(text.contains("re-record"), "{text}");
}

#[tokio::test]
async fn recording_a_streamed_call_passes_deltas_through() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stream.jsonl");
    let recorder = RecordingModel::create(
        ScriptedModel::from_responses([ChatResponse::text("hi there")]),
        &path,
    )
    .unwrap();
    let mut deltas = Vec::new();

    recorder
        .complete_streaming(&request(ModelPurpose::Agent, "hi"), &mut |d| deltas.push(d))
        .await
        .unwrap();

    assert_eq!(deltas, vec![StreamDelta::Text("hi there".into())]);
    assert_eq!(ReplayModel::open(&path).unwrap().remaining(), 1);
}

#[test]
fn malformed_cassette_names_the_line() {
    let good = r#"{"request":{"purpose":"agent","messages":1},"response":{"message":{"role":"assistant","content":"a"},"finish_reason":"stop"}}"#;
    let text = format!("{good}\n\n{good}\n{{\"request\": oops}}\n");

    let error = ReplayModel::parse("broken.jsonl", &text).unwrap_err();

    match &error {
        ModelError::Cassette { path, line, .. } => {
            assert_eq!(path, "broken.jsonl");
            assert_eq!(*line, Some(4));
        }
        other => panic!("expected a cassette error, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .starts_with("cassette broken.jsonl line 4:"),
        "{error}"
    );
}

#[test]
fn missing_cassette_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = ReplayModel::open(dir.path().join("nope.jsonl")).unwrap_err();
    assert!(
        matches!(error, ModelError::Cassette { line: None, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("nope.jsonl"), "{error}");
}

#[tokio::test]
async fn replay_refuses_a_call_for_another_purpose() {
    let text = r#"{"request":{"purpose":"title","messages":1},"response":{"message":{"role":"assistant","content":"Disk check"},"finish_reason":"stop"}}"#;
    let replay = ReplayModel::parse("c.jsonl", text).unwrap();

    let error = replay
        .complete(&request(ModelPurpose::Agent, "x"))
        .await
        .unwrap_err();

    assert!(
        matches!(error, ModelError::Cassette { line: Some(1), .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("diverged"), "{error}");
}
