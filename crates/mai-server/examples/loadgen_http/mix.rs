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
use mai_engine::engine::{Engine, EngineDeps};
use mai_engine::planner::planner_registry;
use mai_engine::prompts::Prompts;
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
    let depth = 10_000;
    let deep_body = format!(
        r#"{{"arguments":{{"stream_id":{}{}}},"context":{{}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let many_keys: serde_json::Map<String, Value> = (0..10_000)
        .map(|k| (format!("k{k}"), Value::from(k)))
        .collect();
    let mut many_keys_body = json!({"intent": "x", "stream_id": "qq:group:42", "platform": "qq"});
    if let Value::Object(object) = &mut many_keys_body {
        object.extend(many_keys);
    }
    let shared = Arc::new(Shared {
        client,
        base,
        task_ids,
        huge_body: format!(
            r#"{{"platform":"qq","user_id":"user","text":"{}"}}"#,
            "x".repeat(MAX_BODY_BYTES + MAX_BODY_BYTES / 2)
        ),
        deep_body,
        many_keys_body: many_keys_body.to_string(),
    });
    let report = Arc::new(Mutex::new(Report::default()));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let shared = shared.clone();
        let report = report.clone();
        let next = next.clone();
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
                let mut report = report.lock().await;
                report.total += 1;
                report.by_kind.entry(kind).or_default().push(took);
                if kind.is_malformed() {
                    report.malformed.push(took);
                } else {
                    report.valid.push(took);
                }
                match answer {
                    Ok((status, body)) => {
                        *report.by_status.entry(status).or_default() += 1;
                        let fits = match kind.expect() {
                            Expect::Success => (200..300).contains(&status),
                            Expect::ClientError => (400..500).contains(&status),
                            Expect::RpcError => status == 200 && body.contains("\"error\""),
                        };
                        if !fits {
                            *report.unexpected.entry(format!("{kind:?}")).or_default() += 1;
                            if report.samples.len() < 8 {
                                let start: String = body.chars().take(200).collect();
                                report.samples.push(format!("{kind:?} → {status}: {start}"));
                            }
                        }
                    }
                    Err(_) if kind == Kind::HugeBody => report.cut_off_oversized += 1,
                    Err(error) => {
                        report.transport_errors += 1;
                        if report.samples.len() < 8 {
                            let mut chain = error.to_string();
                            let mut source = std::error::Error::source(&error);
                            while let Some(cause) = source {
                                chain.push_str(&format!(": {cause}"));
                                source = cause.source();
                            }
                            report
                                .samples
                                .push(format!("{kind:?} → no answer: {chain}"));
                        }
                    }
                }
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
    let c = &shared.client;
    let url = |path: &str| format!("{}{path}", shared.base);
    let task = &shared.task_ids[i % shared.task_ids.len()];
    let context = json!({"chat_id": "qq:group:42", "platform": "qq", "group_id": "42",
        "user_id": "user"});
    let json_post = |path: &str, body: &Value| c.post(url(path)).bearer_auth(TOKEN).json(body);
    let raw_post = |path: &str, body: String| {
        c.post(url(path))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body)
    };
    let request = match kind {
        Kind::ListTasks => c
            .get(url("/v1/tasks?stream_id=qq:group:42&limit=20"))
            .bearer_auth(TOKEN),
        Kind::GetTask => c.get(url(&format!("/v1/tasks/{task}"))).bearer_auth(TOKEN),
        Kind::TaskHistory => c
            .get(url(&format!("/v1/tasks/{task}/history")))
            .bearer_auth(TOKEN),
        Kind::CreateDelayed => json_post(
            "/v1/tasks",
            &json!({"intent": format!("later {i}"), "stream_id": "qq:group:42",
                "platform": "qq", "group_id": "42", "user_id": "user",
                "title": format!("later {i}"), "delay_seconds": 3600}),
        ),
        Kind::CreateInstant => json_post(
            "/v1/tasks",
            &json!({"intent": format!("now {i}"), "stream_id": "qq:group:42",
                "platform": "qq", "group_id": "42", "level": "instant",
                "title": format!("now {i}")}),
        ),
        Kind::PlannerList => json_post(
            "/v1/planner/tools/subagent_list",
            &json!({"arguments": {"stream_id": "qq:group:42"}, "context": context}),
        ),
        Kind::PlannerStatus => json_post(
            "/v1/planner/tools/subagent_status",
            &json!({"arguments": {"stream_id": "qq:group:42", "task_id": task},
                "context": context}),
        ),
        Kind::PlannerCreate => json_post(
            "/v1/planner/tools/subagent_create",
            &json!({"arguments": {"stream_id": "qq:group:42", "intent": format!("plan {i}"),
                "delay_seconds": 3600}, "context": context}),
        ),
        Kind::Board => c
            .get(url(&format!(
                "/v1/planner/board?stream_id=qq:group:42&session=s{}",
                i % 50
            )))
            .bearer_auth(TOKEN),
        Kind::MessagePlain => json_post(
            "/v1/messages",
            &json!({"platform": "qq", "user_id": format!("u{}", i % 30), "group_id": "42",
                "text": format!("hello {i}")}),
        ),
        Kind::MessageCommand => json_post(
            "/v1/messages",
            &json!({"platform": "qq", "user_id": "user", "group_id": "42", "text": "/mt list"}),
        ),
        Kind::McpToolsList | Kind::McpCallList | Kind::McpCallStatus | Kind::McpUnknownTool => {
            let Some(session) = session else {
                return Ok((0, "no MCP session".into()));
            };
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
                        "arguments": {"stream_id": "qq:group:42", "task_id": task},
                        "_meta": {"chat_id": "qq:group:42", "platform": "qq"}}),
                ),
                _ => (
                    "tools/call",
                    json!({"name": "run_command", "arguments": {"command": "id"}}),
                ),
            };
            let body = json!({"jsonrpc": "2.0", "id": session.next_id, "method": method,
                "params": params});
            mcp_post(shared, &session.id, &body)
        }
        Kind::Healthz => c.get(url("/healthz")),
        Kind::Metrics => c.get(url("/metrics")).bearer_auth(TOKEN),
        Kind::OpenApi => c.get(url("/openapi.json")).bearer_auth(TOKEN),
        Kind::BadJson => raw_post("/v1/tasks", "{not json".into()),
        Kind::WrongType => json_post(
            "/v1/tasks",
            &json!({"intent": 5, "stream_id": "qq:group:42", "platform": "qq"}),
        ),
        Kind::UnknownField => json_post(
            "/v1/tasks",
            &json!({"intent": "x", "stream_id": "qq:group:42", "platform": "qq",
                "delay_second": 5}),
        ),
        Kind::HugeBody => raw_post("/v1/messages", shared.huge_body.clone()),
        Kind::UnknownId => match i % 3 {
            0 => c.get(url("/v1/tasks/ffffffff")).bearer_auth(TOKEN),
            1 => c
                .post(url("/v1/tasks/no-such-task/cancel"))
                .bearer_auth(TOKEN),
            _ => json_post(
                "/v1/tasks/0000000000000000/inject",
                &json!({"instruction": "x"}),
            ),
        },
        Kind::BadHost => c
            .get(url("/v1/tasks"))
            .bearer_auth(TOKEN)
            .header("host", "evil.example"),
        Kind::NoToken => match i % 2 {
            0 => c.get(url("/v1/tasks")),
            _ => c
                .post(url("/mcp"))
                .header("accept", MCP_ACCEPT)
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        },
        Kind::DeepNesting => raw_post("/v1/planner/tools/subagent_list", shared.deep_body.clone()),
        Kind::ManyKeys => raw_post("/v1/tasks", shared.many_keys_body.clone()),
        Kind::PlannerBadArgs => json_post(
            "/v1/planner/tools/subagent_create",
            &json!({"arguments": {"stream_id": 5, "intent": ["x"]}, "context": context}),
        ),
        Kind::McpUnknownSession => mcp_post(
            shared,
            "not-a-session",
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ),
        Kind::McpBadJson => c
            .post(url("/mcp"))
            .bearer_auth(TOKEN)
            .header("accept", MCP_ACCEPT)
            .header("content-type", "application/json")
            .body("{\"jsonrpc\": \"2.0\", \"id\": "),
        Kind::MissingContentType => c
            .post(url("/v1/tasks"))
            .bearer_auth(TOKEN)
            .body(r#"{"intent":"x","stream_id":"qq:group:42","platform":"qq"}"#),
    };
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.text().await?;
    Ok((status, body))
}
