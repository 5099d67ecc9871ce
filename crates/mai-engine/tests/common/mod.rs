//! Test doubles for the engine: a recording host, a rule-based model, a manual clock, and a
//! harness that builds an engine over a real SQLite file.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mai_core::clock::Clock;
use mai_core::config::{Config, LiveConfig};
use mai_core::host::{ChatLine, Delivery, Host, HostError, Jargon, Persona};
use mai_core::ids::StreamId;
use mai_core::model::{ChatModel, ChatRequest, ChatResponse, ModelError, ModelPurpose};
use mai_core::role::Role;
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use mai_core::tool::ToolRegistry;
use mai_engine::Caller;
use mai_engine::Prompts;
use mai_engine::TaskEvent;
use mai_engine::{Engine, EngineDeps};
use mai_store::SqliteStore;
use tokio::sync::broadcast;

/// A host that records what was sent and noted; can be told to fail sends.
#[derive(Default)]
pub struct RecordingHost {
    pub sent: Mutex<Vec<(String, String)>>,
    pub notes: Mutex<Vec<(String, String)>>,
    /// The next this-many sends fail.
    pub failing_sends: AtomicUsize,
    /// The stream of every send that failed, in order; each failure also notifies `send_failed`.
    pub failed_sends: Mutex<Vec<String>>,
    pub send_failed: tokio::sync::Notify,
    /// Sends that answer "not delivered" without an error.
    pub rejecting_sends: AtomicUsize,
    /// Plugin APIs the host offers, and how often any was called.
    pub apis: Vec<mai_core::host::PluginApi>,
    pub api_calls: AtomicUsize,
    /// People and groups `search_users` finds (by any keyword in `matched`).
    pub users: Vec<mai_core::host::UserHit>,
}

impl RecordingHost {
    pub fn sent_to(&self, stream: &str) -> Vec<String> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _)| s == stream)
            .map(|(_, t)| t.clone())
            .collect()
    }
    pub fn all_sent(&self) -> Vec<(String, String)> {
        self.sent.lock().unwrap().clone()
    }
}

#[async_trait]
impl Host for RecordingHost {
    async fn send_text(&self, stream: &StreamId, text: &str) -> Result<Delivery, HostError> {
        if self.failing_sends.load(Ordering::SeqCst) > 0 {
            self.failing_sends.fetch_sub(1, Ordering::SeqCst);
            self.failed_sends.lock().unwrap().push(stream.to_string());
            self.send_failed.notify_one();
            return Err(HostError::new("send a message", "connection reset"));
        }
        if self.rejecting_sends.load(Ordering::SeqCst) > 0 {
            self.rejecting_sends.fetch_sub(1, Ordering::SeqCst);
            return Ok(Delivery::Rejected("muted in this group".into()));
        }
        self.sent
            .lock()
            .unwrap()
            .push((stream.to_string(), text.to_owned()));
        Ok(Delivery::Sent)
    }
    async fn append_context(&self, stream: &StreamId, note: &str) -> Result<(), HostError> {
        self.notes
            .lock()
            .unwrap()
            .push((stream.to_string(), note.to_owned()));
        Ok(())
    }
    async fn recent_messages(
        &self,
        _stream: &StreamId,
        _limit: usize,
    ) -> Result<Vec<ChatLine>, HostError> {
        Ok(Vec::new())
    }
    async fn jargon(&self, _stream: &StreamId, _text: &str) -> Result<Vec<Jargon>, HostError> {
        Ok(Vec::new())
    }
    async fn persona(&self) -> Persona {
        Persona::default()
    }
    async fn search_users(
        &self,
        query: &mai_core::host::UserQuery,
    ) -> Result<Vec<mai_core::host::UserHit>, HostError> {
        Ok(self
            .users
            .iter()
            .filter(|hit| {
                query
                    .keywords
                    .iter()
                    .any(|k| hit.matched.contains(k.as_str()))
            })
            .cloned()
            .collect())
    }
    async fn list_apis(&self) -> Result<Vec<mai_core::host::PluginApi>, HostError> {
        Ok(self.apis.clone())
    }
    async fn call_api(
        &self,
        _name: &str,
        _args: serde_json::Value,
    ) -> Result<serde_json::Value, HostError> {
        self.api_calls.fetch_add(1, Ordering::SeqCst);
        Ok(serde_json::json!({"ok": true}))
    }
}

type Rule = dyn Fn(&ChatRequest) -> Result<ChatResponse, ModelError> + Send + Sync;

/// A model that answers by rule: titles and polish are handled, agent requests go to `agent`.
pub struct RuleModel {
    agent: Box<Rule>,
    pub agent_calls: AtomicUsize,
    pub requests: Mutex<Vec<ChatRequest>>,
    /// Make polish requests fail.
    pub polish_fails: std::sync::atomic::AtomicBool,
}

impl RuleModel {
    pub fn new(
        agent: impl Fn(&ChatRequest) -> Result<ChatResponse, ModelError> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(RuleModel {
            agent: Box::new(agent),
            agent_calls: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            polish_fails: Default::default(),
        })
    }

    pub fn agent_requests(&self) -> Vec<ChatRequest> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.purpose == ModelPurpose::Agent)
            .cloned()
            .collect()
    }
}

#[async_trait]
impl ChatModel for RuleModel {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        self.requests.lock().unwrap().push(req.clone());
        match req.purpose {
            ModelPurpose::Title => Ok(ChatResponse::text("A generated title")),
            ModelPurpose::Replyer => {
                if self.polish_fails.load(Ordering::SeqCst) {
                    return Err(ModelError::Provider {
                        message: "polish model down".into(),
                        retryable: false,
                    });
                }
                // A fixed marker so tests can tell a text was polished.
                Ok(ChatResponse::text("✨ polished"))
            }
            ModelPurpose::Agent => {
                self.agent_calls.fetch_add(1, Ordering::SeqCst);
                (self.agent)(req)
            }
        }
    }
}

/// A clock the test moves by hand.
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new() -> Arc<Self> {
        Arc::new(ManualClock(Mutex::new(Utc::now())))
    }
    /// A clock that starts at `rfc3339`.
    #[allow(dead_code)]
    pub fn at(rfc3339: &str) -> Arc<Self> {
        let start = DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .with_timezone(&Utc);
        Arc::new(ManualClock(Mutex::new(start)))
    }
    pub fn advance(&self, by: chrono::Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// An engine over a SQLite file in a temp dir.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub engine: Arc<Engine>,
    pub host: Arc<RecordingHost>,
    pub events: broadcast::Receiver<TaskEvent>,
}

pub fn test_config() -> Config {
    let mut config = Config::default();
    config.polish.enabled = false;
    config.send.retry_base_ms = 1;
    config.permission.users = vec!["qq:user".into()];
    config.permission.admins = vec!["qq:admin".into()];
    config
}

pub async fn engine_at(
    db: &Path,
    config: Config,
    model: Arc<dyn ChatModel>,
    host: Arc<RecordingHost>,
    registry: Arc<ToolRegistry>,
    clock: Arc<dyn Clock>,
) -> Arc<Engine> {
    let store = SqliteStore::open(db).await.unwrap();
    Engine::new(EngineDeps {
        store: Arc::new(store),
        model,
        host,
        registry,
        config: Arc::new(LiveConfig::new(config).unwrap()),
        prompts: Arc::new(Prompts::embedded()),
        clock,
        files_root: None,
    })
    .await
    .unwrap()
}

/// A host offering one plugin API, `weather.today`.
pub fn host_with_weather_api() -> RecordingHost {
    RecordingHost {
        apis: vec![mai_core::host::PluginApi {
            name: "weather.today".into(),
            description: "weather".into(),
            plugin: "weather".into(),
        }],
        ..RecordingHost::default()
    }
}

/// An engine (not started) with every optional tool group on: files under `dir/files`, the
/// shell, sub-agents, and `weather.today` allowlisted (see [`host_with_weather_api`]).
pub async fn engine_with_every_tool(
    dir: &Path,
    mut config: Config,
    model: Arc<dyn ChatModel>,
    host: Arc<RecordingHost>,
) -> Arc<Engine> {
    config.shell.enabled = true;
    config.subagent.enabled = true;
    config.plugin_api.allowlist = vec!["weather.today".into()];
    Engine::new(EngineDeps {
        store: Arc::new(SqliteStore::open(&dir.join("tasks.db")).await.unwrap()),
        model,
        host,
        registry: Arc::new(ToolRegistry::new()),
        config: Arc::new(LiveConfig::new(config).unwrap()),
        prompts: Arc::new(Prompts::embedded()),
        clock: Arc::new(mai_core::clock::SystemClock),
        files_root: Some(dir.join("files")),
    })
    .await
    .unwrap()
}

impl Harness {
    pub async fn start(config: Config, model: Arc<dyn ChatModel>) -> Harness {
        Self::start_with(
            config,
            model,
            Arc::new(ToolRegistry::new()),
            Arc::new(mai_core::clock::SystemClock),
        )
        .await
    }

    pub async fn start_with(
        config: Config,
        model: Arc<dyn ChatModel>,
        registry: Arc<ToolRegistry>,
        clock: Arc<dyn Clock>,
    ) -> Harness {
        Self::start_with_host(
            config,
            model,
            registry,
            clock,
            Arc::new(RecordingHost::default()),
        )
        .await
    }

    /// As [`Harness::start_with`], over a host the test prepared.
    pub async fn start_with_host(
        config: Config,
        model: Arc<dyn ChatModel>,
        registry: Arc<ToolRegistry>,
        clock: Arc<dyn Clock>,
        host: Arc<RecordingHost>,
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine_at(
            &dir.path().join("tasks.db"),
            config,
            model,
            host.clone(),
            registry,
            clock,
        )
        .await;
        let events = engine.subscribe();
        engine.start().await.unwrap();
        Harness {
            dir,
            engine,
            host,
            events,
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("tasks.db")
    }

    /// Waits (bounded) for an event matching `pred`.
    pub async fn wait_for(&mut self, what: &str, pred: impl Fn(&TaskEvent) -> bool) -> TaskEvent {
        wait_for(&mut self.events, what, pred).await
    }

    /// Waits for `id` to reach `status`.
    pub async fn wait_status(&mut self, id: TaskId, status: TaskStatus) {
        self.wait_for(&format!("{id} {status}"), |e| {
            matches!(e, TaskEvent::Status { task_id, status: s, .. } if *task_id == id && *s == status)
        })
        .await;
    }
}

pub async fn wait_for(
    events: &mut broadcast::Receiver<TaskEvent>,
    what: &str,
    pred: impl Fn(&TaskEvent) -> bool,
) -> TaskEvent {
    let deadline = Duration::from_secs(20);
    let result = tokio::time::timeout(deadline, async {
        loop {
            match events.recv().await {
                Ok(event) if pred(&event) => return event,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => {
                    panic!("event stream closed waiting for {what}")
                }
            }
        }
    })
    .await;
    result.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

pub fn caller(user: &str, role: Role, stream: &str) -> Caller {
    Caller::person(
        mai_core::ids::PersonId::new("qq", user).unwrap(),
        role,
        StreamId::new(stream).unwrap(),
        None,
    )
}

pub async fn record(engine: &Engine, id: TaskId) -> TaskRecord {
    engine
        .get(&caller("admin", Role::Admin, "s"), id)
        .await
        .unwrap()
}

/// The roles of a task's conversation messages in its history, in order (read as an admin).
pub async fn message_roles(engine: &Engine, id: TaskId) -> Vec<String> {
    engine
        .history(&caller("admin", Role::Admin, "s"), &id.short())
        .await
        .unwrap()
        .entries
        .iter()
        .filter(|e| e.kind == mai_core::store::HistoryKind::Message)
        .map(|e| e.payload["role"].as_str().unwrap().to_owned())
        .collect()
}
