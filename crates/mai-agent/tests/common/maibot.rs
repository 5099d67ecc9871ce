//! A real MaiBot for the end-to-end test: installed by `testing/maibot/setup.sh` (a venv in a
//! cache outside the clone), run and spoken to through `testing/maibot/harness.py` over JSON
//! lines. This module owns finding the install (skip or fail), the harness process and waiting
//! on its events; it does not script models or judge the scenario (the test does).

#![allow(dead_code)]

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// MaiBot's venv python, installing it the first time (minutes). Without it: under `CI=true`
/// the test fails (CI must prove the real thing); elsewhere it prints SKIP and returns `None`
/// (`testing/peers.rs`, `peer_missing`).
pub fn maibot_python() -> Option<PathBuf> {
    let script = repo_root().join("testing/maibot/setup.sh");
    let started = Instant::now();
    let output = Command::new("bash").arg(&script).output();
    let reason = match output {
        Ok(out) if out.status.success() => {
            let dir = String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .map(|l| PathBuf::from(l.trim()));
            match dir.map(|d| d.join("venv/bin/python")) {
                Some(python) if python.exists() => {
                    eprintln!(
                        "MaiBot ready in {:.1} s: {}",
                        started.elapsed().as_secs_f64(),
                        python.display()
                    );
                    return Some(python);
                }
                _ => format!("{} printed no usable directory", script.display()),
            }
        }
        Ok(out) => format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(error) => format!("cannot run bash {}: {error}", script.display()),
    };
    crate::shared_peers::peer_missing(
        &format!(
            "a real MaiBot cannot be installed, so the real-MaiBot test did not run: {reason}"
        ),
        "bash testing/maibot/setup.sh (needs Python >= 3.12 and PyPI)",
    );
    None
}

/// A port nobody listens on now (the OS picks it; the listener is closed before use).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What starts a harness.
pub struct MaiBotSpec<'a> {
    pub python: &'a Path,
    pub dir: &'a Path,
    pub model_url: String,
    pub ws_port: u16,
    pub plugins: Vec<PathBuf>,
    /// Extra environment for MaiBot (and so its plugins), e.g. `MAI_AGENT_URL`.
    pub env: Vec<(String, String)>,
}

/// A running harness: MaiBot plus the fake QQ platform. Every event is kept, so waiting for one
/// kind never loses another.
pub struct MaiBot {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Value>,
    seen: Vec<Value>,
    received_cursor: usize,
    pub log: Arc<Mutex<Vec<String>>>,
}

const WAIT: Duration = Duration::from_secs(120);

impl MaiBot {
    /// Starts MaiBot and waits (bounded) until the fake platform is connected.
    pub fn start(spec: MaiBotSpec<'_>) -> MaiBot {
        let mut command = Command::new(spec.python);
        command
            .arg(repo_root().join("testing/maibot/harness.py"))
            .arg("--dir")
            .arg(spec.dir)
            .args(["--model-url", &spec.model_url])
            .args(["--ws-port", &spec.ws_port.to_string()])
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for plugin in &spec.plugins {
            command.arg("--plugin").arg(plugin);
        }
        let mut child = command.spawn().expect("the MaiBot harness starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, events) = std::sync::mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let keep = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let event: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| json!({"event": "log", "line": line}));
                if event["event"] == "log" {
                    keep.lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .push(event["line"].as_str().unwrap_or_default().to_owned());
                    if std::env::var_os("MAI_MAIBOT_LOG").is_some() {
                        eprintln!("[maibot] {}", event["line"].as_str().unwrap_or_default());
                    }
                }
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut maibot = MaiBot {
            child,
            stdin,
            events,
            seen: Vec::new(),
            received_cursor: 0,
            log,
        };
        maibot.wait_event("the fake platform connected", |e| e["event"] == "ready");
        maibot
    }

    /// The next event matching `pred`, among those not yet looked at (bounded).
    fn wait_event(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(event) => {
                    self.seen.push(event.clone());
                    if event["event"] == "exited" && !pred(&event) {
                        self.fail(&format!("MaiBot exited while waiting for {what}: {event}"));
                    }
                    if pred(&event) {
                        return event;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("MaiBot never showed {what} within {WAIT:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("the harness ended while waiting for {what}"))
                }
            }
        }
    }

    fn fail(&self, why: &str) -> ! {
        let tail = {
            let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            log[log.len().saturating_sub(200)..].join("\n")
        };
        panic!("{why}\nMaiBot's last log lines:\n{tail}");
    }

    /// The next MaiBot log line matching `pred`, including lines already seen.
    pub fn wait_log(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let found = (self.log.lock().unwrap_or_else(|p| p.into_inner()))
            .iter()
            .find(|l| pred(l))
            .cloned();
        if let Some(line) = found {
            return line;
        }
        let event = self.wait_event(what, |e| {
            e["event"] == "log" && pred(e["line"].as_str().unwrap_or_default())
        });
        event["line"].as_str().unwrap_or_default().to_owned()
    }

    /// A chat message from `user` (in `group` when given), as the QQ adapter would send it.
    pub fn say(&mut self, group: Option<&str>, user: &str, nickname: &str, text: &str) {
        let command = json!({"op": "send", "group_id": group, "user_id": user,
                             "nickname": nickname, "text": text});
        let stdin = self.stdin.as_mut().expect("the harness is running");
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
        self.wait_event("the message accepted", |e| {
            e["event"] == "sent" || e["event"] == "error"
        });
    }

    /// Everything MaiBot sent the platform so far (without waiting).
    pub fn received(&mut self) -> Vec<Value> {
        while let Ok(event) = self.events.try_recv() {
            self.seen.push(event);
        }
        self.seen
            .iter()
            .filter(|e| e["event"] == "received")
            .cloned()
            .collect()
    }

    /// The next message MaiBot sends the platform (after the last one returned here) that
    /// matches `pred` (bounded).
    pub fn next_received(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let is_match = |e: &Value| e["event"] == "received" && pred(e);
        let start = self.received_cursor;
        if let Some(offset) = self.seen[start..].iter().position(is_match) {
            self.received_cursor = start + offset + 1;
            return self.seen[start + offset].clone();
        }
        let event = self.wait_event(what, is_match);
        self.received_cursor = self.seen.len();
        event
    }

    /// Stops MaiBot (the harness waits for it) and the harness.
    pub fn stop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "{}", json!({"op": "stop"}));
        }
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            // Waiting on the harness's own events, not sleeping: it reports MaiBot's exit.
            let _ = self.events.recv_timeout(Duration::from_millis(500));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for MaiBot {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What MaiBot said in a received message, without the quote of the message it answers: MaiBot
/// decides by itself whether to quote, so a test compares only the text segments.
pub fn said(event: &Value) -> String {
    let segment = &event["message"]["message_segment"];
    match segment["type"].as_str() {
        Some("seglist") => segment["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|part| part["type"] == "text")
            .filter_map(|part| part["data"].as_str())
            .collect(),
        Some("text") => segment["data"].as_str().unwrap_or_default().to_owned(),
        _ => text(event).to_owned(),
    }
}

/// The text of a `received` event.
pub fn text(event: &Value) -> &str {
    event["text"].as_str().unwrap_or_default()
}
