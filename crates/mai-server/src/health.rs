//! What `GET /v1/health` reports (docs/http-api.md): the instance (version, pid, uptime), the
//! store (a read through the engine's facade), the model (how its last call went, and when), each
//! chat channel (OneBot connected or not) and the MaiBot bridge (connected here, or held by
//! another instance this one reaches through the shared database); `status` is `degraded` when
//! one of them is down. `GET /healthz` stays the small liveness answer for supervisors.
//!
//! The [`Health`] value travels inside [`crate::Metrics`], so every door that has the metrics has
//! it: the model decorator that times calls ([`crate::MeteredModel`]) records each call's
//! outcome here, and `serve` registers its channels when it starts them. Must not: reach the
//! store directly, or call the model or a channel (it reports what they last did).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, SecondsFormat, Utc};
use mai_core::store::TaskFilter;
use mai_engine::{Caller, Engine};
use mai_host::{MaiBotHost, OneBotState, OneBotStatus};
use serde_json::{Value, json};
use tokio::sync::watch;

/// How much of an error a report shows.
const ERROR_CHARS: usize = 300;

/// How long the report waits for the store's one-row read: a database out of reach would
/// otherwise hold the answer for the pool's whole connection timeout.
const STORE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The service's health: cheap to clone, all clones share one record.
#[derive(Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    started_at: DateTime<Utc>,
    last_model_call: Mutex<Option<ModelCall>>,
    /// Every model call since start, for the dashboard's charts (`crate::trend`).
    model_totals: Mutex<ModelTotals>,
    channels: Mutex<Vec<(String, Channel)>>,
}

/// How the last model call went.
#[derive(Debug, Clone)]
struct ModelCall {
    at: DateTime<Utc>,
    error: Option<String>,
}

/// Model calls since start: how many, how many failed, how long they took together.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ModelTotals {
    pub calls: u64,
    pub errors: u64,
    pub seconds: f64,
}

/// A channel as the report sees it.
enum Channel {
    /// A OneBot connection, followed through its status.
    OneBot(watch::Receiver<OneBotStatus>),
    /// A channel with no connection to lose (the console chat).
    Local,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("started_at", &self.inner.started_at)
            .finish_non_exhaustive()
    }
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Health {
    pub fn new() -> Self {
        Health {
            inner: Arc::new(Inner {
                started_at: Utc::now(),
                last_model_call: Mutex::new(None),
                model_totals: Mutex::new(ModelTotals::default()),
                channels: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Records how a model call ended (`None`: it succeeded).
    pub fn model_call(&self, error: Option<String>) {
        *lock(&self.inner.last_model_call) = Some(ModelCall {
            at: Utc::now(),
            error: error.map(|e| e.chars().take(ERROR_CHARS).collect()),
        });
    }

    /// Adds a model call that took `seconds` to the totals.
    pub fn model_timed(&self, ok: bool, seconds: f64) {
        let mut totals = lock(&self.inner.model_totals);
        totals.calls += 1;
        totals.errors += u64::from(!ok);
        totals.seconds += seconds;
    }

    /// The model calls since start.
    pub fn model_totals(&self) -> ModelTotals {
        *lock(&self.inner.model_totals)
    }

    /// Reports a OneBot channel named `name` through its status.
    pub fn add_onebot(&self, name: &str, status: watch::Receiver<OneBotStatus>) {
        lock(&self.inner.channels).push((name.to_owned(), Channel::OneBot(status)));
    }

    /// Reports a channel that has no connection (the console chat).
    pub fn add_local_channel(&self, name: &str) {
        lock(&self.inner.channels).push((name.to_owned(), Channel::Local));
    }

    /// The report: every part, and `ok` or `degraded` overall.
    pub async fn report(&self, engine: &Engine, bridge: Option<&MaiBotHost>) -> Value {
        let store = store_report(engine).await;
        let model = self.model_report();
        let (channels, channels_ok) = self.channels_report();
        let (bridge, bridge_ok) = bridge_report(bridge).await;
        let healthy = store["ok"] == true && model["ok"] != false && channels_ok && bridge_ok;
        let now = Utc::now();
        json!({
            "status": if healthy { "ok" } else { "degraded" },
            "instance": {
                "id": engine.instance_id(),
                "version": env!("CARGO_PKG_VERSION"),
                "pid": std::process::id(),
                "started_at": time(self.inner.started_at),
                "uptime_secs": (now - self.inner.started_at).num_seconds(),
            },
            "store": store,
            "model": model,
            "channels": channels,
            "bridge": bridge,
        })
    }

    fn model_report(&self) -> Value {
        match lock(&self.inner.last_model_call).clone() {
            None => json!({"ok": null, "last_call_at": null, "error": null}),
            Some(call) => json!({
                "ok": call.error.is_none(),
                "last_call_at": time(call.at),
                "error": call.error,
            }),
        }
    }

    fn channels_report(&self) -> (Value, bool) {
        let mut all_ok = true;
        let mut report = serde_json::Map::new();
        for (name, channel) in lock(&self.inner.channels).iter() {
            let entry = match channel {
                Channel::Local => json!({"state": "local", "connected": true}),
                Channel::OneBot(status) => {
                    let status = status.borrow().clone();
                    let connected = status.state == OneBotState::Connected;
                    all_ok &= connected;
                    json!({
                        "state": onebot_state(status.state),
                        "connected": connected,
                        "last_error": status.last_error,
                    })
                }
            };
            report.insert(name.clone(), entry);
        }
        (Value::Object(report), all_ok)
    }
}

/// A one-row read through the engine's facade: the database answers.
async fn store_report(engine: &Engine) -> Value {
    let reader = match Caller::admin_reader("health") {
        Ok(reader) => reader,
        Err(error) => return json!({"ok": false, "error": error.to_string()}),
    };
    let filter = TaskFilter {
        limit: Some(1),
        ..TaskFilter::default()
    };
    let Ok(read) = tokio::time::timeout(STORE_WAIT, engine.list(&reader, filter)).await else {
        return json!({
            "ok": false,
            "error": format!(
                "the store did not answer within {} s; check that the database ([storage] url) \
                 is running and reachable",
                STORE_WAIT.as_secs()
            ),
        });
    };
    match read {
        Ok(_) => json!({"ok": true, "error": null}),
        Err(error) => json!({
            "ok": false,
            "error": error.to_string().chars().take(ERROR_CHARS).collect::<String>(),
        }),
    }
}

/// The bridge's part: `connected` here, `elsewhere` (reached through the instance `via` holding
/// it, on a shared database: up too), or `disconnected`.
async fn bridge_report(bridge: Option<&MaiBotHost>) -> (Value, bool) {
    let Some(host) = bridge else {
        return (json!({"state": "not used"}), true);
    };
    let held = *host.held().borrow();
    if host.status().borrow().connected.is_some() {
        return (json!({"state": "connected", "held_parts": held}), true);
    }
    match host.bridge_elsewhere().await {
        Some(via) => (
            json!({"state": "elsewhere", "via": via, "held_parts": held}),
            true,
        ),
        None => (json!({"state": "disconnected", "held_parts": held}), false),
    }
}

fn onebot_state(state: OneBotState) -> &'static str {
    match state {
        OneBotState::Connecting => "connecting",
        OneBotState::Connected => "connected",
        OneBotState::Reconnecting => "reconnecting",
        OneBotState::Stopped => "stopped",
    }
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_last_model_call_is_reported_with_its_error_cut_short() {
        let health = Health::new();
        assert_eq!(health.model_report()["ok"], Value::Null);
        health.model_call(Some("x".repeat(1000)));
        let report = health.model_report();
        assert_eq!(report["ok"], false);
        assert_eq!(
            report["error"].as_str().unwrap().chars().count(),
            ERROR_CHARS
        );
        health.model_call(None);
        assert_eq!(health.model_report()["ok"], true);
    }

    #[test]
    fn a_onebot_channel_that_is_not_connected_degrades_the_report() {
        let health = Health::new();
        health.add_local_channel("console");
        let (sender, status) = watch::channel(OneBotStatus {
            state: OneBotState::Reconnecting,
            last_error: Some("connection refused".into()),
        });
        health.add_onebot("onebot", status);
        let (report, ok) = health.channels_report();
        assert!(!ok);
        assert_eq!(report["onebot"]["state"], "reconnecting");
        assert_eq!(report["onebot"]["last_error"], "connection refused");
        assert_eq!(report["console"]["connected"], true);
        sender.send_replace(OneBotStatus {
            state: OneBotState::Connected,
            last_error: None,
        });
        assert!(health.channels_report().1);
    }
}
