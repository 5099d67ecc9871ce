//! Shared by the binary's integration tests: a fake OpenAI-compatible model server on loopback
//! and the real `mai-agent` binary configured to use it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// How many agent calls the fake model has had; tests wait on it instead of polling.
#[derive(Debug)]
pub struct Calls(tokio::sync::watch::Sender<usize>);

impl Default for Calls {
    fn default() -> Self {
        Calls(tokio::sync::watch::Sender::new(0))
    }
}

impl Calls {
    /// Counts one call (for a test's own fake model).
    pub fn arrived(&self) {
        self.0.send_modify(|n| *n += 1);
    }

    pub fn count(&self) -> usize {
        *self.0.borrow()
    }

    /// Waits (bounded) until more than `n` calls have arrived.
    pub async fn wait_past(&self, n: usize) {
        let mut calls = self.0.subscribe();
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            calls.wait_for(|c| *c > n),
        )
        .await
        .expect("the model was never called")
        .unwrap();
    }
}

/// Answers chat completions by rule: titles and polish by model name, agent turns by `script`,
/// which sees how many tool results the conversation already has.
pub struct FakeModel<F: Fn(usize, &Value) -> Value + Send + Sync> {
    script: F,
    agent_calls: Arc<Calls>,
    /// How long each answer takes (a model that thinks, so a task stays running a while).
    pace: std::time::Duration,
}

impl<F: Fn(usize, &Value) -> Value + Send + Sync> Respond for FakeModel<F> {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let model = body["model"].as_str().unwrap();
        let message = match model {
            "title-model" => json!({"role": "assistant", "content": "Test title"}),
            "polish-model" => json!({"role": "assistant", "content": "Polished reply"}),
            _ => {
                self.agent_calls.arrived();
                let results = body["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|m| m["role"] == "tool")
                    .count();
                (self.script)(results, &body)
            }
        };
        ResponseTemplate::new(200).set_delay(self.pace).set_body_json(json!({
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message,
                         "finish_reason": if message.get("tool_calls").is_some() { "tool_calls" } else { "stop" }}],
            "usage": usage_of(model),
        }))
    }
}

/// The `usage` the fake model reports for each call of `model`: fixed figures, so tests can
/// assert sums exactly ([`AGENT_USAGE`], [`TITLE_USAGE`], [`POLISH_USAGE`]).
pub fn usage_of(model: &str) -> Value {
    let (prompt, completion, cached) = match model {
        "title-model" => TITLE_USAGE,
        "polish-model" => POLISH_USAGE,
        _ => AGENT_USAGE,
    };
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt + completion,
           "prompt_tokens_details": {"cached_tokens": cached}})
}

/// (prompt, completion, cached) tokens of each agent call of the fake model.
pub const AGENT_USAGE: (u64, u64, u64) = (100, 10, 40);
/// ... of each title call.
pub const TITLE_USAGE: (u64, u64, u64) = (7, 3, 0);
/// ... of each polish call.
pub const POLISH_USAGE: (u64, u64, u64) = (11, 5, 2);

pub fn tool_call(id: &str, name: &str, args: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]})
}

/// The content of the last tool result in a model request's `body`.
pub fn last_tool_result(body: &Value) -> String {
    let messages = body["messages"].as_array().expect("a request has messages");
    let result = messages.iter().rev().find(|m| m["role"] == "tool");
    let content = result.expect("a tool result")["content"].as_str();
    content.expect("a text tool result").to_owned()
}

/// A chat completion answering `body` with the assistant `message` (its finish reason from
/// whether it calls tools), reporting 1 prompt and 1 completion token.
pub fn completion(body: &Value, message: Value) -> ResponseTemplate {
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }))
}

pub fn answer(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

pub async fn fake_model(
    script: impl Fn(usize, &Value) -> Value + Send + Sync + 'static,
) -> (MockServer, Arc<Calls>) {
    paced_fake_model(std::time::Duration::ZERO, script).await
}

/// [`fake_model`] whose every answer takes `pace`.
pub async fn paced_fake_model(
    pace: std::time::Duration,
    script: impl Fn(usize, &Value) -> Value + Send + Sync + 'static,
) -> (MockServer, Arc<Calls>) {
    let server = MockServer::start().await;
    let agent_calls = Arc::new(Calls::default());
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(FakeModel {
            script,
            agent_calls: agent_calls.clone(),
            pace,
        })
        .mount(&server)
        .await;
    (server, agent_calls)
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mai-agent"))
}

/// The binary with a data dir and the fake server configured through the environment.
pub fn mai(data_dir: &Path, server: &MockServer) -> Command {
    let mut command = Command::new(binary());
    command
        .arg("--data-dir")
        .arg(data_dir)
        .env("MAI_AGENT__LLM__BASE_URL", format!("{}/v1", server.uri()))
        .env("MAI_AGENT__LLM__API_KEY", "test-key")
        .env("MAI_AGENT__LLM__MODEL", "agent-model")
        .env("MAI_AGENT__LLM__MODELS__TITLE", "title-model")
        .env("MAI_AGENT__POLISH__ENABLED", "false")
        .env_remove("MAI_AGENT_CONFIG");
    command
}

/// A running `mai-agent serve`: its stderr lines arrive on a channel, so tests wait for what it
/// says (the banner, "config reloaded", "stopped") instead of sleeping.
pub struct Served {
    pub child: std::process::Child,
    /// What the person at the terminal types (the console chat, when enabled).
    pub stdin: Option<std::process::ChildStdin>,
    pub base: String,
    lines: std::sync::mpsc::Receiver<String>,
    pub log: Arc<std::sync::Mutex<Vec<String>>>,
    /// Notified (one stored permit) whenever a line reaches `log`: wait on it instead of
    /// polling the log.
    pub line_added: Arc<tokio::sync::Notify>,
}

impl Served {
    /// Starts `command` (already given `serve --listen 127.0.0.1:0` and its config) and waits
    /// for the banner with the address. stdout (what the console chat prints, `mai> …`) and
    /// stderr (logs) both arrive as lines.
    pub fn start(mut command: Command) -> Served {
        use std::io::BufRead;
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().expect("mai-agent serve starts");
        let (tx, lines) = std::sync::mpsc::channel();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let line_added = Arc::new(tokio::sync::Notify::new());
        let stdout: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().unwrap());
        let stderr: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().unwrap());
        for pipe in [stdout, stderr] {
            let (tx, keep, added) = (tx.clone(), log.clone(), line_added.clone());
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                    keep.lock().unwrap().push(line.clone());
                    added.notify_one();
                    let _ = tx.send(line);
                }
            });
        }
        let stdin = child.stdin.take();
        let mut served = Served {
            child,
            stdin,
            base: String::new(),
            lines,
            log,
            line_added,
        };
        let banner = served.wait_line("the banner", |l| l.contains("serving on http://"));
        let address = banner
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap();
        served.base = format!("http://{address}");
        served
    }

    /// The next stderr line matching `pred` (bounded: a hang fails the test with the log).
    pub fn wait_line(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if pred(&line) => return line,
                Ok(_) => {}
                Err(_) => panic!(
                    "mai-agent serve never said {what}; its log:\n{}",
                    self.log.lock().unwrap().join("\n")
                ),
            }
        }
    }

    /// Waits until the log has a line containing `needle`, without blocking the runtime
    /// (bounded: a hang fails the test with the log).
    pub async fn wait_log(served: &Served, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if let Some(line) = served
                .log
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if tokio::time::timeout(left, served.line_added.notified())
                .await
                .is_err()
            {
                panic!(
                    "serve never logged `{needle}`: {:?}",
                    served.log.lock().unwrap()
                );
            }
        }
    }

    /// SIGTERM, then the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prints the logs of the mai-agent processes when the test fails.
pub struct DumpOnPanic(pub Vec<Arc<std::sync::Mutex<Vec<String>>>>);

impl Drop for DumpOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (run, log) in self.0.iter().enumerate() {
                let log = log.lock().unwrap_or_else(|p| p.into_inner());
                eprintln!("mai-agent's log (run {}):\n{}", run + 1, log.join("\n"));
            }
        }
    }
}

/// The tasks of the served instance at `base` that are not finished yet.
pub async fn active_tasks(client: &reqwest::Client, base: &str) -> Vec<serde_json::Value> {
    let url =
        format!("{base}/v1/tasks?status=scheduled,pending,running,waiting_input,paused&limit=500");
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200, "{url}");
    let mut list: serde_json::Value = response.json().await.unwrap();
    match list["tasks"].take() {
        serde_json::Value::Array(tasks) => tasks,
        other => panic!("{url}: no task list in {other}"),
    }
}

/// The record of task `id` (`GET /v1/tasks/{id}`) of the served instance at `base`.
pub async fn task_record(client: &reqwest::Client, base: &str, id: &str) -> serde_json::Value {
    let response = client
        .get(format!("{base}/v1/tasks/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "task {id} lost");
    response.json().await.unwrap()
}

/// The live event stream (`GET /v1/events`) of the served instance at `base`.
pub async fn events(client: &reqwest::Client, base: &str) -> reqwest::Response {
    let response = client
        .get(format!("{base}/v1/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response
}

/// `mai-agent [--config CONFIG] serve` on a free loopback port, using the fake model.
pub fn serve_command(data_dir: &Path, server: &MockServer, config: Option<&Path>) -> Command {
    let mut command = mai(data_dir, server);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command.args(["serve", "--listen", "127.0.0.1:0"]);
    command
}

/// Creates a task in the console chat through the HTTP API; asserts it was created (201) and
/// returns its id.
pub async fn create_console_task(client: &reqwest::Client, base: &str, intent: &str) -> String {
    create_with(client, base, json!({"intent": intent})).await
}

/// Creates a task in the console chat from `fields` (the intent and any other field of the
/// API); asserts it was created (201) and returns its id.
pub async fn create_with(client: &reqwest::Client, base: &str, mut fields: Value) -> String {
    fields["stream_id"] = json!("console:local");
    fields["platform"] = json!("console");
    let response = client
        .post(format!("{base}/v1/tasks"))
        .json(&fields)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}
