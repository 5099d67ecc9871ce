//! Prometheus metrics of a running service (`GET /metrics`), on the official client
//! (`prometheus-client`, OpenMetrics text exposition).
//!
//! Owns the metric families and how they are fed: agent rounds and tool calls are counted from
//! the engine's event stream ([`Metrics::follow`]), model latency by the [`MeteredModel`]
//! decorator the binary wraps around the model before building the engine (which also records
//! each call's outcome in the [`Health`] the metrics carry for `GET /v1/health`), and tasks by state
//! are read through the task manager facade at scrape time (the store is the truth, events are
//! best-effort), as are the tokens, calls and cost by model and purpose (the engine's sums since
//! start). Must not: reach the store directly, or block the engine (a slow scrape never
//! holds up an event sender: the broadcast channel buffers).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, broadcast};

use mai_core::model::{ChatModel, ChatRequest, ChatResponse, ModelError, StreamDelta};
use mai_core::task::TaskStatus;
use mai_engine::Caller;
use mai_engine::Engine;
use mai_engine::EngineError;
use mai_engine::TaskEvent;

use crate::health::{Health, ModelTotals};

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Active states, gauged at scrape time. Terminal states grow without bound, so they are
/// counted as transitions (`mai_tasks_finished_total`) instead of listed from the store.
pub(crate) const ACTIVE_STATES: [TaskStatus; 5] = [
    TaskStatus::Scheduled,
    TaskStatus::Pending,
    TaskStatus::Running,
    TaskStatus::WaitingInput,
    TaskStatus::Paused,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    instance: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlannerLabels {
    tool: String,
    outcome: String,
    door: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    purpose: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    purpose: String,
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UsageLabels {
    model: String,
    purpose: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CostLabels {
    model: String,
    purpose: String,
    currency: String,
}

type CostCounter = Counter<f64, std::sync::atomic::AtomicU64>;

type HistogramFamily = Family<ModelLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 ms … ~100 s: title calls are fast, agent rounds with long answers are slow.
    Histogram::new(exponential_buckets(0.05, 2.0, 12))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counters stay consistent whatever a panicking holder was doing.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The service's metrics. Cheap to clone; all clones feed and render the same families.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    /// 1, labelled with the name of the instance that serves these metrics.
    instance: Family<InstanceLabels, Gauge>,
    tasks: Family<StateLabels, Gauge>,
    finished: Family<StateLabels, Counter>,
    rounds: Counter,
    tool_calls: Family<ToolLabels, Counter>,
    planner_calls: Family<PlannerLabels, Counter>,
    model_latency: HistogramFamily,
    /// Usage, brought up to the engine's sums at scrape time.
    model_tokens: Family<TokenLabels, Counter>,
    model_calls: Family<UsageLabels, Counter>,
    model_cost: Family<CostLabels, CostCounter>,
    lagged: Counter,
    bridge_connected: Gauge,
    bridge_held: Gauge,
    /// What `GET /v1/health` reports; carried here so every door with the metrics has it.
    health: Health,
    /// The engine's event stream, once [`Metrics::follow`] was called.
    feed: Mutex<Option<Arc<EventFeed>>>,
    /// Serializes setting the task gauges and encoding, so two scrapes never interleave.
    render: tokio::sync::Mutex<()>,
}

/// Registers `metric` under `name` with its `help` and returns it (a clone shares its value).
fn add<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

/// The model calls' metrics: latency, tokens, answered calls and cost.
struct ModelFamilies {
    latency: HistogramFamily,
    tokens: Family<TokenLabels, Counter>,
    calls: Family<UsageLabels, Counter>,
    cost: Family<CostLabels, CostCounter>,
}

/// The MaiBot bridge's gauges: connected, and parts held until it connects.
fn register_bridge(r: &mut Registry) -> (Gauge, Gauge) {
    let connected = add(
        r,
        "bridge_connected",
        "1 while a MaiBot bridge is connected to GET /v1/bridge, else 0 (always 0 with the \
         embedded host)",
        Gauge::default(),
    );
    let held = add(
        r,
        "bridge_held_parts",
        "Message parts held until a MaiBot bridge connects",
        Gauge::default(),
    );
    (connected, held)
}

impl ModelFamilies {
    fn register(r: &mut Registry) -> Self {
        ModelFamilies {
            latency: add(
                r,
                "model_request_duration_seconds",
                "Model call latency, by purpose (agent, replyer, title) and outcome (ok or error)",
                Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            ),
            tokens: add(
                r,
                "model_tokens",
                "Model tokens since start, by model, purpose (agent, subagent, title, polish) and \
                 kind (prompt, completion, cached; cached is part of prompt)",
                Family::default(),
            ),
            calls: add(
                r,
                "model_calls",
                "Answered model calls since start, by model and purpose",
                Family::default(),
            ),
            cost: add(
                r,
                "model_cost",
                "Model cost since start from [prices], by model, purpose and currency",
                Family::default(),
            ),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mai");
        let r = &mut registry;
        let instance = add(
            r,
            "instance",
            "1, labelled with the name of the instance serving these metrics ([server] \
             instance_id): several instances on one database are told apart by it",
            Family::<InstanceLabels, Gauge>::default(),
        );
        let tasks = add(
            r,
            "tasks",
            "Tasks in each active state, read from the task store at scrape time",
            Family::<StateLabels, Gauge>::default(),
        );
        let finished = add(
            r,
            "tasks_finished",
            "Tasks that reached a terminal state (completed, failed, cancelled) since start",
            Family::<StateLabels, Counter>::default(),
        );
        let rounds = add(
            r,
            "agent_rounds",
            "Agent-loop rounds started since start",
            Counter::default(),
        );
        let tool_calls = add(
            r,
            "tool_calls",
            "Agent-loop tool calls since start, by tool and outcome (ok or error)",
            Family::<ToolLabels, Counter>::default(),
        );
        let planner_calls = add(
            r,
            "planner_tool_calls",
            "Planner tool calls since start, by tool, outcome (ok, failed, invalid_arguments, \
             unknown_tool, permission_denied) and door (http or mcp)",
            Family::<PlannerLabels, Counter>::default(),
        );
        let model = ModelFamilies::register(r);
        let lagged = add(
            r,
            "events_missed",
            "Engine events the metrics missed because they fell behind (counts are then low)",
            Counter::default(),
        );
        let (bridge_connected, bridge_held) = register_bridge(r);
        Metrics {
            inner: Arc::new(Inner {
                registry,
                instance,
                tasks,
                finished,
                rounds,
                tool_calls,
                planner_calls,
                model_latency: model.latency,
                model_tokens: model.tokens,
                model_calls: model.calls,
                model_cost: model.cost,
                lagged,
                bridge_connected,
                bridge_held,
                health: Health::new(),
                feed: Mutex::new(None),
                render: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The service's health record (`GET /v1/health`).
    pub fn health(&self) -> &Health {
        &self.inner.health
    }

    /// Wraps a model so every call's latency is measured (and its outcome recorded for
    /// `GET /v1/health`); the binary installs this when it builds the engine.
    pub fn meter(&self, model: Arc<dyn ChatModel>) -> Arc<dyn ChatModel> {
        Arc::new(MeteredModel {
            inner: model,
            metrics: self.clone(),
        })
    }

    /// Starts counting `engine`'s events. Idempotent: only the first engine is followed (so the
    /// router and the binary may both call it without counting twice). Events are consumed in
    /// the background when a tokio runtime is running, and in any case at each render.
    pub fn follow(&self, engine: &Engine) {
        let mut feed = lock(&self.inner.feed);
        if feed.is_some() {
            return;
        }
        let new = Arc::new(EventFeed {
            events: tokio::sync::Mutex::new(engine.subscribe()),
            render_wants_it: Notify::new(),
        });
        *feed = Some(new.clone());
        drop(feed);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(new.run(self.clone()));
        }
    }

    /// The metrics in OpenMetrics text format. Every engine event emitted before this call is
    /// counted (pending events are drained first), so a scrape right after a task finished
    /// shows its rounds and tool calls.
    pub async fn render(&self, engine: &Engine) -> Result<String, EngineError> {
        let _one_render = self.inner.render.lock().await;
        let feed = lock(&self.inner.feed).clone();
        if let Some(feed) = feed {
            feed.drain(self).await;
        }
        self.inner
            .instance
            .get_or_create(&InstanceLabels {
                instance: engine.instance_id().to_owned(),
            })
            .set(1);
        self.count_tasks(engine).await?;
        self.count_usage(engine);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)
            .map_err(|e| EngineError::Internal(format!("could not encode metrics: {e}")))?;
        Ok(out)
    }

    async fn count_tasks(&self, engine: &Engine) -> Result<(), EngineError> {
        for (state, count) in active_counts(engine).await? {
            self.inner
                .tasks
                .get_or_create(&StateLabels {
                    state: state.as_str().to_owned(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        Ok(())
    }

    /// Brings the usage counters up to the engine's sums (they only grow).
    fn count_usage(&self, engine: &Engine) {
        let currency = engine.currency();
        for (model, purpose, sums) in engine.usage_sums() {
            let purpose = purpose.as_str().to_owned();
            for (kind, figure) in [
                ("prompt", sums.prompt_tokens),
                ("completion", sums.completion_tokens),
                ("cached", sums.cached_tokens),
            ] {
                let labels = TokenLabels {
                    model: model.clone(),
                    purpose: purpose.clone(),
                    kind: kind.to_owned(),
                };
                let counter = self.inner.model_tokens.get_or_create(&labels);
                counter.inc_by(figure.saturating_sub(counter.get()));
            }
            let labels = UsageLabels {
                model: model.clone(),
                purpose: purpose.clone(),
            };
            let calls = self.inner.model_calls.get_or_create(&labels);
            calls.inc_by(sums.calls.saturating_sub(calls.get()));
            let labels = CostLabels {
                model,
                purpose,
                currency: currency.clone(),
            };
            let cost = self.inner.model_cost.get_or_create(&labels);
            let more = sums.cost - cost.get();
            if more > 0.0 {
                cost.inc_by(more);
            }
        }
    }

    /// What the health history (`crate::trend`) samples, read from these metrics: the tasks
    /// finished since start (`mai_tasks_finished_total`, every state — the events emitted before
    /// this call are counted first, as for a scrape) and the model calls' totals (the metering
    /// behind `mai_model_request_duration_seconds`).
    pub async fn trend_figures(&self) -> (u64, ModelTotals) {
        let _one_render = self.inner.render.lock().await;
        let feed = lock(&self.inner.feed).clone();
        if let Some(feed) = feed {
            feed.drain(self).await;
        }
        let finished = TaskStatus::ALL
            .into_iter()
            .filter(|status| status.is_terminal())
            .filter_map(|status| {
                let labels = StateLabels {
                    state: status.as_str().to_owned(),
                };
                self.inner
                    .finished
                    .get(&labels)
                    .map(|counter| counter.get())
            })
            .sum();
        (finished, self.inner.health.model_totals())
    }

    /// Sets the bridge gauges (the HTTP API reads the MaiBot host at scrape time).
    pub fn set_bridge(&self, connected: bool, held: usize) {
        self.inner.bridge_connected.set(i64::from(connected));
        self.inner
            .bridge_held
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    /// Counts one planner tool call a door (`http` or `mcp`) ran; a request the door refused
    /// before calling (no token, bad JSON, an unknown tool over HTTP) is not counted.
    pub fn count_planner_call(&self, tool: &str, outcome: &str, door: &str) {
        self.inner
            .planner_calls
            .get_or_create(&PlannerLabels {
                tool: tool.to_owned(),
                outcome: outcome.to_owned(),
                door: door.to_owned(),
            })
            .inc();
    }

    fn observe(&self, event: &TaskEvent) {
        match event {
            TaskEvent::Round { .. } => {
                self.inner.rounds.inc();
            }
            TaskEvent::ToolResult { tool, ok, .. } => {
                self.inner
                    .tool_calls
                    .get_or_create(&ToolLabels {
                        tool: tool.clone(),
                        outcome: outcome(*ok).to_owned(),
                    })
                    .inc();
            }
            TaskEvent::Status { status, .. } if status.is_terminal() => {
                self.inner
                    .finished
                    .get_or_create(&StateLabels {
                        state: status.as_str().to_owned(),
                    })
                    .inc();
            }
            _ => {}
        }
    }

    fn observe_model_call(&self, purpose: &str, error: Option<&ModelError>, seconds: f64) {
        let ok = error.is_none();
        self.inner.health.model_call(error.map(ToString::to_string));
        self.inner.health.model_timed(ok, seconds);
        self.inner
            .model_latency
            .get_or_create(&ModelLabels {
                purpose: purpose.to_owned(),
                outcome: outcome(ok).to_owned(),
            })
            .observe(seconds);
    }
}

fn outcome(ok: bool) -> &'static str {
    if ok { "ok" } else { "error" }
}

/// How many tasks are in each active state, in [`ACTIVE_STATES`]' order: one grouped count over
/// the active states in the store, not a read of every active task's record (nor a count of
/// every finished one), so a scrape or a health sample stays cheap however many tasks are
/// scheduled, waiting or kept.
pub(crate) async fn active_counts(engine: &Engine) -> Result<Vec<(TaskStatus, u64)>, EngineError> {
    let counts = engine
        .count_in_states(&metrics_reader()?, &ACTIVE_STATES)
        .await?;
    Ok(ACTIVE_STATES
        .into_iter()
        .map(|state| {
            let count = counts
                .iter()
                .find(|(status, _)| *status == state)
                .map_or(0, |(_, n)| *n);
            (state, count)
        })
        .collect())
}

/// Metrics read every task (as admin); the owner only names the reader.
fn metrics_reader() -> Result<Caller, EngineError> {
    Caller::admin_reader("metrics").map_err(|e| EngineError::Internal(e.to_string()))
}

/// The engine's event stream, consumed by a background task and, at each render, drained by
/// the renderer (which asks the background task to let go of it first).
struct EventFeed {
    events: tokio::sync::Mutex<broadcast::Receiver<TaskEvent>>,
    render_wants_it: Notify,
}

impl EventFeed {
    async fn run(self: Arc<Self>, metrics: Metrics) {
        loop {
            let mut events = self.events.lock().await;
            tokio::select! {
                biased;
                // Release the receiver; tokio's mutex is fair, so the renderer gets it next.
                () = self.render_wants_it.notified() => {}
                received = events.recv() => match received {
                    Ok(event) => metrics.observe(&event),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        metrics.inner.lagged.inc_by(missed);
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }

    async fn drain(&self, metrics: &Metrics) {
        self.render_wants_it.notify_one();
        let mut events = self.events.lock().await;
        loop {
            match events.try_recv() {
                Ok(event) => metrics.observe(&event),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    metrics.inner.lagged.inc_by(missed);
                }
                Err(_) => return,
            }
        }
    }
}

/// A [`ChatModel`] that measures how long each call of the model it wraps takes.
pub struct MeteredModel {
    inner: Arc<dyn ChatModel>,
    metrics: Metrics,
}

impl MeteredModel {
    pub fn new(inner: Arc<dyn ChatModel>, metrics: Metrics) -> Self {
        MeteredModel { inner, metrics }
    }
}

#[async_trait]
impl ChatModel for MeteredModel {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let started = Instant::now();
        let result = self.inner.complete(req).await;
        self.metrics.observe_model_call(
            req.purpose.as_str(),
            result.as_ref().err(),
            started.elapsed().as_secs_f64(),
        );
        result
    }

    async fn complete_streaming(
        &self,
        req: &ChatRequest,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ChatResponse, ModelError> {
        let started = Instant::now();
        let result = self.inner.complete_streaming(req, on_delta).await;
        self.metrics.observe_model_call(
            req.purpose.as_str(),
            result.as_ref().err(),
            started.elapsed().as_secs_f64(),
        );
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mai_core::model::{ChatMessage, ModelPurpose};

    struct Echo;

    #[async_trait]
    impl ChatModel for Echo {
        async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
            if req.messages.is_empty() {
                return Err(ModelError::Config {
                    message: "no messages".into(),
                });
            }
            Ok(ChatResponse::text("hi"))
        }
    }

    fn encode(metrics: &Metrics) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &metrics.inner.registry).unwrap();
        out
    }

    #[tokio::test]
    async fn metered_model_records_latency_by_purpose_and_outcome() {
        let metrics = Metrics::new();
        let model = metrics.meter(Arc::new(Echo));
        let ok = ChatRequest::new(ModelPurpose::Title, vec![ChatMessage::user("x")]);
        let bad = ChatRequest::new(ModelPurpose::Agent, vec![]);
        assert!(model.complete(&ok).await.is_ok());
        assert!(model.complete(&bad).await.is_err());
        let text = encode(&metrics);
        assert!(
            text.contains(
                "mai_model_request_duration_seconds_count{purpose=\"title\",outcome=\"ok\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "mai_model_request_duration_seconds_count{purpose=\"agent\",outcome=\"error\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn events_feed_the_counters() {
        let metrics = Metrics::new();
        let id = mai_core::task::TaskId::new();
        metrics.observe(&TaskEvent::Round {
            task_id: id,
            round: 1,
        });
        metrics.observe(&TaskEvent::ToolResult {
            task_id: id,
            round: 1,
            tool: "search_memory".into(),
            ok: false,
            preview: String::new(),
        });
        metrics.observe(&TaskEvent::Status {
            task_id: id,
            status: TaskStatus::Completed,
            reason: "done".into(),
        });
        metrics.observe(&TaskEvent::Status {
            task_id: id,
            status: TaskStatus::Running,
            reason: "started".into(),
        });
        let text = encode(&metrics);
        assert!(text.contains("mai_agent_rounds_total 1"), "{text}");
        assert!(
            text.contains("mai_tool_calls_total{tool=\"search_memory\",outcome=\"error\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("mai_tasks_finished_total{state=\"completed\"} 1"),
            "{text}"
        );
        assert!(!text.contains("state=\"running\"} 1"), "{text}");
    }
}
