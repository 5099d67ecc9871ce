//! Shared by the crash suites (`crash.rs`, one instance; `instances_crash.rs`, three on one
//! PostgreSQL): the seeded random source, the fake model that scripts every task from its
//! intent, the planned mix of tasks, the driver that answers questions as people would, and the
//! readers of what a run left behind (side-effect lines, checkpointed tool results). What a
//! suite asserts stays in the suite.

#![allow(dead_code)] // not every suite uses every helper

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

use crate::common::{answer, tool_call};

/// splitmix64: small, seeded, good enough to pick task kinds and kill moments.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `MAI_CRASH_SEED`, else a fresh one (printed by the suite so a failure can be replayed).
pub fn seed() -> u64 {
    std::env::var("MAI_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// The agent's script, read from the intent `crash-task <key> rounds=<r> ask=<0|1>`: one
/// `run_command` per round (appending `key=<key>-r<round> life=<n> at=<ns>` to the side-effect
/// file), then (if asked) one `ask_user`, then the answer `done-<key>`. Answers arrive after a
/// short random delay so kills land mid-round.
pub struct CrashModel {
    pub side_effects: String,
    pub calls: Arc<AtomicUsize>,
    /// Notified (one stored permit) on every call.
    pub called: Arc<tokio::sync::Notify>,
    pub jitter: AtomicU64,
}

fn intent_of(body: &Value) -> Option<(String, usize, bool)> {
    for message in body["messages"].as_array()? {
        let Some(content) = message["content"].as_str() else {
            continue;
        };
        if let Some(at) = content.find("crash-task ") {
            let mut words = content[at..].split_whitespace().skip(1);
            let key = words.next()?.to_owned();
            let rounds = words.next()?.strip_prefix("rounds=")?.parse().ok()?;
            let ask = words.next()?.strip_prefix("ask=")? == "1";
            return Some((key, rounds, ask));
        }
    }
    None
}

fn completion(body: &Value, message: Value, jitter: u64) -> ResponseTemplate {
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    ResponseTemplate::new(200)
        .set_delay(Duration::from_millis(jitter))
        .set_body_json(json!({
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }))
}

impl Respond for CrashModel {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.called.notify_one();
        let results = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        let jitter = self.jitter.fetch_add(7919, Ordering::Relaxed) % 40;
        if body["model"] == "polish-model" {
            // Polish keeps the text as it is (the prompt ends with it): the kill window between
            // saving a question or a reply and sending it is now a model call wide.
            let prompt = body["messages"][0]["content"].as_str().unwrap();
            let text = prompt.rsplit("Machine output:\n").next().unwrap().trim();
            return completion(&body, answer(text), jitter);
        }
        let message = match intent_of(&body) {
            None => answer("Crash title"),
            Some((key, rounds, _)) if results < rounds => {
                let command = format!(
                    "echo \"key={key}-r{results} life=$MAI_CRASH_LIFE at=$(date +%s%N)\" | tee -a {}",
                    self.side_effects
                );
                tool_call(
                    &format!("{key}-c{results}"),
                    "run_command",
                    json!({ "command": command }),
                )
            }
            Some((key, rounds, true)) if results == rounds => tool_call(
                &format!("{key}-c{results}"),
                "ask_user",
                json!({ "question": format!("question-{key}?") }),
            ),
            Some((key, _, _)) => answer(&format!("done-{key}")),
        };
        completion(&body, message, jitter)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Agent,
    Ask,
    Instant,
    Delayed,
    Cron,
}

pub struct Planned {
    pub key: String,
    pub kind: Kind,
    pub rounds: usize,
    /// Answered as the person (`POST /v1/messages`) rather than by inject.
    pub personal: bool,
}

/// `total` tasks: 40 % agent, 20 % asking, 20 % instant, 10 % delayed, 10 % cron.
pub fn plan(total: usize, rng: &mut Rng) -> Vec<Planned> {
    (0..total)
        .map(|i| {
            let kind = match rng.below(10) {
                0..=3 => Kind::Agent,
                4 | 5 => Kind::Ask,
                6 | 7 => Kind::Instant,
                8 => Kind::Delayed,
                _ => Kind::Cron,
            };
            Planned {
                key: format!("t{i}"),
                kind,
                rounds: 1 + rng.below(3) as usize,
                personal: rng.below(2) == 0,
            }
        })
        .collect()
}

impl Planned {
    pub fn body(&self) -> Value {
        let intent = |rounds: usize, ask: bool| {
            format!(
                "crash-task {} rounds={rounds} ask={}",
                self.key,
                u8::from(ask)
            )
        };
        let mut body = json!({"stream_id": "console:local", "platform": "console",
                              "title": self.key});
        match self.kind {
            Kind::Agent => body["intent"] = json!(intent(self.rounds, false)),
            Kind::Ask => body["intent"] = json!(intent(self.rounds, true)),
            Kind::Instant => {
                body["intent"] = json!(format!("instant-{}", self.key));
                body["level"] = json!("instant");
            }
            Kind::Delayed => {
                body["intent"] = json!(intent(self.rounds, false));
                body["delay_seconds"] = json!(1 + self.rounds);
            }
            Kind::Cron => {
                body["intent"] = json!(format!("cron-{}", self.key));
                body["level"] = json!("instant");
                body["cron_expr"] = json!("* * * * *");
            }
        }
        if self.personal {
            body["user_id"] = json!("local");
        }
        body
    }

    /// The text this task delivers to the console chat when it finishes.
    pub fn final_text(&self) -> String {
        match self.kind {
            Kind::Instant => format!("instant-{}", self.key),
            Kind::Cron => format!("cron-{}", self.key),
            _ => format!("done-{}", self.key),
        }
    }

    /// The task whose completion records `final_text` sent: an instant task itself, else the
    /// reply task the agent task `id` made.
    pub fn delivering(&self, id: &str) -> String {
        if self.kind == Kind::Instant {
            id.to_owned()
        } else {
            uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_OID,
                format!("{id}:0:reply").as_bytes(),
            )
            .to_string()
        }
    }
}

/// The config of every server of a suite, with `storage` (a `[storage]` section, or nothing)
/// added.
pub fn config(storage: &str) -> String {
    "[shell]\nenabled = true\n[task]\nmax_concurrent_tasks = 8\n\
     [permission]\nadmins = [\"console:local\"]\n[send]\nretry_base_ms = 10\n\
     [limits]\nmax_active_per_requester = 100000\nmax_active_per_stream = 100000\n\
     max_cron_per_requester = 100000\nmax_cron_per_stream = 100000\n"
        .to_owned()
        + storage
}

pub type Log = Arc<std::sync::Mutex<Vec<String>>>;

/// Answers the tasks waiting for the user whose question reached the chat (in any of `logs`),
/// as people would, through the servers at `bases` in turn from `pick` on: a question nobody
/// saw is never answered, so a lost one hangs its task and fails the suite. Planner tasks are
/// answered by inject, each its own. A person's message answers their *oldest* waiting task, so
/// the person answers only while every one of their waiting tasks has shown its question. A 409
/// (answered meanwhile) or a refused connection (the server died) is fine: the next pass sees
/// the truth.
///
/// With `copies` > 1 each of the person's messages carries a fresh platform message id and is
/// delivered to that many servers at once, as one OneBot implementation delivers it to every
/// instance connected to it. Returns, per message, the outcome of each copy that was answered
/// (`answered`, `stored`, `duplicate`, …).
pub async fn answer_waiting(
    client: &reqwest::Client,
    bases: &[String],
    pick: usize,
    logs: &[Log],
    copies: usize,
) -> Vec<Vec<String>> {
    let asked: HashSet<String> = logs
        .iter()
        .flat_map(|log| log.lock().unwrap().clone())
        .filter_map(|line| {
            let key = line.strip_prefix("mai> question-")?.strip_suffix('?')?;
            Some(key.to_owned())
        })
        .collect();
    let base = |n: usize| &bases[(pick + n) % bases.len()];
    let Ok(response) = client
        .get(format!(
            "{}/v1/tasks?status=waiting_input&limit=500",
            base(0)
        ))
        .send()
        .await
    else {
        return Vec::new();
    };
    let Ok(list) = response.json::<Value>().await else {
        return Vec::new();
    };
    // An answered task stays `waiting_input` (its question cleared) until it resumes.
    let waiting: Vec<Value> = list["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|task| !task["metadata"]["waiting"].is_null())
        .collect();
    let was_asked = |task: &Value| asked.contains(task["title"].as_str().unwrap_or_default());
    let (personal, planner): (Vec<Value>, Vec<Value>) = waiting
        .into_iter()
        .partition(|task| task["owner"] == "console:local");
    for (n, task) in planner.iter().filter(|t| was_asked(t)).enumerate() {
        let _ = client
            .post(format!(
                "{}/v1/tasks/{}/inject",
                base(n + 1),
                task["id"].as_str().unwrap()
            ))
            .json(&json!({"instruction": "blue"}))
            .send()
            .await;
    }
    let mut outcomes = Vec::new();
    if personal.iter().all(was_asked) {
        for n in 0..personal.len() {
            let mut said = json!({"platform": "console", "user_id": "local", "text": "blue"});
            if copies > 1 {
                said["message_id"] = json!(uuid::Uuid::new_v4().to_string());
            }
            let sends = (0..copies).map(|copy| {
                client
                    .post(format!("{}/v1/messages", base(n + 1 + copy)))
                    .json(&said)
                    .send()
            });
            let mut answered = Vec::new();
            for response in futures::future::join_all(sends).await.into_iter().flatten() {
                if let Ok(outcome) = response.json::<Value>().await
                    && let Some(outcome) = outcome["outcome"].as_str()
                {
                    answered.push(outcome.to_owned());
                }
            }
            outcomes.push(answered);
        }
    }
    outcomes
}

/// Creates a task: its id, or `None` when the server died under the request (a refusal is a
/// failure of the test).
pub async fn create(client: &reqwest::Client, base: &str, body: &Value) -> Option<String> {
    let response = client
        .post(format!("{base}/v1/tasks"))
        .json(body)
        .send()
        .await
        .ok()?;
    let status = response.status();
    let text = response.text().await.ok()?;
    assert_eq!(status, 201, "{text}");
    let created: Value = serde_json::from_str(&text).unwrap();
    Some(created["id"].as_str().unwrap().to_owned())
}

pub async fn get(client: &reqwest::Client, url: String) -> Value {
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200, "{url}");
    response.json().await.unwrap()
}

/// One execution of a round's `run_command`: the life (server process) it ran in, and when it
/// started (Unix nanoseconds, from `date`).
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub life: usize,
    pub at_ns: i128,
}

/// The side-effect file read back: the runs of each `<key>-r<round>`, in file order.
pub fn runs_by_key(side_effects: &std::path::Path) -> BTreeMap<String, Vec<Run>> {
    let mut executed: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    for line in std::fs::read_to_string(side_effects)
        .unwrap_or_default()
        .lines()
    {
        let (key, rest) = line.split_once(" life=").unwrap();
        let (life, at) = rest.split_once(" at=").unwrap();
        executed
            .entry(key.trim_start_matches("key=").to_owned())
            .or_default()
            .push(Run {
                life: life.parse().unwrap(),
                at_ns: at.trim().parse().unwrap(),
            });
    }
    executed
}

/// The lives whose run of `key` a task's history (`GET /v1/tasks/{id}/history`) holds as a
/// checkpointed tool result (read from the result's stdout; the command itself names the key
/// too).
pub fn checkpointed_lives(history: &Value, key: &str) -> Vec<usize> {
    let marker = format!("key={key} life=");
    history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["payload"]["role"] == "tool")
        .filter_map(|e| {
            let content: Value = serde_json::from_str(e["payload"]["content"].as_str()?).ok()?;
            let stdout = content["stdout"].as_str()?;
            let at = stdout.find(&marker)? + marker.len();
            let digits: String = stdout[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// When the runs of `key` whose results a task's history holds started (Unix nanoseconds, read
/// from the result's stdout as [`checkpointed_lives`] reads the life): which run counted.
pub fn checkpointed_starts(history: &Value, key: &str) -> Vec<i128> {
    let marker = format!("key={key} life=");
    history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["payload"]["role"] == "tool")
        .filter_map(|e| {
            let content: Value = serde_json::from_str(e["payload"]["content"].as_str()?).ok()?;
            let stdout = content["stdout"].as_str()?;
            let run = &stdout[stdout.find(&marker)?..];
            let at = run.split(" at=").nth(1)?;
            let digits: String = at.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// When task record `record` was last completed (its status log), if it was.
pub fn completed_at(record: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    record["status_log"]
        .as_array()?
        .iter()
        .rev()
        .find(|change| change["status"] == "completed")
        .and_then(|change| change["at"].as_str()?.parse().ok())
}
