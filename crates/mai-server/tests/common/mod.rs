//! A real service for the front-door tests: an engine over a SQLite file, the embedded host
//! over another, a scripted model wrapped in the metrics decorator, the planner registry, a
//! recording channel for platform `qq`, and (for HTTP tests) the router served on 127.0.0.1:0.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub mod mcp;

use async_trait::async_trait;
use mai_core::clock::SystemClock;
use mai_core::config::{Config, LiveConfig, ServerConfig};
use mai_core::host::{
    ChatLine, ChatTarget, Delivery, Host, HostError, Jargon, MemoryQuery, Person, Persona,
    PluginApi, StreamInfo, UserHit, UserQuery,
};
use mai_core::ids::{PersonId, StreamId};
use mai_core::model::{ChatResponse, ToolCall};
use mai_core::task::{TaskId, TaskStatus};
use mai_core::tool::ToolRegistry;
use mai_engine::Prompts;
use mai_engine::TaskEvent;
use mai_engine::planner_registry;
use mai_engine::{Engine, EngineDeps};
use mai_host::{ChannelSender, EmbeddedConfig, EmbeddedHost, IncomingMessage};
use mai_llm::ScriptedModel;
use mai_server::{HttpOptions, Metrics, ServerState};
use mai_store::SqliteStore;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

/// A channel that records what the bot sent, and hands each message to the test as it is sent.
pub struct RecordingChannel {
    pub sent: Mutex<Vec<(String, String)>>,
    notify: mpsc::UnboundedSender<(String, String)>,
}

#[async_trait]
impl ChannelSender for RecordingChannel {
    async fn send(&self, stream: &StreamInfo, text: &str) -> Result<Delivery, HostError> {
        let entry = (stream.stream_id.to_string(), text.to_owned());
        self.sent.lock().unwrap().push(entry.clone());
        let _ = self.notify.send(entry);
        Ok(Delivery::Sent)
    }
}

pub struct Service {
    pub dir: tempfile::TempDir,
    pub state: ServerState,
    pub model: Arc<ScriptedModel>,
    pub metrics: Metrics,
    pub plugin_host: Arc<PluginHost>,
    pub channel: Arc<RecordingChannel>,
    /// Messages the bot sent, in order.
    pub outbox: mpsc::UnboundedReceiver<(String, String)>,
    pub events: broadcast::Receiver<TaskEvent>,
}

pub fn test_config() -> Config {
    let mut config = Config::default();
    config.polish.enabled = false;
    config.send.retry_base_ms = 1;
    config.permission.users = vec!["qq:user".into(), "qq:other".into()];
    config.permission.admins = vec!["qq:admin".into()];
    config
}

/// The embedded host plus plugin APIs (the embedded host has none), counting API calls: the
/// cross-plugin tools (`call_*`) need a host that offers some.
pub struct PluginHost {
    pub inner: Arc<EmbeddedHost>,
    pub apis: Vec<PluginApi>,
    pub api_calls: AtomicUsize,
}

#[async_trait]
impl Host for PluginHost {
    async fn send_text(&self, stream: &StreamId, text: &str) -> Result<Delivery, HostError> {
        self.inner.send_text(stream, text).await
    }
    async fn append_context(&self, stream: &StreamId, note: &str) -> Result<(), HostError> {
        self.inner.append_context(stream, note).await
    }
    async fn recent_messages(
        &self,
        stream: &StreamId,
        limit: usize,
    ) -> Result<Vec<ChatLine>, HostError> {
        self.inner.recent_messages(stream, limit).await
    }
    async fn jargon(&self, stream: &StreamId, text: &str) -> Result<Vec<Jargon>, HostError> {
        self.inner.jargon(stream, text).await
    }
    async fn persona(&self) -> Persona {
        self.inner.persona().await
    }
    async fn stream_info(&self, stream: &StreamId) -> Result<Option<StreamInfo>, HostError> {
        self.inner.stream_info(stream).await
    }
    async fn is_member(&self, person: &PersonId, stream: &StreamId) -> Result<bool, HostError> {
        self.inner.is_member(person, stream).await
    }
    async fn display_name(&self, person: &PersonId) -> Result<Option<String>, HostError> {
        self.inner.display_name(person).await
    }
    async fn open_stream(
        &self,
        platform: &str,
        target: &ChatTarget,
    ) -> Result<StreamId, HostError> {
        self.inner.open_stream(platform, target).await
    }
    async fn list_streams(&self, limit: usize) -> Result<Vec<StreamInfo>, HostError> {
        self.inner.list_streams(limit).await
    }
    async fn find_person(&self, name: &str) -> Result<Option<Person>, HostError> {
        self.inner.find_person(name).await
    }
    async fn search_users(&self, query: &UserQuery) -> Result<Vec<UserHit>, HostError> {
        self.inner.search_users(query).await
    }
    async fn search_memory(&self, query: &MemoryQuery) -> Result<serde_json::Value, HostError> {
        self.inner.search_memory(query).await
    }
    async fn talk_frequency(&self, stream: &StreamId) -> Result<Option<f64>, HostError> {
        self.inner.talk_frequency(stream).await
    }
    async fn list_apis(&self) -> Result<Vec<PluginApi>, HostError> {
        Ok(self.apis.clone())
    }
    async fn call_api(
        &self,
        _name: &str,
        _args: serde_json::Value,
    ) -> Result<serde_json::Value, HostError> {
        self.api_calls.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"called": true}))
    }
}

/// How [`Service::start_with`] differs from the default service.
pub struct ServiceOptions {
    pub config: Config,
    /// Gives the engine a file sandbox at `<dir>/files`.
    pub files: bool,
    /// Plugin APIs the host offers (through [`PluginHost`]).
    pub apis: Vec<PluginApi>,
    /// Runs the engine on this MaiBot host instead of the embedded one (`[host] kind =
    /// "maibot"`): its sends go over the bridge, not to the recording channel.
    pub bridge: Option<mai_host::MaiBotHost>,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            config: test_config(),
            files: false,
            apis: Vec::new(),
            bridge: None,
        }
    }
}

impl Service {
    pub async fn start(model: ScriptedModel) -> Service {
        Service::start_with(model, ServiceOptions::default()).await
    }

    pub async fn start_with(model: ScriptedModel, options: ServiceOptions) -> Service {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let model = Arc::new(model);
        let host = Arc::new(
            EmbeddedHost::open(dir.path().join("host.db"), EmbeddedConfig::default())
                .await
                .unwrap(),
        );
        let (notify, outbox) = mpsc::unbounded_channel();
        let channel = Arc::new(RecordingChannel {
            sent: Mutex::new(Vec::new()),
            notify,
        });
        host.register_channel("qq", channel.clone());
        let store = SqliteStore::open(dir.path().join("tasks.db"))
            .await
            .unwrap();
        let plugin_host = Arc::new(PluginHost {
            inner: host.clone(),
            apis: options.apis,
            api_calls: AtomicUsize::new(0),
        });
        let engine_host: Arc<dyn Host> = match &options.bridge {
            Some(bridge) => Arc::new(bridge.clone()),
            None => plugin_host.clone(),
        };
        let engine = Engine::new(EngineDeps {
            store: Arc::new(store),
            model: metrics.meter(model.clone()),
            host: engine_host,
            registry: Arc::new(ToolRegistry::new()),
            config: Arc::new(LiveConfig::new(options.config).unwrap()),
            prompts: Arc::new(Prompts::embedded()),
            clock: Arc::new(SystemClock),
            files_root: options.files.then(|| dir.path().join("files")),
        })
        .await
        .unwrap();
        let events = engine.subscribe();
        engine.start().await.unwrap();
        let planner = Arc::new(planner_registry(&engine, None).unwrap());
        Service {
            dir,
            state: ServerState {
                engine,
                host,
                bridge: options.bridge,
                planner,
                metrics: metrics.clone(),
            },
            model,
            metrics,
            plugin_host,
            channel,
            outbox,
            events,
        }
    }

    /// Stores a message so the host knows the stream (sends need a known stream).
    pub async fn say(&self, user: &str, group: Option<&str>, text: &str) -> mai_server::Inbound {
        mai_server::deliver(&self.state, message(user, group, text))
            .await
            .unwrap()
    }

    /// The next message the bot sent (bounded wait).
    pub async fn next_sent(&mut self) -> (String, String) {
        tokio::time::timeout(Duration::from_secs(20), self.outbox.recv())
            .await
            .expect("timed out waiting for the bot to send a message")
            .expect("channel closed")
    }

    pub async fn wait_for(&mut self, what: &str, pred: impl Fn(&TaskEvent) -> bool) -> TaskEvent {
        let events = &mut self.events;
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match events.recv().await {
                    Ok(event) if pred(&event) => return event,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => panic!("events closed"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
    }

    pub async fn wait_status(&mut self, id: TaskId, status: TaskStatus) {
        self.wait_for(&format!("{id} {status}"), |e| {
            matches!(e, TaskEvent::Status { task_id, status: s, .. } if *task_id == id && *s == status)
        })
        .await;
    }
}

pub fn message(user: &str, group: Option<&str>, text: &str) -> IncomingMessage {
    IncomingMessage {
        platform: "qq".into(),
        stream_id: None,
        group_id: group.map(str::to_owned),
        group_name: group.map(|g| format!("group {g}")),
        user_id: user.into(),
        sender_name: user.into(),
        text: text.into(),
        at: chrono::Utc::now(),
        anonymous: false,
        platform_message_id: None,
    }
}

/// An agent response that calls one tool.
pub fn call(tool: &str, args: serde_json::Value) -> ChatResponse {
    ChatResponse::tool_calls("", vec![ToolCall::new(format!("call_{tool}"), tool, args)])
}

pub fn ask(question: &str) -> ChatResponse {
    call("ask_user", json!({ "question": question }))
}

/// The router of `service`, served on 127.0.0.1:0.
pub struct Served {
    pub base: String,
    pub client: reqwest::Client,
    pub token: Option<String>,
}

pub const TOKEN: &str = "s3cret-token";

pub fn server_config() -> ServerConfig {
    ServerConfig {
        auth_token: Some(TOKEN.into()),
        max_body_bytes: 4096,
        ..ServerConfig::default()
    }
}

pub async fn serve(service: &Service, options: HttpOptions) -> Served {
    let token = options.config.auth_token.clone();
    let router = mai_server::router(service.state.clone(), options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    Served {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        token,
    }
}

impl Served {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.auth(self.client.get(self.url(path)))
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.auth(self.client.post(self.url(path)))
    }

    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }
}

impl Served {
    /// Sends a request byte for byte over a fresh connection — for what an HTTP client will not
    /// send (two `Host` headers, an absolute-form target) — and returns its status and JSON
    /// body. `head` is the request line and headers, one per line, without the blank line;
    /// `Connection: close` is added, so the answer ends where the connection does.
    pub async fn raw(&self, head: &str) -> (u16, serde_json::Value) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "{}\r\nConnection: close\r\n\r\n",
            head.replace('\n', "\r\n")
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(20), stream.read_to_string(&mut answer))
            .await
            .expect("timed out reading a raw answer")
            .unwrap();
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no end of headers in: {answer}"));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in: {head}"));
        let value = serde_json::from_str(body)
            .unwrap_or_else(|_| panic!("status {status}: body is not JSON: {answer}"));
        (status, value)
    }

    /// The port the router is served on.
    pub fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }
}

/// Status and JSON body of a response.
pub async fn json_of(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("status {status}: body is not JSON: {text}"));
    (status, value)
}

/// `POST /v1/planner/tools/{tool}` with `arguments` and the host `context`.
pub async fn planner(
    served: &Served,
    tool: &str,
    arguments: Value,
    context: Value,
) -> (u16, Value) {
    json_of(
        served
            .post(&format!("/v1/planner/tools/{tool}"))
            .json(&json!({"arguments": arguments, "context": context}))
            .send()
            .await
            .unwrap(),
    )
    .await
}
