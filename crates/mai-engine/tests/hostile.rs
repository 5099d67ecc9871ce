//! Hostile model replies through the real HTTP client and a loopback fake server: 10,000 tool
//! calls in one reply, megabyte arguments, arguments and whole bodies nested 10,000 deep. The
//! agent loop survives each: at most the per-round limit of calls runs, oversized or malformed
//! arguments come back to the model as clear refusals, and the task ends with an honest result —
//! an answer, or a failure naming the cause — without a panic or a stack overflow.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use mai_core::clock::SystemClock;
use mai_core::config::{LlmConfig, ModelNames};
use mai_core::role::Role;
use mai_core::task::{TaskId, TaskStatus};
use mai_core::tool::{
    MAX_ARGUMENT_BYTES, ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry,
    Visibility,
};
use mai_engine::CreateTask;
use mai_engine::MAX_TOOL_CALLS_PER_ROUND;
use mai_engine::TaskEvent;
use mai_llm::OpenAiClient;
use serde_json::{Value, json};

/// A loopback OpenAI-compatible server: title requests get a title, agent requests get the
/// scripted bodies in order and then a final answer. Agent request bodies are recorded.
#[derive(Default)]
struct FakeServer {
    script: Mutex<VecDeque<Vec<u8>>>,
    agent_requests: Mutex<Vec<Value>>,
}

fn completion(message: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": null}],
    }))
    .unwrap()
}

fn text(content: &str) -> Vec<u8> {
    completion(json!({"role": "assistant", "content": content}))
}

/// A reply calling `count` once per entry of `arguments` (raw argument strings, as on the wire).
fn calls(arguments: impl IntoIterator<Item = String>) -> Vec<u8> {
    let calls: Vec<Value> = arguments
        .into_iter()
        .enumerate()
        .map(|(i, args)| {
            json!({"id": format!("call-{i}"), "type": "function",
                   "function": {"name": "count", "arguments": args}})
        })
        .collect();
    completion(json!({"role": "assistant", "content": null, "tool_calls": calls}))
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

impl FakeServer {
    async fn start(script: Vec<Vec<u8>>) -> (Arc<FakeServer>, LlmConfig) {
        let server = Arc::new(FakeServer {
            script: Mutex::new(script.into()),
            ..FakeServer::default()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::clone(&server);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let server = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                        let server = Arc::clone(&server);
                        async move {
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            let answer = server.answer(&body);
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(answer)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let config = LlmConfig {
            base_url: format!("http://{addr}/v1"),
            models: ModelNames {
                agent: "agent-model".into(),
                replyer: Some("replyer-model".into()),
                title: Some("title-model".into()),
            },
            max_retries: 0,
            timeout_secs: 30,
            ..LlmConfig::default()
        };
        (server, config)
    }

    fn answer(&self, body: &[u8]) -> Vec<u8> {
        let request: Value = serde_json::from_slice(body).unwrap();
        if request["model"] != "agent-model" {
            return text("A title");
        }
        self.agent_requests.lock().unwrap().push(request);
        self.script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| text("done"))
    }

    fn agent_requests(&self) -> Vec<Value> {
        self.agent_requests.lock().unwrap().clone()
    }
}

/// `count(text?)`: counts its runs.
struct Counter(Arc<AtomicUsize>);

#[async_trait]
impl ToolHandler for Counter {
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(json!({"success": true, "runs": n}))
    }
}

struct Run {
    server: Arc<FakeServer>,
    harness: Harness,
    runs: Arc<AtomicUsize>,
    task: TaskId,
}

/// Runs one user task against `script` until it completes or fails; returns the final status
/// event's reason.
async fn run(script: Vec<Vec<u8>>) -> (Run, TaskStatus, String) {
    let (server, llm) = FakeServer::start(script).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "count",
            "counts",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            Visibility::Discoverable,
            Role::User,
            Arc::new(Counter(Arc::clone(&runs))),
        )
        .unwrap(),
    );
    let model = Arc::new(OpenAiClient::new(llm).unwrap());
    let mut harness =
        Harness::start_with(test_config(), model, registry, Arc::new(SystemClock)).await;
    let task = harness
        .engine
        .create(&caller("user", Role::User, "s"), CreateTask::agent("do it"))
        .await
        .unwrap()
        .id;
    let event = harness
        .wait_for("the task to end", |e| {
            matches!(e, TaskEvent::Status { task_id, status: TaskStatus::Completed | TaskStatus::Failed, .. } if *task_id == task)
        })
        .await;
    let TaskEvent::Status { status, reason, .. } = event else {
        unreachable!()
    };
    let run = Run {
        server,
        harness,
        runs,
        task,
    };
    (run, status, reason)
}

/// The tool results the model saw in its `n`-th agent request.
fn tool_results(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

#[tokio::test]
async fn ten_thousand_tool_calls_in_one_reply_run_at_most_the_per_round_limit() {
    // Each call different, so the loop guard (its own tests) does not stop them.
    let script = vec![calls((0..10_000).map(|i| format!("{{\"text\":\"{i}\"}}")))];

    let (mut run, status, reason) = run(script).await;

    assert_eq!(status, TaskStatus::Completed, "{reason}");
    assert_eq!(run.runs.load(Ordering::SeqCst), MAX_TOOL_CALLS_PER_ROUND);
    let requests = run.server.agent_requests();
    assert_eq!(requests.len(), 2);
    let assistant = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()
        .clone();
    assert_eq!(
        assistant["tool_calls"].as_array().unwrap().len(),
        MAX_TOOL_CALLS_PER_ROUND
    );
    let note = assistant["content"].as_str().unwrap();
    assert!(
        note.contains("asked for 10000 tool calls") && note.contains("other 9968 were dropped"),
        "{note}"
    );
    assert_eq!(tool_results(&requests[1]).len(), MAX_TOOL_CALLS_PER_ROUND);
    run.harness
        .wait_for(
            "the answer",
            |e| matches!(e, TaskEvent::Sent { text, .. } if text == "done"),
        )
        .await;
    // What was checkpointed holds the bounded reply, so a restart resumes the same 32 calls.
    let history = run
        .harness
        .engine
        .history(&caller("user", Role::User, "s"), &run.task.to_string())
        .await
        .unwrap();
    let checkpointed_calls: usize = history
        .entries
        .iter()
        .filter_map(|e| e.payload["tool_calls"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(checkpointed_calls, MAX_TOOL_CALLS_PER_ROUND);
}

#[tokio::test]
async fn megabyte_arguments_are_refused_over_the_limit_and_not_carried_along() {
    let over = json!({"text": "a".repeat(MAX_ARGUMENT_BYTES + 1)}).to_string();
    let under = json!({"text": "b".repeat(1024 * 1024)}).to_string();
    let script = vec![calls([over, under])];

    let (run, status, reason) = run(script).await;

    assert_eq!(status, TaskStatus::Completed, "{reason}");
    assert_eq!(
        run.runs.load(Ordering::SeqCst),
        1,
        "only the 1 MiB call ran"
    );
    let requests = run.server.agent_requests();
    let results = tool_results(&requests[1]);
    assert_eq!(results[0]["success"], false);
    let error = results[0]["error"].as_str().unwrap();
    assert!(
        error.contains("dropped these arguments") && error.contains("over the limit"),
        "{error}"
    );
    assert!(error.len() < 500, "{} bytes", error.len());
    assert_eq!(results[1]["success"], true);
    // The refused megabytes are not sent back every round: only the admitted call's are.
    let size = requests[1].to_string().len();
    assert!(
        size < 1024 * 1024 + 64 * 1024,
        "second request is {size} bytes"
    );
}

#[tokio::test]
async fn arguments_nested_ten_thousand_deep_are_refused_with_the_reason() {
    let script = vec![calls([nested(10_000)])];

    let (run, status, reason) = run(script).await;

    assert_eq!(status, TaskStatus::Completed, "{reason}");
    assert_eq!(run.runs.load(Ordering::SeqCst), 0);
    let results = tool_results(&run.server.agent_requests()[1]);
    let error = results[0]["error"].as_str().unwrap();
    assert!(
        error.contains("not valid JSON") && error.contains("recursion limit exceeded"),
        "{error}"
    );
    assert!(error.len() < 500, "{} bytes", error.len());
}

#[tokio::test]
async fn a_reply_body_nested_ten_thousand_deep_fails_the_task_honestly() {
    let body = format!(r#"{{"choices": [{{"message": {}}}]}}"#, nested(10_000)).into_bytes();

    let (run, status, reason) = run(vec![body]).await;

    assert_eq!(status, TaskStatus::Failed);
    assert!(
        reason.contains("model call failed") && reason.contains("recursion limit exceeded"),
        "{reason}"
    );
    assert!(reason.chars().count() < 1_000, "{reason}");
    assert_eq!(run.runs.load(Ordering::SeqCst), 0);
}
