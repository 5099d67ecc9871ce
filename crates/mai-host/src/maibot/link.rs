//! The bridge slot: which bridge is connected, the requests waiting for its answers, and the
//! parts held while none is.
//!
//! Answers are matched to requests by id alone (ids are unique for the life of the process); a
//! bridge that closes or is replaced fails the requests sent over it. Must not: hold its lock
//! across an await (it only moves frames into channels).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::MaiBotConfig;

/// Why a request over the bridge got no answer to use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    #[error(
        "no MaiBot bridge is connected: start MaiBot with the mai_agent_bridge plugin pointed at \
         this mai-agent (docs/maibot.md)"
    )]
    Offline,
    #[error("the MaiBot bridge closed before it answered; it is asked again once it is back")]
    Disconnected,
    #[error(
        "no MaiBot bridge connected for {minutes} min ([host] offline_timeout_min); the part was \
         not sent: start MaiBot with the mai_agent_bridge plugin"
    )]
    StillOffline { minutes: u64 },
    #[error(
        "the MaiBot plugin did not answer within {0:?} ([host] request_timeout_secs); check \
         MaiBot's log for the plugin's errors"
    )]
    Timeout(Duration),
    #[error("the MaiBot plugin cannot do this: {0}")]
    Unsupported(String),
    #[error("the MaiBot plugin refused the request as invalid: {0}")]
    Invalid(String),
    #[error("the MaiBot plugin failed: {0}")]
    Failed(String),
}

/// What the plugin said in its `hello`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Hello {
    #[serde(default)]
    pub plugin_version: Option<String>,
    #[serde(default)]
    pub maibot_version: Option<String>,
}

/// Whether a bridge is connected, and who said hello on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeStatus {
    /// `None` while no bridge is connected.
    pub connected: Option<Hello>,
    /// Counts bridges attached so far (the current one's generation).
    pub generation: u64,
}

/// A bridge made current by [`super::MaiBotHost::attach`]: write every frame `outbox` yields to
/// the socket; close the socket when `replaced` fires (a newer bridge took the slot).
pub struct BridgeLink {
    pub generation: u64,
    pub outbox: mpsc::UnboundedReceiver<String>,
    pub replaced: CancellationToken,
}

struct Current {
    generation: u64,
    outbox: mpsc::UnboundedSender<String>,
    replaced: CancellationToken,
}

struct Pending {
    generation: u64,
    answer: oneshot::Sender<Result<Value, BridgeError>>,
}

struct State {
    current: Option<Current>,
    generation: u64,
    /// When the last bridge went away (or the host started): held parts wait until this plus
    /// the offline timeout.
    offline_since: Instant,
    pending: HashMap<String, Pending>,
}

pub(super) struct Slot {
    config: MaiBotConfig,
    state: Mutex<State>,
    status: watch::Sender<BridgeStatus>,
    held: watch::Sender<usize>,
    next_id: AtomicU64,
}

/// Reads the plugin's first frame: `{"id": "hello", "method": "hello", "params": {…}}`.
pub(super) fn handshake(frame: &str) -> Result<(Hello, String), String> {
    let value: Value = serde_json::from_str(frame)
        .map_err(|e| format!("the first frame is not JSON ({e}); send hello first"))?;
    if value.get("method").and_then(Value::as_str) != Some("hello") {
        return Err(format!(
            "the first frame must be {{\"id\": \"hello\", \"method\": \"hello\", \"params\": \
             {{\"plugin_version\", \"maibot_version\"}}}}, got {}",
            truncate(frame)
        ));
    }
    let hello: Hello = serde_json::from_value(value.get("params").cloned().unwrap_or(json!({})))
        .map_err(|e| format!("hello params: {e}"))?;
    let id = value.get("id").cloned().unwrap_or(json!("hello"));
    let answer = json!({"id": id, "result": {"server_version": env!("CARGO_PKG_VERSION")}});
    Ok((hello, answer.to_string()))
}

fn truncate(frame: &str) -> String {
    frame.chars().take(200).collect()
}

/// Counts a held part while it lives.
pub(super) struct HeldGuard<'a>(&'a watch::Sender<usize>);

impl<'a> HeldGuard<'a> {
    fn new(held: &'a watch::Sender<usize>) -> Self {
        held.send_modify(|n| *n += 1);
        HeldGuard(held)
    }
}

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Slot {
    pub(super) fn new(config: MaiBotConfig) -> Slot {
        Slot {
            config,
            state: Mutex::new(State {
                current: None,
                generation: 0,
                offline_since: Instant::now(),
                pending: HashMap::new(),
            }),
            status: watch::Sender::new(BridgeStatus::default()),
            held: watch::Sender::new(0),
            next_id: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The lock guards plain data and is never held across an await or a panic-prone call.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn status(&self) -> watch::Receiver<BridgeStatus> {
        self.status.subscribe()
    }

    pub(super) fn held(&self) -> watch::Receiver<usize> {
        self.held.subscribe()
    }

    pub(super) fn config(&self) -> MaiBotConfig {
        self.config
    }

    /// Whether a bridge is connected to this instance now.
    pub(super) fn connected(&self) -> bool {
        self.lock().current.is_some()
    }

    /// When this instance's last bridge went away (or the host started).
    pub(super) fn offline_since(&self) -> Instant {
        self.lock().offline_since
    }

    /// Counts a part as held for as long as the guard lives.
    pub(super) fn hold(&self) -> HeldGuard<'_> {
        HeldGuard::new(&self.held)
    }

    pub(super) fn attach(&self, hello: Hello) -> BridgeLink {
        let (outbox, rx) = mpsc::unbounded_channel();
        let replaced = CancellationToken::new();
        let mut state = self.lock();
        state.generation += 1;
        let generation = state.generation;
        if let Some(old) = state.current.take() {
            tracing::info!(
                old = old.generation,
                new = generation,
                "a new MaiBot bridge replaces the connected one"
            );
            old.replaced.cancel();
            fail_pending(&mut state, old.generation);
        }
        state.current = Some(Current {
            generation,
            outbox,
            replaced: replaced.clone(),
        });
        self.status.send_replace(BridgeStatus {
            connected: Some(hello),
            generation,
        });
        BridgeLink {
            generation,
            outbox: rx,
            replaced,
        }
    }

    pub(super) fn detach(&self, generation: u64) {
        let mut state = self.lock();
        self.detach_locked(&mut state, generation);
    }

    fn detach_locked(&self, state: &mut State, generation: u64) {
        fail_pending(state, generation);
        if state.current.as_ref().map(|c| c.generation) != Some(generation) {
            return; // replaced already: the slot is the newer bridge's
        }
        state.current = None;
        state.offline_since = Instant::now();
        self.status.send_replace(BridgeStatus {
            connected: None,
            generation,
        });
    }

    /// Sends a request over the current bridge and waits for its answer.
    pub(super) async fn request(&self, method: &str, params: Value) -> Result<Value, BridgeError> {
        let id = format!("m{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (answer, rx) = oneshot::channel();
        {
            let mut state = self.lock();
            let Some(current) = state.current.as_ref() else {
                return Err(BridgeError::Offline);
            };
            let (generation, outbox) = (current.generation, current.outbox.clone());
            let frame = json!({"id": id, "method": method, "params": params}).to_string();
            if outbox.send(frame).is_err() {
                // The socket's side is gone before it could detach: detach it here, so a held
                // send waits for the next bridge instead of trying this one again.
                self.detach_locked(&mut state, generation);
                return Err(BridgeError::Disconnected);
            }
            state
                .pending
                .insert(id.clone(), Pending { generation, answer });
        }
        match tokio::time::timeout(self.config.request_timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(BridgeError::Disconnected),
            Err(_) => {
                self.lock().pending.remove(&id);
                Err(BridgeError::Timeout(self.config.request_timeout))
            }
        }
    }

    /// Returns once a bridge is connected; while none is, the caller's part is counted as held,
    /// until the bridge has been away for the offline timeout.
    pub(super) async fn wait_for_bridge(&self) -> Result<(), BridgeError> {
        let mut status = self.status.subscribe();
        if status.borrow().connected.is_some() {
            return Ok(());
        }
        let deadline = self.lock().offline_since + self.config.offline_timeout;
        let _held = HeldGuard::new(&self.held);
        tracing::info!("no MaiBot bridge connected: holding a message part until one connects");
        match tokio::time::timeout_at(deadline, status.wait_for(|s| s.connected.is_some())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(BridgeError::StillOffline {
                minutes: self.config.offline_timeout.as_secs() / 60,
            }),
        }
    }

    pub(super) fn receive(&self, generation: u64, frame: &str) -> Option<String> {
        let value: Value = match serde_json::from_str(frame) {
            Ok(value) => value,
            Err(error) => {
                tracing::warn!(%error, frame = %truncate(frame), "the MaiBot bridge sent a frame that is not JSON; ignored");
                return None;
            }
        };
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        if let Some(method) = value.get("method").and_then(Value::as_str) {
            return Some(answer_plugin_request(&id, method));
        }
        let Some(key) = id.as_str() else {
            tracing::warn!(frame = %truncate(frame), "the MaiBot bridge sent an answer without an id; ignored");
            return None;
        };
        let answer = answer_of(&value);
        match self.lock().pending.remove(key) {
            Some(pending) => {
                let _ = pending.answer.send(answer);
            }
            None => tracing::debug!(
                id = key,
                generation,
                "an answer nobody waits for (timed out?)"
            ),
        }
        None
    }
}

/// Fails every request sent over bridge `generation`: its answers can no longer arrive.
fn fail_pending(state: &mut State, generation: u64) {
    let ids: Vec<String> = state
        .pending
        .iter()
        .filter(|(_, p)| p.generation == generation)
        .map(|(id, _)| id.clone())
        .collect();
    for id in ids {
        if let Some(pending) = state.pending.remove(&id) {
            let _ = pending.answer.send(Err(BridgeError::Disconnected));
        }
    }
}

/// The plugin asked mai-agent something: only `ping` is served.
fn answer_plugin_request(id: &Value, method: &str) -> String {
    if method == "ping" {
        return json!({"id": id, "result": "pong"}).to_string();
    }
    json!({"id": id, "error": {"code": "unsupported", "message": format!(
        "mai-agent serves only `ping` over the bridge (got `{method}`); use the HTTP API for the rest"
    )}})
    .to_string()
}

/// `{"result": …}` or `{"error": {"code", "message"}}`.
pub(super) fn answer_of(value: &Value) -> Result<Value, BridgeError> {
    if let Some(result) = value.get("result") {
        return Ok(result.clone());
    }
    let error = value.get("error");
    let code = error
        .and_then(|e| e.get("code"))
        .and_then(Value::as_str)
        .unwrap_or("failed");
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("an answer with neither result nor error: {value}"));
    Err(match code {
        "unsupported" => BridgeError::Unsupported(message),
        "invalid" => BridgeError::Invalid(message),
        _ => BridgeError::Failed(message),
    })
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("config", &self.config)
            .finish()
    }
}
