//! mai-agent inside a real MaiBot (PyPI `maibot`, run offline by `testing/maibot/harness.py`):
//! the bridge plugin copied into MaiBot's `plugins/`, `mai-agent serve` with `[host] kind =
//! "maibot"`, one fake OpenAI-compatible server scripting both MaiBot's planner and mai-agent's
//! agent, and a fake QQ platform on MaiBot's maim_message websocket.
//!
//! The scenario, as people in two QQ groups would live it: a group message mentioning the bot →
//! MaiBot's planner calls `mai_subagent_create` → the task asks a question in the group → the
//! person answers there → the task's answer arrives in the group once; `/mt list` typed in the
//! group is answered there; the second group's planner neither sees nor reads the first group's
//! task; mai-agent SIGKILLed mid-task and restarted → the plugin reconnects → the answer arrives
//! once. A member over a daily budget is told so in the group (`/mt create`), MaiBot's planner
//! is told so (`mai_subagent_create`), and a task crossing it pauses with a notice there.
//! Without an installable MaiBot the test prints SKIP (and fails under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/maibot.rs"]
mod maibot_harness;
#[path = "../../../testing/peers.rs"]
mod shared_peers;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use common::*;
use maibot_harness::*;
use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const GROUP_A: &str = "20002";
const GROUP_B: &str = "30003";
const ALICE: &str = "10001";
const BOB: &str = "10002";
const TOKEN: &str = "bridge-secret";

/// A tool result MaiBot's planner got back from one of our `mai_*` calls.
#[derive(Debug)]
struct ToolResult {
    tool: String,
    content: String,
}

/// The one fake model server. MaiBot's models are named `maibot-*` (harness.py), mai-agent's
/// `agent-model` and `title-model` (common::mai).
struct Script {
    /// Makes tool-call ids unique across every process's restarts.
    nonce: u128,
    seq: AtomicUsize,
    /// MaiBot message ids the planner already acted on (it acts once per message).
    acted: Mutex<HashSet<String>>,
    /// Our `mai_*` call ids → tool name, and which results were already reported.
    issued: Mutex<HashMap<String, String>>,
    reported: Mutex<HashSet<String>>,
    results: Mutex<Sender<ToolResult>>,
    /// When set, the next resumed agent call for task K2 hangs and is announced on `hung`.
    hang_k2: AtomicBool,
    hung: Mutex<Sender<()>>,
}

impl Script {
    fn call_id(&self) -> String {
        format!(
            "call_{}_{}",
            self.nonce,
            self.seq.fetch_add(1, Ordering::SeqCst)
        )
    }

    fn call(&self, name: &str, args: Value) -> Value {
        let id = self.call_id();
        if name.starts_with("mai_") {
            self.issued
                .lock()
                .unwrap()
                .insert(id.clone(), name.to_owned());
        }
        tool_call(&id, name, args)
    }

    /// Reports the results of our `mai_*` calls that this request carries for the first time.
    fn report_results(&self, messages: &[Value]) {
        let issued = self.issued.lock().unwrap();
        for message in messages.iter().filter(|m| m["role"] == "tool") {
            let id = message["tool_call_id"].as_str().unwrap_or_default();
            if let Some(tool) = issued.get(id)
                && self.reported.lock().unwrap().insert(id.to_owned())
            {
                let _ = self.results.lock().unwrap().send(ToolResult {
                    tool: tool.clone(),
                    content: content_text(&message["content"]),
                });
            }
        }
    }

    /// MaiBot's planner: act once on the newest chat message by its keyword, else stop.
    fn maibot(&self, body: &Value) -> Value {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        self.report_results(&messages);
        let tools: Vec<&str> = body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["function"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        if !tools.contains(&"reply") {
            return answer("好的"); // the replyer and utility calls
        }
        let stop = || self.call("stop", json!({}));
        if messages.last().is_some_and(|m| m["role"] == "tool") {
            return stop();
        }
        let Some((msg_id, text)) = newest_chat_message(&messages) else {
            return stop();
        };
        if self.acted.lock().unwrap().contains(&msg_id) {
            return stop();
        }
        let (tool, args) = if let Some(rest) = text.split("TASK ").nth(1) {
            let marker = rest.split_whitespace().next().unwrap_or_default();
            let intent = format!("{marker}: tell the weather for the city the person names");
            ("mai_subagent_create", json!({"intent": intent}))
        } else if let Some(rest) = text.split("STATUS ").nth(1) {
            let id = rest.split_whitespace().next().unwrap_or_default();
            ("mai_subagent_status", json!({"task_id": id}))
        } else if text.contains("LIST") {
            ("mai_subagent_list", json!({}))
        } else if text.contains("HELLO") {
            (
                "reply",
                json!({"msg_id": msg_id, "reply_reference": "greet back"}),
            )
        } else {
            return stop();
        };
        if !tools.contains(&tool) {
            // A deferred tool: discover it first, act on the next round.
            return self.call("tool_search", json!({"query": tool}));
        }
        self.acted.lock().unwrap().insert(msg_id);
        self.call(tool, args)
    }

    /// mai-agent's agent: ask which city, then answer with what it was told.
    fn agent(&self, body: &Value) -> ResponseTemplate {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let all = body["messages"].to_string();
        let marker = if all.contains("K2:") { "K2" } else { "K1" };
        let Some(result) = messages.iter().rev().find(|m| m["role"] == "tool") else {
            let question = format!("Which city for {marker}?");
            return completion(body, self.call("ask_user", json!({"question": question})));
        };
        if marker == "K2" && self.hang_k2.swap(false, Ordering::SeqCst) {
            let _ = self.hung.lock().unwrap().send(());
            return ResponseTemplate::new(200).set_delay(Duration::from_secs(600));
        }
        let reply = content_text(&result["content"]);
        let city = serde_json::from_str::<Value>(&reply)
            .ok()
            .and_then(|v| v["answer"].as_str().map(str::to_owned))
            .unwrap_or(reply);
        completion(
            body,
            answer(&format!("{marker} forecast: {city} sunny 24C")),
        )
    }
}

impl Respond for Script {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let model = body["model"].as_str().unwrap_or_default();
        if model == "title-model" {
            completion(&body, answer("Weather task"))
        } else if model.starts_with("maibot-") {
            completion(&body, self.maibot(&body))
        } else {
            self.agent(&body)
        }
    }
}

/// A message's content as text (a string, or the text parts of a list).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The newest `<message msg_id="…" …>text` block in MaiBot's planner context: (id, text).
fn newest_chat_message(messages: &[Value]) -> Option<(String, String)> {
    messages.iter().rev().find_map(|m| {
        let content = content_text(&m["content"]);
        let start = content.rfind("<message msg_id=\"")?;
        let rest = &content[start + "<message msg_id=\"".len()..];
        let id = rest.split('"').next()?.to_owned();
        let text = rest.split_once('>').map(|(_, t)| t).unwrap_or_default();
        let text = text.split("</message>").next().unwrap_or_default();
        Some((id, text.trim().to_owned()))
    })
}

struct Fixture {
    model: MockServer,
    script: std::sync::Arc<Script>,
    results: Receiver<ToolResult>,
    hung: Receiver<()>,
}

async fn fake_models() -> Fixture {
    let (results_tx, results) = std::sync::mpsc::channel();
    let (hung_tx, hung) = std::sync::mpsc::channel();
    let script = std::sync::Arc::new(Script {
        nonce: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
        seq: AtomicUsize::new(0),
        acted: Mutex::default(),
        issued: Mutex::default(),
        reported: Mutex::default(),
        results: Mutex::new(results_tx),
        hang_k2: AtomicBool::new(false),
        hung: Mutex::new(hung_tx),
    });
    let model = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(Shared(script.clone()))
        .mount(&model)
        .await;
    Fixture {
        model,
        script,
        results,
        hung,
    }
}

struct Shared(std::sync::Arc<Script>);

impl Respond for Shared {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.0.respond(request)
    }
}

/// `mai-agent serve` as the MaiBot host, on a fixed port so a restart keeps the address.
fn serve(data: &std::path::Path, model: &MockServer, port: u16) -> Served {
    serve_with(data, model, port, "")
}

/// [`serve`] with more configuration after the test's own.
fn serve_with(data: &std::path::Path, model: &MockServer, port: u16, extra: &str) -> Served {
    let config = data.join("mai-agent.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nauth_token = \"{TOKEN}\"\n\n[host]\nkind = \"maibot\"\n\n\
             [permission]\nusers = [\"qq:{ALICE}\", \"qq:{BOB}\"]\n{extra}"
        ),
    )
    .unwrap();
    let mut command = mai(data, model);
    command
        .arg("--config")
        .arg(&config)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
    Served::start(command)
}

/// mai-agent's log says a bridge (the plugin) is connected.
fn bridge_connected(line: &str) -> bool {
    let line = line.to_lowercase();
    line.contains("bridge")
        && line.contains("connected")
        && !line.contains("disconnected")
        && !line.contains("not connected")
        && !line.contains("no bridge")
}

fn plugin_dir() -> std::path::PathBuf {
    let dir = std::env::var_os("MAI_MAIBOT_PLUGIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("integrations/maibot/mai_agent_bridge"));
    assert!(
        dir.join("_manifest.json").exists(),
        "the MaiBot plugin is missing at {} (set MAI_MAIBOT_PLUGIN to its folder)",
        dir.display()
    );
    dir
}

fn in_group<'a>(group: &'a str, needle: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |e| e["group_id"] == group && text(e).contains(needle)
}

fn lap(what: &str, since: &mut Instant) {
    eprintln!("timing: {what}: {:.1} s", since.elapsed().as_secs_f64());
    *since = Instant::now();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_maibot_runs_a_task_through_the_bridge_in_its_group_once_even_across_a_sigkill() {
    let Some(python) = maibot_python() else {
        return;
    };
    let mut clock = Instant::now();
    let fixture = fake_models().await;
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut served = serve(data.path(), &fixture.model, port);
    let mut dump = DumpOnPanic(vec![served.log.clone()]);

    let instance = tempfile::tempdir().unwrap();
    let mut maibot = maibot_with_bridge(&python, instance.path(), &fixture, &mut served);
    lap(
        "MaiBot started, plugin loaded, bridge connected",
        &mut clock,
    );
    // The tools the plugin offers MaiBot are the ones this mai-agent serves (no drift).
    let checked = std::process::Command::new(&python)
        .arg(maibot_harness::repo_root().join("integrations/maibot/check_tools.py"))
        .args(["--url", &served.base, "--token", TOKEN])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "check_tools.py: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // Group A: Alice asks; MaiBot's planner creates the task; it asks; she answers; once.
    maibot.say(
        Some(GROUP_A),
        ALICE,
        "Alice",
        "麦麦 TASK K1 what is the weather?",
    );
    let created = fixture
        .results
        .recv_timeout(Duration::from_secs(120))
        .expect("MaiBot's planner never got a result from mai_subagent_create");
    assert_eq!(created.tool, "mai_subagent_create", "{created:?}");
    maibot.next_received(
        "the task's question in group A",
        in_group(GROUP_A, "Which city for K1?"),
    );
    maibot.say(Some(GROUP_A), ALICE, "Alice", "Paris");
    maibot.next_received(
        "the task's answer in group A",
        in_group(GROUP_A, "K1 forecast: Paris"),
    );
    lap("task K1: created, asked, answered, delivered", &mut clock);

    // A chat command typed in the group is answered in the group.
    maibot.say(Some(GROUP_A), ALICE, "Alice", "/mt list");
    let listed = maibot.next_received("the /mt list answer in group A", |e| {
        e["group_id"] == GROUP_A
            && (text(e).contains("Weather task") || text(e).contains("no tasks"))
    });
    eprintln!("/mt list answered: {}", text(&listed));

    // Group A's planner lists its task (the control for what group B must not see)...
    maibot.say(Some(GROUP_A), ALICE, "Alice", "麦麦 LIST the tasks");
    let own = fixture
        .results
        .recv_timeout(Duration::from_secs(120))
        .expect("group A's planner never got a result from mai_subagent_list");
    assert_eq!(own.tool, "mai_subagent_list", "{own:?}");
    assert!(own.content.contains("Weather task"), "{}", own.content);

    // ...group B's planner sees none of group A's tasks and cannot read one by id.
    maibot.say(Some(GROUP_B), BOB, "Bob", "麦麦 LIST the tasks");
    let list = fixture
        .results
        .recv_timeout(Duration::from_secs(120))
        .expect("group B's planner never got a result from mai_subagent_list");
    assert_eq!(list.tool, "mai_subagent_list", "{list:?}");
    eprintln!("group B's mai_subagent_list: {}", list.content);
    assert!(
        !list.content.contains("K1") && !list.content.contains("Weather task"),
        "group B's planner sees group A's task: {}",
        list.content
    );
    let task_a = task_id(&served.base, "K1:").await;
    maibot.say(Some(GROUP_B), BOB, "Bob", &format!("麦麦 STATUS {task_a}"));
    let status = fixture
        .results
        .recv_timeout(Duration::from_secs(120))
        .expect("group B's planner never got a result from mai_subagent_status");
    assert_eq!(status.tool, "mai_subagent_status", "{status:?}");
    eprintln!(
        "group B's mai_subagent_status of group A's task: {}",
        status.content
    );
    assert!(
        !status.content.contains("Paris") && !status.content.contains("K1"),
        "group B's planner read group A's task: {}",
        status.content
    );
    lap("/mt list and group isolation", &mut clock);

    // Task K2: mai-agent is SIGKILLed while the resumed task's model call is in flight.
    fixture.script.hang_k2.store(true, Ordering::SeqCst);
    maibot.say(Some(GROUP_A), ALICE, "Alice", "麦麦 TASK K2 and tomorrow?");
    maibot.next_received(
        "the K2 question in group A",
        in_group(GROUP_A, "Which city for K2?"),
    );
    maibot.say(Some(GROUP_A), ALICE, "Alice", "Berlin");
    fixture
        .hung
        .recv_timeout(Duration::from_secs(120))
        .expect("the resumed K2 task never called its model");
    served.child.kill().unwrap(); // SIGKILL
    served.child.wait().unwrap();
    drop(served);
    let mut served = serve(data.path(), &fixture.model, port);
    dump.0.push(served.log.clone());
    served.wait_line("the bridge reconnected", bridge_connected);
    maibot.next_received(
        "the K2 answer after the restart",
        in_group(GROUP_A, "K2 forecast: Berlin"),
    );
    lap("task K2 across a SIGKILL of mai-agent", &mut clock);

    // A last command marks the end: everything before it arrived exactly once.
    maibot.say(Some(GROUP_A), ALICE, "Alice", "/mt list");
    maibot.next_received("the last /mt list answer", |e| {
        e["group_id"] == GROUP_A
            && (text(e).contains("Weather task") || text(e).contains("no tasks"))
    });
    let received = maibot.received();
    for needle in [
        "Which city for K1?",
        "K1 forecast: Paris",
        "Which city for K2?",
        "K2 forecast: Berlin",
    ] {
        let count = received.iter().filter(|e| text(e).contains(needle)).count();
        assert_eq!(
            count, 1,
            "{needle:?} reached the chat {count} times: {received:#?}"
        );
    }
    assert!(
        received
            .iter()
            .all(|e| e["group_id"] != GROUP_B || !text(e).contains("forecast")),
        "a group A answer reached group B: {received:#?}"
    );
    maibot.stop();
    let _ = served.terminate();
    lap("wrap-up", &mut clock);
}

/// MaiBot, started offline with the bridge plugin pointed at `served`, connected.
fn maibot_with_bridge(
    python: &std::path::Path,
    instance: &std::path::Path,
    fixture: &Fixture,
    served: &mut Served,
) -> MaiBot {
    let mut maibot = MaiBot::start(MaiBotSpec {
        python,
        dir: instance,
        model_url: format!("{}/v1", fixture.model.uri()),
        ws_port: free_port(),
        plugins: vec![plugin_dir()],
        env: vec![
            ("MAI_AGENT_URL".into(), served.base.clone()),
            ("MAI_AGENT_TOKEN".into(), TOKEN.into()),
        ],
    });
    maibot.wait_log("the bridge plugin loaded", |l| {
        l.contains("mai-agent bridge plugin loaded")
    });
    served.wait_line("the bridge connected", bridge_connected);
    maibot
}

/// Daily budgets, as a member of a real MaiBot group meets them: one task a day and a few
/// tokens. The first task is made and asks its question; a second one is refused in the chat
/// (`/mt create`) and to MaiBot's planner (`mai_subagent_create`), each naming the budget and
/// when it resets; the answered task crosses the token budget and is paused at its next round
/// boundary with a notice in the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_a_real_maibot_group_over_a_daily_budget_is_told_in_the_chat_and_the_planner_too()
 {
    let Some(python) = maibot_python() else {
        return;
    };
    let fixture = fake_models().await;
    let data = tempfile::tempdir().unwrap();
    // Every fake call reports 2 tokens: the title and the first round make 4, over 3.
    let budgets = "\n[limits.budgets.user]\ntasks_per_day = 1\ntokens_per_day = 3\n";
    let mut served = serve_with(data.path(), &fixture.model, free_port(), budgets);
    let _dump = DumpOnPanic(vec![served.log.clone()]);
    let instance = tempfile::tempdir().unwrap();
    let mut maibot = maibot_with_bridge(&python, instance.path(), &fixture, &mut served);

    maibot.say(Some(GROUP_A), ALICE, "Alice", "麦麦 TASK K1 the weather?");
    let created = fixture
        .results
        .recv_timeout(Duration::from_secs(120))
        .unwrap();
    assert_eq!(created.tool, "mai_subagent_create", "{created:?}");
    assert!(
        !created.content.contains("limit reached"),
        "{}",
        created.content
    );
    maibot.next_received("K1's question", in_group(GROUP_A, "Which city for K1?"));

    // The chat door: what Alice reads in the group.
    maibot.say(Some(GROUP_A), ALICE, "Alice", "/mt create a second task");
    let refused = maibot.next_received("the refusal of /mt create", |e| {
        e["group_id"] == GROUP_A && text(e).contains("limit reached")
    });
    let refused = text(&refused).to_owned();
    eprintln!("in group A, to Alice: {refused}");
    for needle in ["[limits.budgets] user.", "today", "resets at", "raise it"] {
        assert!(refused.contains(needle), "{needle:?} missing: {refused}");
    }

    // The planner door: what MaiBot's planner is told (and may say in its own words).
    maibot.say(Some(GROUP_A), ALICE, "Alice", "麦麦 TASK K2 and tomorrow?");
    let planner = fixture
        .results
        .recv_timeout(Duration::from_secs(120))
        .unwrap();
    eprintln!(
        "to MaiBot's planner ({}): {}",
        planner.tool, planner.content
    );
    assert_eq!(planner.tool, "mai_subagent_create", "{planner:?}");
    for needle in ["[limits.budgets] user.", "qq:10001", "resets at"] {
        assert!(
            planner.content.contains(needle),
            "{needle:?}: {}",
            planner.content
        );
    }

    // Run time: the answer resumes K1, whose next round is over the token budget.
    maibot.say(Some(GROUP_A), ALICE, "Alice", "Paris");
    let paused = maibot.next_received("the budget notice", |e| {
        e["group_id"] == GROUP_A && text(e).contains("is paused")
    });
    let paused = text(&paused).to_owned();
    eprintln!("in group A, the task's notice: {paused}");
    for needle in ["user.tokens_per_day = 3", "resets at", "resumes by itself"] {
        assert!(paused.contains(needle), "{needle:?} missing: {paused}");
    }
    let task = task_id(&served.base, "K1:").await;
    let record = task_record(&with_token(), &served.base, &task).await;
    assert_eq!(record["status"], "paused", "{record}");
    assert!(
        maibot
            .received()
            .iter()
            .all(|e| !text(e).contains("K1 forecast")),
        "the paused task must not have answered"
    );
    maibot.stop();
    let _ = served.terminate();
}

/// An API client that sends the token.
fn with_token() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// The id of the task whose intent contains `needle` (over the HTTP API, with the token).
async fn task_id(base: &str, needle: &str) -> String {
    let tasks: Value = reqwest::Client::new()
        .get(format!("{base}/v1/tasks?limit=500"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["intent"].as_str().unwrap_or_default().contains(needle))
        .unwrap_or_else(|| panic!("no task with {needle:?}: {tasks}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The harness alone, without mai-agent: MaiBot starts offline, loads the plugin folder it is
/// given (when this checkout has it) and answers a plain mention through the fake model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_maibot_starts_offline_and_replies_to_a_mention_through_the_fake_model() {
    let Some(python) = maibot_python() else {
        return;
    };
    let mut clock = Instant::now();
    let fixture = fake_models().await;
    let instance = tempfile::tempdir().unwrap();
    let plugin = repo_root().join("integrations/maibot/mai_agent_bridge");
    let plugins: Vec<_> = plugin.exists().then_some(plugin).into_iter().collect();
    let mut maibot = MaiBot::start(MaiBotSpec {
        python: &python,
        dir: instance.path(),
        model_url: format!("{}/v1", fixture.model.uri()),
        ws_port: free_port(),
        plugins: plugins.clone(),
        env: vec![(
            "MAI_AGENT_URL".into(),
            format!("http://127.0.0.1:{}", free_port()),
        )],
    });
    if !plugins.is_empty() {
        maibot.wait_log("the bridge plugin loaded", |l| {
            l.contains("mai-agent bridge plugin loaded")
        });
    }
    lap("MaiBot started offline", &mut clock);
    maibot.say(Some(GROUP_A), ALICE, "Alice", "麦麦 HELLO");
    let reply = maibot.next_received("MaiBot's reply in group A", |e| e["group_id"] == GROUP_A);
    assert_eq!(said(&reply), "好的", "{reply}");
    assert_eq!(
        reply["message"]["message_info"]["user_info"]["user_id"],
        "999"
    );
    lap("a mention answered", &mut clock);
    maibot.stop();
}

/// The plugin's own unit tests (identity never from the model, part-id memory, frames, hooks),
/// run in MaiBot's Python with MaiBot's SDK installed.
#[test]
fn the_plugins_own_tests_pass_in_maibots_python() {
    let Some(python) = maibot_python() else {
        return;
    };
    let output = std::process::Command::new(&python)
        .args(["-m", "unittest", "discover", "-s", "tests"])
        .current_dir(maibot_harness::repo_root().join("integrations/maibot"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{report}");
    assert!(report.contains("OK"), "{report}");
}
