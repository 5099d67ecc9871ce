//! The request mix of the HTTP/MCP load generator, shared by the example (`loadgen_http`, 10 000
//! requests) and the always-run test (`tests/load_mix.rs`, a small size).
//!
//! Owns: a real service (engine over a SQLite file, embedded host over another, a model that
//! answers at once, the planner registry) behind the real HTTP API router with the MCP router
//! nested at `/mcp`, served on 127.0.0.1:0; a deterministic mix of valid and malformed requests
//! (one in five malformed); and the report (statuses, latencies, requests whose status was not
//! the expected class). It must not decide pass/fail beyond counting: callers do.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mai_core::clock::SystemClock;
use mai_core::config::{Config, LiveConfig, ServerConfig};
use mai_core::host::{Delivery, HostError, StreamInfo};
use mai_core::model::{ChatModel, ChatRequest, ChatResponse, ModelError};
use mai_core::tool::ToolRegistry;
use mai_engine::Prompts;
use mai_engine::planner_registry;
use mai_engine::{Engine, EngineDeps};
use mai_host::{ChannelSender, EmbeddedConfig, EmbeddedHost};
use mai_server::{HttpOptions, Metrics, ServerState};
use mai_store::SqliteStore;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub const TOKEN: &str = "load-token";
/// The door's body limit in this run (the default, 1 MiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
const MCP_ACCEPT: &str = "application/json, text/event-stream";
const MCP_PROTOCOL: &str = "2025-06-18";

/// A model that answers every request at once with a short text (tasks that run finish in one
/// round; the load is on the doors, not the model).
struct AnswersAtOnce;

#[async_trait]
impl ChatModel for AnswersAtOnce {
    async fn complete(&self, _req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        Ok(ChatResponse::text("done"))
    }
}

/// A `qq` channel that accepts every message (replies of tasks that ran).
struct AcceptingChannel;

#[async_trait]
impl ChannelSender for AcceptingChannel {
    async fn send(&self, _stream: &StreamInfo, _text: &str) -> Result<Delivery, HostError> {
        Ok(Delivery::Sent)
    }
}

/// The service under load, served on loopback.
pub struct Target {
    _dir: tempfile::TempDir,
    pub engine: Arc<Engine>,
    pub addr: SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for Target {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Target {
    pub async fn start() -> Result<Target, BoxError> {
        let dir = tempfile::tempdir()?;
        let metrics = Metrics::new();
        // One database file for tasks and chat tables, as `mai-agent serve` has it.
        let store = SqliteStore::open(dir.path().join("mai-agent.db")).await?;
        let host = Arc::new(
            EmbeddedHost::with_database(store.database().clone(), EmbeddedConfig::default())
                .await?,
        );
        host.register_channel("qq", Arc::new(AcceptingChannel));
        let mut config = Config::default();
        config.polish.enabled = false;
        config.permission.users = vec!["qq:user".into()];
        config.permission.admins = vec!["qq:admin".into()];
        // The mix creates thousands of delayed tasks for one person in one chat: a load, not a
        // flood to refuse (the caps have their own tests).
        let many = u32::MAX;
        config.limits.max_active_per_requester = many;
        config.limits.max_active_per_stream = many;
        config.limits.max_cron_per_requester = many;
        config.limits.max_cron_per_stream = many;
        let engine = Engine::new(EngineDeps {
            store: Arc::new(store),
            model: metrics.meter(Arc::new(AnswersAtOnce)),
            host: host.clone(),
            registry: Arc::new(ToolRegistry::new()),
            config: Arc::new(LiveConfig::new(config)?),
            prompts: Arc::new(Prompts::embedded()),
            clock: Arc::new(SystemClock),
            files_root: None,
        })
        .await?;
        engine.start().await?;
        let planner = Arc::new(planner_registry(&engine, None)?);
        let state = ServerState {
            engine: engine.clone(),
            host,
            bridge: None,
            planner,
            metrics,
        };
        let shutdown = CancellationToken::new();
        let options = HttpOptions {
            mcp: Some(mai_server::mcp::http_router_until(
                state.clone(),
                shutdown.clone(),
            )),
            ..HttpOptions::new(ServerConfig {
                auth_token: Some(TOKEN.into()),
                max_body_bytes: MAX_BODY_BYTES,
                ..ServerConfig::default()
            })
        };
        let router = mai_server::router(state, options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // As `mai-agent serve` does (TCP_NODELAY on every connection).
        let listener = mai_server::http::listener(listener);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        Ok(Target {
            _dir: dir,
            engine,
            addr,
            shutdown,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// What a request of the mix must get back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// 2xx.
    Success,
    /// 4xx (a client mistake).
    ClientError,
    /// 200 carrying a JSON-RPC error (an MCP mistake of the host, e.g. an unknown tool).
    RpcError,
}

/// One kind of request in the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    // valid (80 %)
    ListTasks,
    GetTask,
    TaskHistory,
    CreateDelayed,
    CreateInstant,
    PlannerList,
    PlannerStatus,
    PlannerCreate,
    Board,
    MessagePlain,
    MessageCommand,
    McpToolsList,
    McpCallList,
    McpCallStatus,
    Healthz,
    Metrics,
    OpenApi,
    // malformed (20 %)
    BadJson,
    WrongType,
    UnknownField,
    HugeBody,
    UnknownId,
    BadHost,
    NoToken,
    DeepNesting,
    ManyKeys,
    PlannerBadArgs,
    McpUnknownSession,
    McpUnknownTool,
    McpBadJson,
    MissingContentType,
}

/// Valid kinds and their weights (out of 80).
const VALID: [(Kind, usize); 17] = [
    (Kind::ListTasks, 8),
    (Kind::GetTask, 8),
    (Kind::TaskHistory, 4),
    (Kind::CreateDelayed, 6),
    (Kind::CreateInstant, 2),
    (Kind::PlannerList, 6),
    (Kind::PlannerStatus, 4),
    (Kind::PlannerCreate, 4),
    (Kind::Board, 6),
    (Kind::MessagePlain, 6),
    (Kind::MessageCommand, 4),
    (Kind::McpToolsList, 8),
    (Kind::McpCallList, 6),
    (Kind::McpCallStatus, 2),
    (Kind::Healthz, 2),
    (Kind::Metrics, 2),
    (Kind::OpenApi, 2),
];

const MALFORMED: [Kind; 14] = [
    Kind::BadJson,
    Kind::WrongType,
    Kind::UnknownField,
    Kind::HugeBody,
    Kind::UnknownId,
    Kind::BadHost,
    Kind::NoToken,
    Kind::DeepNesting,
    Kind::ManyKeys,
    Kind::PlannerBadArgs,
    Kind::McpUnknownSession,
    Kind::McpUnknownTool,
    Kind::McpBadJson,
    Kind::MissingContentType,
];

impl Kind {
    /// The kind of request number `i`: a fixed permutation of 100 slots, the first 20 malformed.
    pub fn of(i: usize) -> Kind {
        let slot = (i.wrapping_mul(7919)) % 100;
        if slot < 20 {
            return MALFORMED[(i / 100 + slot) % MALFORMED.len()];
        }
        let mut left = slot - 20;
        for (kind, weight) in VALID {
            if left < weight {
                return kind;
            }
            left -= weight;
        }
        Kind::Healthz
    }

    pub fn is_malformed(self) -> bool {
        self >= Kind::BadJson
    }

    fn expect(self) -> Expect {
        match self {
            Kind::McpUnknownTool => Expect::RpcError,
            kind if kind.is_malformed() => Expect::ClientError,
            _ => Expect::Success,
        }
    }
}

/// What the load saw.
#[derive(Default)]
pub struct Report {
    pub total: usize,
    pub by_status: BTreeMap<u16, usize>,
    /// Requests that got no HTTP answer at all (connection reset, timeout), bodies over the
    /// limit excepted (below).
    pub transport_errors: usize,
    /// Bodies over the limit whose sender saw the connection closed before it finished
    /// sending: the server answered 413 and closed at once (it does not read the rest), so
    /// the client may get a broken pipe instead of the 413. Refused either way.
    pub cut_off_oversized: usize,
    pub valid: Vec<Duration>,
    pub malformed: Vec<Duration>,
    /// Latencies by kind of request.
    pub by_kind: BTreeMap<Kind, Vec<Duration>>,
    /// Requests whose answer was not of the expected class, by kind.
    pub unexpected: BTreeMap<String, usize>,
    /// A few examples of unexpected answers: kind, status, start of the body.
    pub samples: Vec<String>,
    pub elapsed: Duration,
}

impl Report {
    pub fn server_errors(&self) -> usize {
        self.by_status
            .iter()
            .filter(|(status, _)| **status >= 500)
            .map(|(_, n)| n)
            .sum()
    }

    pub fn print(&self) {
        println!(
            "total {} requests in {:.2} s ({:.0} req/s)",
            self.total,
            self.elapsed.as_secs_f64(),
            self.total as f64 / self.elapsed.as_secs_f64().max(1e-9)
        );
        let statuses: Vec<String> = self
            .by_status
            .iter()
            .map(|(status, n)| format!("{status}: {n}"))
            .collect();
        println!("statuses: {}", statuses.join(", "));
        println!(
            "5xx: {}   transport errors: {}   oversized bodies cut off while sending: {}   \
             answers of the wrong class: {}",
            self.server_errors(),
            self.transport_errors,
            self.cut_off_oversized,
            self.unexpected.values().sum::<usize>()
        );
        for (kind, n) in &self.unexpected {
            println!("  unexpected {kind}: {n}");
        }
        for sample in &self.samples {
            println!("  e.g. {sample}");
        }
        let mut all: Vec<Duration> = self.valid.iter().chain(&self.malformed).copied().collect();
        println!("latency   overall   {}", percentiles(&mut all));
        let mut valid = self.valid.clone();
        println!("latency   valid     {}", percentiles(&mut valid));
        let mut malformed = self.malformed.clone();
        println!("latency   malformed {}", percentiles(&mut malformed));
    }

    /// One latency line per kind of request.
    pub fn print_by_kind(&self) {
        for (kind, samples) in &self.by_kind {
            let mut samples = samples.clone();
            println!(
                "  {:<20} {}",
                format!("{kind:?}"),
                percentiles(&mut samples)
            );
        }
    }
}

/// `n=… p50 p90 p99 max` in milliseconds.
pub fn percentiles(samples: &mut [Duration]) -> String {
    if samples.is_empty() {
        return "n=0".into();
    }
    samples.sort_unstable();
    let at = |p: f64| {
        let rank = ((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
        samples[rank - 1].as_secs_f64() * 1000.0
    };
    format!(
        "n={:<5} p50 {:7.2} ms  p90 {:7.2} ms  p99 {:7.2} ms  max {:7.2} ms",
        samples.len(),
        at(0.50),
        at(0.90),
        at(0.99),
        at(1.0)
    )
}

/// One worker's MCP session (initialized on first use).
struct McpSession {
    id: String,
    next_id: u64,
}

struct Shared {
    client: reqwest::Client,
    base: String,
    /// Ids of tasks that exist (seeded before the run).
    task_ids: Vec<String>,
    huge_body: String,
    deep_body: String,
    many_keys_body: String,
}

/// Runs `requests` requests of the mix with `concurrency` workers against `target`.
pub async fn run(target: &Target, requests: usize, concurrency: usize) -> Result<Report, BoxError> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .timeout(Duration::from_secs(60))
        .build()?;
    let base = format!("http://{}", target.addr);
    let task_ids = seed_tasks(&client, &base).await?;
    let shared = Arc::new(Shared::new(client, base, task_ids));
    let report = Arc::new(Mutex::new(Report::default()));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (shared, report, next) = (shared.clone(), report.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut session: Option<McpSession> = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    return Ok::<(), BoxError>(());
                }
                let kind = Kind::of(i);
                if matches!(
                    kind,
                    Kind::McpToolsList
                        | Kind::McpCallList
                        | Kind::McpCallStatus
                        | Kind::McpUnknownTool
                ) && session.is_none()
                {
                    session = Some(open_session(&shared).await?);
                }
                let begun = Instant::now();
                let answer = send(&shared, kind, i, session.as_mut()).await;
                let took = begun.elapsed();
                report.lock().await.record(kind, took, answer);
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let mut report = std::mem::take(&mut *report.lock().await);
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Creates the 16 tasks (delayed an hour) that the mix's requests name; their short ids.
async fn seed_tasks(client: &reqwest::Client, base: &str) -> Result<Vec<String>, BoxError> {
    let mut task_ids = Vec::new();
    for n in 0..16 {
        let response = client
            .post(format!("{base}/v1/tasks"))
            .bearer_auth(TOKEN)
            .json(
                &json!({"intent": format!("seed {n}"), "stream_id": "qq:group:42",
                "platform": "qq", "group_id": "42", "title": format!("seed {n}"),
                "delay_seconds": 3600}),
            )
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        let id = body["short_id"]
            .as_str()
            .ok_or_else(|| format!("seeding a task failed with {status}: {body}"))?;
        task_ids.push(id.to_owned());
    }
    Ok(task_ids)
}

impl Shared {
    /// The workers' client and target, and the oversized bodies built once: a body over the
    /// limit, JSON nested 10 000 deep, an object with 10 000 keys.
    fn new(client: reqwest::Client, base: String, task_ids: Vec<String>) -> Shared {
        let depth = 10_000;
        let deep_body = format!(
            r#"{{"arguments":{{"stream_id":{}{}}},"context":{{}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let many_keys: serde_json::Map<String, Value> = (0..10_000)
            .map(|k| (format!("k{k}"), Value::from(k)))
            .collect();
        let mut many_keys_body =
            json!({"intent": "x", "stream_id": "qq:group:42", "platform": "qq"});
        if let Value::Object(object) = &mut many_keys_body {
            object.extend(many_keys);
        }
        Shared {
            client,
            base,
            task_ids,
            huge_body: format!(
                r#"{{"platform":"qq","user_id":"user","text":"{}"}}"#,
                "x".repeat(MAX_BODY_BYTES + MAX_BODY_BYTES / 2)
            ),
            deep_body,
            many_keys_body: many_keys_body.to_string(),
        }
    }
}

impl Report {
    /// Counts one request of `kind` that took `took` and got `answer`: its latency, its status,
    /// and whether the status was of the expected class (a few samples of those that were not).
    fn record(
        &mut self,
        kind: Kind,
        took: Duration,
        answer: Result<(u16, String), reqwest::Error>,
    ) {
        self.total += 1;
        self.by_kind.entry(kind).or_default().push(took);
        if kind.is_malformed() {
            self.malformed.push(took);
        } else {
            self.valid.push(took);
        }
        match answer {
            Ok((status, body)) => {
                *self.by_status.entry(status).or_default() += 1;
                let fits = match kind.expect() {
                    Expect::Success => (200..300).contains(&status),
                    Expect::ClientError => (400..500).contains(&status),
                    Expect::RpcError => status == 200 && body.contains("\"error\""),
                };
                if !fits {
                    *self.unexpected.entry(format!("{kind:?}")).or_default() += 1;
                    if self.samples.len() < 8 {
                        let start: String = body.chars().take(200).collect();
                        self.samples.push(format!("{kind:?} → {status}: {start}"));
                    }
                }
            }
            Err(_) if kind == Kind::HugeBody => self.cut_off_oversized += 1,
            Err(error) => {
                self.transport_errors += 1;
                if self.samples.len() < 8 {
                    let mut chain = error.to_string();
                    let mut source = std::error::Error::source(&error);
                    while let Some(cause) = source {
                        chain.push_str(&format!(": {cause}"));
                        source = cause.source();
                    }
                    self.samples.push(format!("{kind:?} → no answer: {chain}"));
                }
            }
        }
    }
}

fn mcp_post(shared: &Shared, session: &str, body: &Value) -> reqwest::RequestBuilder {
    shared
        .client
        .post(format!("{}/mcp", shared.base))
        .bearer_auth(TOKEN)
        .header("accept", MCP_ACCEPT)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", MCP_PROTOCOL)
        .json(body)
}

async fn open_session(shared: &Shared) -> Result<McpSession, BoxError> {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": MCP_PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "loadgen", "version": "1"}}});
    let response = shared
        .client
        .post(format!("{}/mcp", shared.base))
        .bearer_auth(TOKEN)
        .header("accept", MCP_ACCEPT)
        .json(&initialize)
        .send()
        .await?;
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| {
            format!(
                "initialize answered {} without a session id",
                response.status()
            )
        })?;
    response.text().await?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let status = mcp_post(shared, &id, &initialized).send().await?.status();
    if !status.is_success() {
        return Err(format!("notifications/initialized answered {status}").into());
    }
    Ok(McpSession { id, next_id: 1 })
}

/// Sends request `i` of kind `kind`; its status and body.
async fn send(
    shared: &Shared,
    kind: Kind,
    i: usize,
    session: Option<&mut McpSession>,
) -> Result<(u16, String), reqwest::Error> {
    let make = Requests::new(shared, i);
    let request = match kind {
        Kind::ListTasks
        | Kind::GetTask
        | Kind::TaskHistory
        | Kind::CreateDelayed
        | Kind::CreateInstant => make.tasks(kind),
        Kind::PlannerList | Kind::PlannerStatus | Kind::PlannerCreate | Kind::Board => {
            make.planner(kind)
        }
        Kind::MessagePlain | Kind::MessageCommand => make.message(kind),
        Kind::McpToolsList | Kind::McpCallList | Kind::McpCallStatus | Kind::McpUnknownTool => {
            let Some(session) = session else {
                return Ok((0, "no MCP session".into()));
            };
            make.mcp(kind, session)
        }
        Kind::Healthz => shared.client.get(make.url("/healthz")),
        Kind::Metrics => make.get("/metrics"),
        Kind::OpenApi => make.get("/openapi.json"),
        Kind::BadJson
        | Kind::WrongType
        | Kind::UnknownField
        | Kind::HugeBody
        | Kind::UnknownId
        | Kind::BadHost
        | Kind::NoToken
        | Kind::DeepNesting
        | Kind::ManyKeys
        | Kind::PlannerBadArgs
        | Kind::McpUnknownSession
        | Kind::McpBadJson
        | Kind::MissingContentType => make.malformed(kind),
    };
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.text().await?;
    Ok((status, body))
}

/// Builds the requests of the mix for request number `i`.
struct Requests<'a> {
    shared: &'a Shared,
    i: usize,
    /// The seeded task this request names.
    task: &'a str,
    /// The planner's host context.
    context: Value,
}

impl<'a> Requests<'a> {
    fn new(shared: &'a Shared, i: usize) -> Self {
        Requests {
            shared,
            i,
            task: &shared.task_ids[i % shared.task_ids.len()],
            context: json!({"chat_id": "qq:group:42", "platform": "qq", "group_id": "42",
                "user_id": "user"}),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.shared.base)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.shared.client.get(self.url(path)).bearer_auth(TOKEN)
    }

    fn json_post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.shared
            .client
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .json(body)
    }

    fn raw_post(&self, path: &str, body: String) -> reqwest::RequestBuilder {
        self.shared
            .client
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body)
    }

    /// The task API: list, get, history, create delayed, create instant.
    fn tasks(&self, kind: Kind) -> reqwest::RequestBuilder {
        let (i, task) = (self.i, self.task);
        match kind {
            Kind::ListTasks => self.get("/v1/tasks?stream_id=qq:group:42&limit=20"),
            Kind::GetTask => self.get(&format!("/v1/tasks/{task}")),
            Kind::TaskHistory => self.get(&format!("/v1/tasks/{task}/history")),
            Kind::CreateDelayed => self.json_post(
                "/v1/tasks",
                &json!({"intent": format!("later {i}"), "stream_id": "qq:group:42",
                    "platform": "qq", "group_id": "42", "user_id": "user",
                    "title": format!("later {i}"), "delay_seconds": 3600}),
            ),
            // Kind::CreateInstant
            _ => self.json_post(
                "/v1/tasks",
                &json!({"intent": format!("now {i}"), "stream_id": "qq:group:42",
                    "platform": "qq", "group_id": "42", "level": "instant",
                    "title": format!("now {i}")}),
            ),
        }
    }

    /// The planner's doors: list, status, create, and its board.
    fn planner(&self, kind: Kind) -> reqwest::RequestBuilder {
        let (i, task, context) = (self.i, self.task, &self.context);
        match kind {
            Kind::PlannerList => self.json_post(
                "/v1/planner/tools/subagent_list",
                &json!({"arguments": {"stream_id": "qq:group:42"}, "context": context}),
            ),
            Kind::PlannerStatus => self.json_post(
                "/v1/planner/tools/subagent_status",
                &json!({"arguments": {"stream_id": "qq:group:42", "task_id": task},
                    "context": context}),
            ),
            Kind::PlannerCreate => self.json_post(
                "/v1/planner/tools/subagent_create",
                &json!({"arguments": {"stream_id": "qq:group:42", "intent": format!("plan {i}"),
                    "delay_seconds": 3600}, "context": context}),
            ),
            // Kind::Board
            _ => self.get(&format!(
                "/v1/planner/board?stream_id=qq:group:42&session=s{}",
                i % 50
            )),
        }
    }

    /// A chat message: plain text, or a `/mt` command.
    fn message(&self, kind: Kind) -> reqwest::RequestBuilder {
        let i = self.i;
        match kind {
            Kind::MessagePlain => self.json_post(
                "/v1/messages",
                &json!({"platform": "qq", "user_id": format!("u{}", i % 30), "group_id": "42",
                    "text": format!("hello {i}")}),
            ),
            // Kind::MessageCommand
            _ => self.json_post(
                "/v1/messages",
                &json!({"platform": "qq", "user_id": "user", "group_id": "42", "text": "/mt list"}),
            ),
        }
    }

    /// An MCP call in `session`: list the tools, call two planner tools, or call a tool that
    /// does not exist (an RPC error).
    fn mcp(&self, kind: Kind, session: &mut McpSession) -> reqwest::RequestBuilder {
        session.next_id += 1;
        let (method, params) = match kind {
            Kind::McpToolsList => ("tools/list", json!({})),
            Kind::McpCallList => (
                "tools/call",
                json!({"name": "subagent_list", "arguments": {"stream_id": "qq:group:42"},
                    "_meta": {"chat_id": "qq:group:42", "platform": "qq"}}),
            ),
            Kind::McpCallStatus => (
                "tools/call",
                json!({"name": "subagent_status",
                    "arguments": {"stream_id": "qq:group:42", "task_id": self.task},
                    "_meta": {"chat_id": "qq:group:42", "platform": "qq"}}),
            ),
            // Kind::McpUnknownTool
            _ => (
                "tools/call",
                json!({"name": "run_command", "arguments": {"command": "id"}}),
            ),
        };
        let body = json!({"jsonrpc": "2.0", "id": session.next_id, "method": method,
            "params": params});
        mcp_post(self.shared, &session.id, &body)
    }

    /// A request every door must refuse with a 4xx.
    fn malformed(&self, kind: Kind) -> reqwest::RequestBuilder {
        let (c, shared, i) = (&self.shared.client, self.shared, self.i);
        match kind {
            Kind::BadJson => self.raw_post("/v1/tasks", "{not json".into()),
            Kind::WrongType => self.json_post(
                "/v1/tasks",
                &json!({"intent": 5, "stream_id": "qq:group:42", "platform": "qq"}),
            ),
            Kind::UnknownField => self.json_post(
                "/v1/tasks",
                &json!({"intent": "x", "stream_id": "qq:group:42", "platform": "qq",
                    "delay_second": 5}),
            ),
            Kind::HugeBody => self.raw_post("/v1/messages", shared.huge_body.clone()),
            Kind::UnknownId => match i % 3 {
                0 => self.get("/v1/tasks/ffffffff"),
                1 => c
                    .post(self.url("/v1/tasks/no-such-task/cancel"))
                    .bearer_auth(TOKEN),
                _ => self.json_post(
                    "/v1/tasks/0000000000000000/inject",
                    &json!({"instruction": "x"}),
                ),
            },
            Kind::BadHost => self.get("/v1/tasks").header("host", "evil.example"),
            Kind::NoToken => match i % 2 {
                0 => c.get(self.url("/v1/tasks")),
                _ => c
                    .post(self.url("/mcp"))
                    .header("accept", MCP_ACCEPT)
                    .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
            },
            Kind::DeepNesting => {
                self.raw_post("/v1/planner/tools/subagent_list", shared.deep_body.clone())
            }
            Kind::ManyKeys => self.raw_post("/v1/tasks", shared.many_keys_body.clone()),
            Kind::PlannerBadArgs => self.json_post(
                "/v1/planner/tools/subagent_create",
                &json!({"arguments": {"stream_id": 5, "intent": ["x"]}, "context": self.context}),
            ),
            Kind::McpUnknownSession => mcp_post(
                shared,
                "not-a-session",
                &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            ),
            Kind::McpBadJson => c
                .post(self.url("/mcp"))
                .bearer_auth(TOKEN)
                .header("accept", MCP_ACCEPT)
                .header("content-type", "application/json")
                .body("{\"jsonrpc\": \"2.0\", \"id\": "),
            // Kind::MissingContentType
            _ => c
                .post(self.url("/v1/tasks"))
                .bearer_auth(TOKEN)
                .body(r#"{"intent":"x","stream_id":"qq:group:42","platform":"qq"}"#),
        }
    }
}
