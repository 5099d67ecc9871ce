//! Test doubles shared by the engine benchmarks (`benches/round.rs`) and the load generator
//! (`examples/loadgen.rs`): a host that only counts, an in-process model that answers at once
//! from a script, a no-op tool, and an engine over a SQLite file.
//!
//! Included with `#[path]` (not a crate), so each user compiles only what it calls.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mai_core::config::{Config, LiveConfig};
use mai_core::host::{ChatLine, Delivery, Host, HostError, Jargon, Persona};
use mai_core::ids::StreamId;
use mai_core::model::{
    ChatModel, ChatRequest, ChatResponse, MessageRole, ModelError, ModelPurpose, ToolCall,
};
use mai_core::role::Role;
use mai_core::store::{
    HistoryEntry, NewHistoryEntry, Resolved, SaveOutcome, StoreError, TaskFilter, TaskStore,
    TaskWrite,
};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use mai_core::tool::{
    ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use mai_engine::Caller;
use mai_engine::Prompts;
use mai_engine::TaskEvent;
use mai_engine::{Engine, EngineDeps};
use mai_store::SqliteStore;
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// The user every benchmark task belongs to (a configured user, so `ask_user` passes its gate).
pub const USER: &str = "bench";

/// A host that counts sends and records nothing.
#[derive(Default)]
pub struct NullHost {
    pub sent: AtomicUsize,
}

#[async_trait]
impl Host for NullHost {
    async fn send_text(&self, _stream: &StreamId, _text: &str) -> Result<Delivery, HostError> {
        self.sent.fetch_add(1, Ordering::Relaxed);
        Ok(Delivery::Sent)
    }
    async fn append_context(&self, _stream: &StreamId, _note: &str) -> Result<(), HostError> {
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
}

/// What the in-process model does with an agent request.
#[derive(Debug, Clone, Copy)]
pub enum Script {
    /// Calls the no-op tool until the conversation holds this many tool results, then answers.
    ToolRounds(usize),
    /// Asks the user first; answers once the question has its result.
    AskFirst,
}

/// A model that answers at once, in process.
pub struct InstantModel {
    script: Script,
}

impl InstantModel {
    pub fn new(script: Script) -> Arc<Self> {
        Arc::new(InstantModel { script })
    }
}

/// The number of tool results already in the conversation.
pub fn tool_results(req: &ChatRequest) -> usize {
    req.messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .count()
}

#[async_trait]
impl ChatModel for InstantModel {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        if req.purpose != ModelPurpose::Agent {
            return Ok(ChatResponse::text("a title"));
        }
        let done = tool_results(req);
        let mut response = match self.script {
            // A new argument each round, as a model that makes progress writes them (the same
            // call again and again is what the loop guard stops).
            Script::ToolRounds(rounds) if done < rounds => ChatResponse::tool_calls(
                "",
                vec![ToolCall::new(
                    format!("call_{done}"),
                    "noop",
                    json!({"step": done}),
                )],
            ),
            Script::AskFirst if done == 0 => ChatResponse::tool_calls(
                "",
                vec![ToolCall::new(
                    "call_ask",
                    "ask_user",
                    json!({"question": "Which volume should I check?"}),
                )],
            ),
            _ => ChatResponse::text("done: all volumes are below 80%"),
        };
        // Providers report usage (streamed calls ask for it): the engine records it per round.
        response.usage = Some(mai_core::model::Usage {
            prompt_tokens: 1_000 + 50 * done as u64,
            completion_tokens: 20,
            total_tokens: 1_020 + 50 * done as u64,
            cached_tokens: 800,
        });
        Ok(response)
    }
}

/// A tool that does nothing.
struct Noop;

#[async_trait]
impl ToolHandler for Noop {
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        Ok(json!({"success": true}))
    }
}

/// A registry holding the no-op tool (the engine adds its own tools).
pub fn registry() -> Arc<ToolRegistry> {
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "noop",
            "Do nothing.",
            json!({"type": "object", "properties": {}}),
            Visibility::Essential,
            Role::Guest,
            Arc::new(Noop),
        )
        .unwrap(),
    );
    registry
}

/// Polish off (no model call per reply), the benchmark user configured.
pub fn bench_config(max_rounds: u32) -> Config {
    let mut config = Config::default();
    config.polish.enabled = false;
    config.task.max_rounds = max_rounds;
    config.permission.users = vec![format!("qq:{USER}")];
    // One benchmark user starts hundreds of tasks: a load, not a flood to refuse.
    config.limits.max_active_per_requester = u32::MAX;
    config.limits.max_active_per_stream = u32::MAX;
    config
}

/// A started engine over the SQLite file `db`.
pub async fn engine(
    db: &Path,
    config: Config,
    model: Arc<dyn ChatModel>,
    host: Arc<NullHost>,
) -> Arc<Engine> {
    let store = SqliteStore::open(db).await.unwrap();
    engine_over(Arc::new(store), config, model, host).await
}

/// A started engine over `store`.
pub async fn engine_over(
    store: Arc<dyn TaskStore>,
    config: Config,
    model: Arc<dyn ChatModel>,
    host: Arc<NullHost>,
) -> Arc<Engine> {
    let engine = Engine::new(EngineDeps {
        store,
        model,
        host,
        registry: registry(),
        config: Arc::new(LiveConfig::new(config).unwrap()),
        prompts: Arc::new(Prompts::embedded()),
        clock: Arc::new(mai_core::clock::SystemClock),
        files_root: None,
    })
    .await
    .unwrap();
    engine.start().await.unwrap();
    engine
}

/// Call counts and total wall time per operation, for timing breakdowns.
#[derive(Default)]
pub struct Timings(Mutex<BTreeMap<&'static str, (u64, Duration)>>);

impl Timings {
    pub async fn time<T>(&self, what: &'static str, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = work.await;
        let spent = started.elapsed();
        let mut map = self.0.lock().unwrap();
        let entry = map.entry(what).or_default();
        entry.0 += 1;
        entry.1 += spent;
        out
    }

    /// `(operation, calls, total)`, by operation name.
    pub fn snapshot(&self) -> Vec<(&'static str, u64, Duration)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(what, (calls, total))| (*what, *calls, *total))
            .collect()
    }

    pub fn reset(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// A store that times every call of the store it wraps.
pub struct TimedStore {
    pub inner: Arc<dyn TaskStore>,
    pub timings: Arc<Timings>,
}

#[async_trait]
impl TaskStore for TimedStore {
    async fn insert(&self, task: &TaskRecord) -> Result<(), StoreError> {
        self.timings
            .time("store.insert", self.inner.insert(task))
            .await
    }
    async fn insert_admitted(
        &self,
        task: &TaskRecord,
        query: &mai_core::store::CountQuery<'_>,
        admit: mai_core::store::Admit,
        usage: &[mai_core::usage::UsageRecord],
    ) -> Result<Result<(), String>, StoreError> {
        self.timings
            .time(
                "store.insert_admitted",
                self.inner.insert_admitted(task, query, admit, usage),
            )
            .await
    }
    async fn save(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
    ) -> Result<SaveOutcome, StoreError> {
        self.timings
            .time("store.save", self.inner.save(task, expected))
            .await
    }
    async fn counts(
        &self,
        query: &mai_core::store::CountQuery<'_>,
    ) -> Result<mai_core::store::TaskCounts, StoreError> {
        self.timings
            .time("store.counts", self.inner.counts(query))
            .await
    }
    async fn checkpoint_with_usage(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
        usage: &[mai_core::usage::UsageRecord],
    ) -> Result<SaveOutcome, StoreError> {
        self.timings
            .time(
                "store.checkpoint",
                self.inner
                    .checkpoint_with_usage(task, expected, history, usage),
            )
            .await
    }
    async fn usage(
        &self,
        query: &mai_core::usage::UsageQuery,
    ) -> Result<Vec<mai_core::usage::UsageTotals>, StoreError> {
        self.timings
            .time("store.usage", self.inner.usage(query))
            .await
    }
    async fn checkpoint(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
    ) -> Result<SaveOutcome, StoreError> {
        self.timings
            .time(
                "store.checkpoint",
                self.inner.checkpoint(task, expected, history),
            )
            .await
    }
    async fn write(&self, writes: &[TaskWrite<'_>]) -> Result<SaveOutcome, StoreError> {
        self.timings
            .time("store.write", self.inner.write(writes))
            .await
    }
    async fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        self.timings.time("store.get", self.inner.get(id)).await
    }
    async fn update(
        &self,
        id: TaskId,
        change: mai_core::store::Change,
    ) -> Result<Option<TaskRecord>, StoreError> {
        self.timings
            .time("store.update", self.inner.update(id, change))
            .await
    }
    async fn claim(
        &self,
        id: TaskId,
        change: mai_core::store::Change,
        cap: Option<u32>,
    ) -> Result<mai_core::store::Claim, StoreError> {
        self.timings
            .time("store.claim", self.inner.claim(id, change, cap))
            .await
    }
    async fn count_in_states(
        &self,
        statuses: &[TaskStatus],
    ) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        self.timings
            .time(
                "store.count_in_states",
                self.inner.count_in_states(statuses),
            )
            .await
    }
    async fn record_usage(
        &self,
        records: &[mai_core::usage::UsageRecord],
    ) -> Result<(), StoreError> {
        self.timings
            .time("store.record_usage", self.inner.record_usage(records))
            .await
    }
    // Not timed: the shared-store seam, forwarded so a wrapped store behaves as itself.
    fn shared(&self) -> bool {
        self.inner.shared()
    }
    async fn renew_leases(
        &self,
    ) -> Result<Vec<(TaskId, Option<mai_core::lease::StopRequest>)>, StoreError> {
        self.inner.renew_leases().await
    }
    async fn expired_leases(
        &self,
    ) -> Result<Vec<(TaskId, Option<mai_core::lease::StopRequest>)>, StoreError> {
        self.inner.expired_leases().await
    }
    async fn release_leases(&self, instance: &str) -> Result<u64, StoreError> {
        self.inner.release_leases(instance).await
    }
    async fn request_stop(
        &self,
        id: TaskId,
        request: &mai_core::lease::StopRequest,
    ) -> Result<bool, StoreError> {
        self.inner.request_stop(id, request).await
    }
    async fn notices(&self) -> Result<Option<mai_core::store::Notices>, StoreError> {
        self.inner.notices().await
    }
    async fn resolve(&self, reference: &str) -> Result<Resolved, StoreError> {
        self.timings
            .time("store.resolve", self.inner.resolve(reference))
            .await
    }
    async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        self.timings
            .time("store.list", self.inner.list(filter))
            .await
    }
    async fn count_by_status(
        &self,
        filter: &TaskFilter,
    ) -> Result<Vec<(mai_core::task::TaskStatus, u64)>, StoreError> {
        self.timings
            .time("store.count_by_status", self.inner.count_by_status(filter))
            .await
    }
    async fn list_active(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.timings
            .time("store.list_active", self.inner.list_active())
            .await
    }
    async fn history(&self, id: TaskId, from_seq: u64) -> Result<Vec<HistoryEntry>, StoreError> {
        self.timings
            .time("store.history", self.inner.history(id, from_seq))
            .await
    }
    async fn append_history(
        &self,
        id: TaskId,
        entries: &[NewHistoryEntry],
    ) -> Result<(), StoreError> {
        self.timings
            .time(
                "store.append_history",
                self.inner.append_history(id, entries),
            )
            .await
    }
}

/// A model that times every call of the model it wraps.
pub struct TimedModel {
    pub inner: Arc<dyn ChatModel>,
    pub timings: Arc<Timings>,
}

#[async_trait]
impl ChatModel for TimedModel {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        self.timings
            .time("model.complete", self.inner.complete(req))
            .await
    }
}

/// The benchmark user in chat `stream`.
pub fn caller(stream: &str) -> Caller {
    Caller::person(
        mai_core::ids::PersonId::new("qq", USER).unwrap(),
        Role::User,
        StreamId::new(stream).unwrap(),
        None,
    )
}

/// Waits until `id` reaches `status`, on the event stream. Events are best effort: after a lag
/// the store is asked instead.
pub async fn wait_status(
    engine: &Engine,
    events: &mut broadcast::Receiver<TaskEvent>,
    id: TaskId,
    status: TaskStatus,
) {
    let deadline = Duration::from_secs(60);
    tokio::time::timeout(deadline, async {
        loop {
            match events.recv().await {
                Ok(TaskEvent::Status {
                    task_id, status: s, ..
                }) if task_id == id && s == status => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let task = engine.get(&caller("s"), id).await.unwrap();
                    if task.status == status {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => panic!("event stream closed"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {id} to be {status}"));
}

/// Resident set size of this process, in KiB (`VmRSS` in /proc/self/status).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
