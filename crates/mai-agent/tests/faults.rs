//! Fault injection against the real `mai-agent serve`:
//!
//! - a model that fails ~30% of its calls (HTTP 500, 429 with `Retry-After: 1`, an answer slower
//!   than `[llm] timeout_secs`): every task ends, completed or failed with the model's error as
//!   its reason; none hangs;
//! - the SQLite file write-locked by another connection (`BEGIN IMMEDIATE`) while tasks are
//!   created and while they run, held until the server is seen at the lock (every create past
//!   its title call; a running task past its tool, at its checkpoint) and asserted to have
//!   held them: every create answers 201, every task completes and delivers once.
//!
//! Channel send failures (retries per `[send] max_retries`, then an honest failure) are tested in
//! `crates/mai-engine/tests/engine.rs`; an MCP stdio server killed mid-call in
//! `crates/mai-mcp/tests/peers.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../testing/sse.rs"]
mod sse;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
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
    Served::start(serve_command(data, model, Some(&path)))
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
        records.push(task_record(client, base, id).await);
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
        ids.push(create_console_task(&client, &served.base, &format!("fault-task f{i}")).await);
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

/// Holds the fake model's answers until the test opens it (the fake model answers on one
/// thread, so one held answer holds every model call behind it). Bounded: a test that fails
/// before opening it does not leave the model hanging.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let open = self.open.lock().unwrap();
        let (open, _) = self
            .opened
            .wait_timeout_while(open, Duration::from_secs(60), |open| !*open)
            .unwrap();
        assert!(*open, "the test never opened the gate");
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

/// How many title calls the fake model has answered; the test waits on it.
struct Titles(tokio::sync::watch::Sender<usize>);

impl Titles {
    /// Waits (bounded) until `n` title calls have arrived.
    async fn wait_for(&self, n: usize) {
        let mut seen = self.0.subscribe();
        tokio::time::timeout(Duration::from_secs(60), seen.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("{} of {n} title calls arrived", *self.0.borrow()))
            .unwrap();
    }
}

struct TitleModel(Arc<Titles>);

impl Respond for TitleModel {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        self.0.0.send_modify(|n| *n += 1);
        completion(&body, answer("Locked title"))
    }
}

/// Answers `model`'s title calls ahead of its other rules, counting them.
async fn count_titles(model: &MockServer) -> Arc<Titles> {
    let titles = Arc::new(Titles(tokio::sync::watch::Sender::new(0)));
    Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::body_partial_json(
            json!({"model": "title-model"}),
        ))
        .respond_with(TitleModel(titles.clone()))
        .with_priority(1)
        .mount(model)
        .await;
    titles
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_write_locked_by_another_connection_delays_but_loses_nothing() {
    let gate = Arc::new(Gate::default());
    let held = gate.clone();
    let (model, calls) = fake_model(move |results, body| {
        let key = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["content"].as_str())
            .find_map(|c| c.split("locked-task ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap()
            .to_owned();
        if key.starts_with('b') {
            held.wait();
        }
        if results == 0 {
            tool_call(&format!("{key}-0"), "list_my_tasks", json!({}))
        } else {
            answer(&format!("done-{key}"))
        }
    })
    .await;
    let titles = count_titles(&model).await;
    let data = tempfile::tempdir().unwrap();
    let mut served = serve(data.path(), &model, "[task]\nmax_concurrent_tasks = 8\n");
    let client = reqwest::Client::new();
    console_chat(&client, &served.base).await;
    // A second connection to the service's database, as another process would hold it.
    let other = rusqlite::Connection::open(data.path().join("mai-agent.db")).unwrap();

    // Locked while tasks are created: the creates wait for the lock, then all answer 201.
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let creates: Vec<_> = (0..10)
        .map(|i| {
            let (client, base) = (client.clone(), served.base.clone());
            tokio::spawn(async move {
                create_console_task(&client, &base, &format!("locked-task a{i}")).await
            })
        })
        .collect();
    // The fault is exercised once every create is past its title call: what is left of a
    // creation is its count and its insert, and the insert needs the lock.
    titles.wait_for(10).await;
    assert!(
        creates.iter().all(|create| !create.is_finished()),
        "a create answered while the database was write-locked"
    );
    other.execute_batch("COMMIT").unwrap();
    let mut ids = Vec::new();
    for create in creates {
        ids.push(create.await.unwrap());
    }

    // Locked again while a task runs: its first model call is held until the lock is taken.
    // (Given titles, these creates make no model call that the held one would block.)
    let before = calls.count();
    for i in 0..10 {
        let intent = format!("locked-task b{i}");
        let fields = json!({"intent": intent, "title": format!("b{i}")});
        ids.push(create_with(&client, &served.base, fields).await);
    }
    calls.wait_past(before).await;
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut events = SseReader::new(events(&client, &served.base).await);
    gate.open();
    // The fault is exercised once the released task is past its tool: what follows a tool
    // result is the checkpoint that records it, which needs the lock.
    let (task, _) = loop {
        let (name, data) = tokio::time::timeout(Duration::from_secs(60), events.next())
            .await
            .expect("no tool result while the database was write-locked")
            .expect("the event stream ended");
        if name == "tool_result" {
            break (data["task_id"].as_str().unwrap().to_owned(), data);
        }
    };
    let record = task_record(&client, &served.base, &task).await;
    assert_ne!(
        record["status"], "completed",
        "a task completed while the database was write-locked: {record}"
    );
    other.execute_batch("COMMIT").unwrap();

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
