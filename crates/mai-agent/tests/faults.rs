//! Fault injection against the real `mai-agent serve`:
//!
//! - a model that fails ~30% of its calls (HTTP 500, 429 with `Retry-After: 1`, an answer slower
//!   than `[llm] timeout_secs`): every task ends, completed or failed with the model's error as
//!   its reason; none hangs;
//! - the SQLite file write-locked by another connection (`BEGIN IMMEDIATE`, held ~1.5 s) while
//!   tasks are created and while they run: every create answers 201, every task completes and
//!   delivers once.
//!
//! Channel send failures (retries per `[send] max_retries`, then an honest failure) are tested in
//! `crates/mai-engine/tests/engine.rs`; an MCP stdio server killed mid-call in
//! `crates/mai-mcp/tests/peers.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../testing/sse.rs"]
mod sse;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use sse::SseReader;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn completion(body: &Value, message: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": message,
            "finish_reason": if message.get("tool_calls").is_some() { "tool_calls" } else { "stop" }}],
    }))
}

/// Two rounds of `list_my_tasks`, then `done-<key>` (the key is the intent's last word); every
/// fourth-ish call fails in one of three ways, in a fixed rotation so runs are reproducible.
struct FlakyModel {
    calls: AtomicUsize,
    faults: Arc<AtomicUsize>,
}

impl Respond for FlakyModel {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        // 3 faults in every 10 calls.
        match n % 10 {
            2 => {
                self.faults.fetch_add(1, Ordering::SeqCst);
                return ResponseTemplate::new(500).set_body_string("upstream exploded");
            }
            5 => {
                self.faults.fetch_add(1, Ordering::SeqCst);
                return ResponseTemplate::new(429)
                    .insert_header("Retry-After", "1")
                    .set_body_json(json!({"error": {"message": "slow down"}}));
            }
            8 => {
                self.faults.fetch_add(1, Ordering::SeqCst);
                return completion(&body, answer("too late")).set_delay(Duration::from_secs(30));
            }
            _ => {}
        }
        if body["model"] == "title-model" {
            return completion(&body, answer("Fault title"));
        }
        let messages = body["messages"].as_array().unwrap();
        let results = messages.iter().filter(|m| m["role"] == "tool").count();
        let key = messages
            .iter()
            .filter_map(|m| m["content"].as_str())
            .find_map(|c| c.split("fault-task ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("unknown")
            .to_owned();
        if results < 2 {
            completion(
                &body,
                tool_call(&format!("{key}-{results}"), "list_my_tasks", json!({})),
            )
        } else {
            completion(&body, answer(&format!("done-{key}")))
        }
    }
}

fn serve(data: &std::path::Path, model: &MockServer, config: &str) -> Served {
    let path = data.join("mai-agent.toml");
    std::fs::write(&path, config).unwrap();
    let mut command = mai(data, model);
    command
        .arg("--config")
        .arg(&path)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    Served::start(command)
}

async fn create(client: &reqwest::Client, base: &str, intent: &str) -> String {
    let response = client
        .post(format!("{base}/v1/tasks"))
        .json(&json!({"intent": intent, "stream_id": "console:local", "platform": "console"}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

async fn console_chat(client: &reqwest::Client, base: &str) {
    let said = client
        .post(format!("{base}/v1/messages"))
        .json(&json!({"platform": "console", "user_id": "local", "text": "hi"}))
        .send()
        .await
        .unwrap();
    assert!(said.status().is_success());
}

/// Waits until no task is active (bounded: a hang fails with what is left), then returns every
/// task's record. Looks again whenever the server reports an event (`GET /v1/events`,
/// subscribed before the first look, so no change is missed).
async fn wait_all_done(client: &reqwest::Client, base: &str, ids: &[String]) -> Vec<Value> {
    let mut events = SseReader::new(events(client, base).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = active_tasks(client, base).await;
        if left.is_empty() {
            break;
        }
        let event = tokio::time::timeout_at(deadline, events.next()).await;
        assert!(matches!(event, Ok(Some(_))), "tasks hang: {left:?}");
    }
    let mut records = Vec::new();
    for id in ids {
        let response = client
            .get(format!("{base}/v1/tasks/{id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "task {id} lost");
        records.push(response.json().await.unwrap());
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_failing_30_percent_of_calls_never_hangs_a_task() {
    let model = MockServer::start().await;
    let faults = Arc::new(AtomicUsize::new(0));
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(FlakyModel {
            calls: AtomicUsize::new(0),
            faults: faults.clone(),
        })
        .mount(&model)
        .await;
    let data = tempfile::tempdir().unwrap();
    let served = serve(
        data.path(),
        &model,
        "[llm]\ntimeout_secs = 1\nmax_retries = 1\nretry_initial_delay_ms = 10\n\
         [task]\nmax_concurrent_tasks = 8\n",
    );
    let client = reqwest::Client::new();
    console_chat(&client, &served.base).await;
    let mut ids = Vec::new();
    for i in 0..24 {
        ids.push(create(&client, &served.base, &format!("fault-task f{i}")).await);
    }
    let records = wait_all_done(&client, &served.base, &ids).await;
    let (mut completed, mut failed) = (0, 0);
    for record in &records {
        match record["status"].as_str().unwrap() {
            "completed" => completed += 1,
            "failed" => {
                failed += 1;
                let error = record["metadata"]["error"].as_str().unwrap_or_default();
                assert!(
                    [
                        "500",
                        "429",
                        "did not answer within",
                        "upstream exploded",
                        "slow down"
                    ]
                    .iter()
                    .any(|said| error.contains(said)),
                    "a failure names its cause: {record}"
                );
            }
            other => panic!("task ended {other}: {record}"),
        }
    }
    println!(
        "faults: {} model faults injected, {completed} tasks completed, {failed} failed honestly",
        faults.load(Ordering::SeqCst)
    );
    assert!(faults.load(Ordering::SeqCst) >= 10, "faults were injected");
    assert!(completed > 0, "retries carried most tasks through");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_write_locked_by_another_connection_delays_but_loses_nothing() {
    use sqlx::Connection;
    let (model, calls) = fake_model(|results, body| {
        let key = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["content"].as_str())
            .find_map(|c| c.split("locked-task ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap()
            .to_owned();
        if results == 0 {
            tool_call(&format!("{key}-0"), "list_my_tasks", json!({}))
        } else {
            answer(&format!("done-{key}"))
        }
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let mut served = serve(data.path(), &model, "[task]\nmax_concurrent_tasks = 8\n");
    let client = reqwest::Client::new();
    console_chat(&client, &served.base).await;
    let url = format!("sqlite://{}", data.path().join("mai-agent.db").display());
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();

    // Locked while tasks are created: the creates wait for the lock, then all answer 201.
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let creates: Vec<_> = (0..10)
        .map(|i| {
            let (client, base) = (client.clone(), served.base.clone());
            tokio::spawn(async move { create(&client, &base, &format!("locked-task a{i}")).await })
        })
        .collect();
    // The lock is the fault: it is held for a while whatever the server does.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    let mut ids = Vec::new();
    for create in creates {
        ids.push(create.await.unwrap());
    }

    // Locked again while the next tasks run: wait until they call the model, then lock.
    let before = calls.count();
    for i in 0..10 {
        ids.push(create(&client, &served.base, &format!("locked-task b{i}")).await);
    }
    calls.wait_past(before).await;
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();

    let records = wait_all_done(&client, &served.base, &ids).await;
    for record in &records {
        assert_eq!(record["status"], "completed", "{record}");
    }
    // Each answer reached the console chat exactly once: wait for each line as it is printed.
    let texts: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|batch| (0..10).map(move |i| format!("mai> done-{batch}{i}")))
        .collect();
    let mut seen = std::collections::HashSet::new();
    while seen.len() < texts.len() {
        seen.insert(served.wait_line("every answer", |l| texts.iter().any(|t| t == l)));
    }
    let log = served.log.lock().unwrap().clone();
    let counts: Vec<usize> = texts
        .iter()
        .map(|t| log.iter().filter(|l| *l == t).count())
        .collect();
    assert!(counts.iter().all(|c| *c == 1), "{texts:?} {counts:?}");
    assert!(served.terminate().success());
}
