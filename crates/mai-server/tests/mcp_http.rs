//! The MCP server over streamable HTTP, served on loopback by a real engine (SQLite store,
//! embedded host, scripted model): an rmcp client checks the tool list, `_meta.visibility`, host
//! context, stream isolation and — behind the real HTTP API router — that the API's token and
//! Host guard cover `/mcp`; the official Python MCP client (`testing/peers/mcp_probe.py`)
//! checks that an independent implementation can discover, list and call. When that peer cannot
//! be installed, the Python tests fail under `CI=true` and elsewhere print a SKIP line and return.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ErrorCode, JsonObject, RequestMetaObject,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use mai_core::clock::SystemClock;
use mai_core::config::{Config, LiveConfig, ServerConfig};
use mai_core::ids::{Owner, StreamId};
use mai_core::store::TaskFilter;
use mai_core::task::TaskStatus;
use mai_core::tool::ToolRegistry;
use mai_engine::Caller;
use mai_engine::Prompts;
use mai_engine::{Engine, EngineDeps};
use mai_engine::{PLANNER_TOOLS, planner_registry};
use mai_host::{EmbeddedConfig, EmbeddedHost};
use mai_llm::ScriptedModel;
use mai_server::mcp::http_router_until;
use mai_server::{HttpOptions, ServerState};
use mai_store::SqliteStore;

/// A running engine with the MCP router nested at `/mcp` on a loopback port, as the HTTP API
/// router nests it.
struct Served {
    _dir: tempfile::TempDir,
    engine: Arc<Engine>,
    addr: SocketAddr,
    shutdown: CancellationToken,
}

impl Served {
    /// The MCP router alone, nested as the HTTP API nests it.
    async fn start() -> Served {
        Served::start_with(|state, shutdown| {
            Router::new().nest_service("/mcp", http_router_until(state, shutdown))
        })
        .await
    }

    /// The app `make` builds around the state (e.g. the whole HTTP API).
    async fn start_with(make: impl FnOnce(ServerState, CancellationToken) -> Router) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("tasks.db"))
            .await
            .unwrap();
        let host = Arc::new(
            EmbeddedHost::with_database(store.database().clone(), EmbeddedConfig::default())
                .await
                .unwrap(),
        );
        let mut config = Config::default();
        config.polish.enabled = false;
        // These tests are about the MCP transport; some clients send no `_meta`, so planner calls
        // without a conversation or speaker act as a trusted host's would (the authority rules
        // have their own suite, tests/authority.rs).
        config.planner.default_role = mai_core::role::Role::Admin;
        let engine = Engine::new(EngineDeps {
            store: Arc::new(store),
            // Nothing here reaches a model: created tasks are delayed.
            model: Arc::new(ScriptedModel::default()),
            host: host.clone(),
            registry: Arc::new(ToolRegistry::new()),
            config: Arc::new(LiveConfig::new(config).unwrap()),
            prompts: Arc::new(Prompts::embedded()),
            clock: Arc::new(SystemClock),
            files_root: None,
        })
        .await
        .unwrap();
        engine.start().await.unwrap();
        let planner = Arc::new(planner_registry(&engine, None).unwrap());
        let state = ServerState {
            engine: engine.clone(),
            host,
            bridge: None,
            planner,
            metrics: mai_server::metrics::Metrics::new(),
        };
        let shutdown = CancellationToken::new();
        let app = make(state, shutdown.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
                .unwrap();
        });
        Served {
            _dir: dir,
            engine,
            addr,
            shutdown,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    async fn client(&self) -> RunningService<RoleClient, ()> {
        ().serve(StreamableHttpClientTransport::from_uri(self.url()))
            .await
            .unwrap()
    }

    /// Every task in the store, as the admin sees them.
    async fn tasks(&self) -> Vec<mai_core::task::TaskRecord> {
        let admin = Caller::admin_reader("test").unwrap();
        self.engine
            .list(&admin, TaskFilter::default())
            .await
            .unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
    meta: Option<Value>,
) -> Result<CallToolResult, ServiceError> {
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(object(args));
    params.meta = meta.map(|meta| RequestMetaObject::from(object(meta)));
    client.call_tool(params).await
}

fn text_of(result: &CallToolResult) -> String {
    result.content[0].as_text().unwrap().text.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eleven_planner_tools_are_listed_with_their_visibility_and_schemas() {
    let served = Served::start().await;
    let client = served.client().await;

    let info = client.peer_info().unwrap();
    let server = info.server_info.as_ref().unwrap();
    assert_eq!(server.name, "mai-agent");
    assert_eq!(server.version, env!("CARGO_PKG_VERSION"));
    assert!(
        info.instructions.as_deref().is_some_and(
            |text| text.contains("background sub-agents") && text.contains("_meta.chat_id")
        ),
        "{info:?}"
    );

    let tools = client.list_all_tools().await.unwrap();
    let listed: Vec<(&str, &str)> = tools
        .iter()
        .map(|tool| {
            let visibility = tool.meta.as_ref().and_then(|meta| meta.get("visibility"));
            (
                tool.name.as_ref(),
                visibility.and_then(Value::as_str).unwrap_or("<none>"),
            )
        })
        .collect();
    let expected: Vec<(&str, &str)> = PLANNER_TOOLS
        .iter()
        .map(|(name, visibility)| (*name, visibility.as_str()))
        .collect();
    assert_eq!(listed, expected);

    for tool in &tools {
        assert_eq!(
            tool.input_schema.get("type"),
            Some(&json!("object")),
            "{}",
            tool.name
        );
        assert!(
            tool.description.as_ref().is_some_and(|d| d.len() > 40),
            "{} has a real description",
            tool.name
        );
        let properties = tool
            .input_schema
            .get("properties")
            .and_then(Value::as_object);
        assert!(
            !properties.is_some_and(|p| p.contains_key("chat_id")),
            "{}: chat_id is host-only, never in a schema",
            tool.name
        );
    }
    let create = tools.iter().find(|t| t.name == "subagent_create").unwrap();
    let required = create.input_schema.get("required").unwrap();
    assert_eq!(required, &json!(["intent", "stream_id"]));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_create_makes_a_task_in_the_hosts_stream_and_another_stream_is_refused() {
    let served = Served::start().await;
    let client = served.client().await;
    let in_a = json!({"chat_id": "qq:group:A", "platform": "qq", "group_id": "A", "user_id": "42"});

    let created = call(
        &client,
        "subagent_create",
        json!({"intent": "compare three cloud offers", "stream_id": "qq:group:A",
               "delay_seconds": 3600}),
        Some(in_a.clone()),
    )
    .await
    .unwrap();
    assert_eq!(created.is_error, Some(false), "{}", text_of(&created));
    let structured = created.structured_content.clone().unwrap();
    assert_eq!(structured["success"], true);
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(&created)).unwrap(),
        structured
    );

    let tasks = served.tasks().await;
    assert_eq!(tasks.len(), 1);
    let task = &tasks[0];
    assert_eq!(task.stream_id.as_str(), "qq:group:A");
    assert_eq!(
        task.owner,
        Owner::planner(StreamId::new("qq:group:A").unwrap())
    );
    assert_eq!(task.status, TaskStatus::Scheduled);
    assert_eq!(task.intent, "compare three cloud offers");
    assert_eq!(
        task.metadata.requester.as_ref().map(ToString::to_string),
        Some("qq:42".to_owned()),
        "the host's user_id is the person the task was made for"
    );
    assert_eq!(
        structured["id"].as_str(),
        Some(task.id.to_string().as_str())
    );

    // The model names stream B while the host says the conversation is A: refused, and the
    // reason tells the model which stream to use.
    let forged_list = call(
        &client,
        "subagent_list",
        json!({"stream_id": "qq:group:B"}),
        Some(in_a.clone()),
    )
    .await
    .unwrap();
    assert_eq!(forged_list.is_error, Some(true));
    let reason = text_of(&forged_list);
    assert!(
        reason.contains("not the current conversation") && reason.contains("qq:group:A"),
        "{reason}"
    );
    let forged_create = call(
        &client,
        "subagent_create",
        // A chat_id in the arguments does not beat the host's `_meta`.
        json!({"intent": "x", "stream_id": "qq:group:B", "chat_id": "qq:group:B"}),
        Some(in_a.clone()),
    )
    .await
    .unwrap();
    assert_eq!(
        forged_create.is_error,
        Some(true),
        "{}",
        text_of(&forged_create)
    );
    assert_eq!(served.tasks().await.len(), 1, "nothing was created in B");

    // In A, the task is there.
    let listed = call(
        &client,
        "subagent_list",
        json!({"stream_id": "qq:group:A"}),
        Some(in_a),
    )
    .await
    .unwrap();
    assert_eq!(listed.is_error, Some(false));
    let listed = listed.structured_content.unwrap();
    assert_eq!(
        listed["tasks"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_get_clear_errors() {
    let served = Served::start().await;
    let client = served.client().await;

    let unknown = call(&client, "subagent_explode", json!({}), None)
        .await
        .unwrap_err();
    let ServiceError::McpError(error) = unknown else {
        panic!("expected an MCP error, got {unknown:?}");
    };
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    assert!(
        error.message.contains("unknown tool `subagent_explode`")
            && error.message.contains("subagent_create"),
        "{}",
        error.message
    );

    let bad_meta = call(
        &client,
        "subagent_list",
        json!({"stream_id": "s1"}),
        Some(json!({"chat_id": {"id": "s1"}})),
    )
    .await
    .unwrap_err();
    let ServiceError::McpError(error) = bad_meta else {
        panic!("expected an MCP error, got {bad_meta:?}");
    };
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    assert!(
        error.message.contains("_meta.chat_id must be a string"),
        "{}",
        error.message
    );

    // Arguments that do not match the schema: a result the model can read and correct.
    let bad_args = call(&client, "subagent_create", json!({"stream_id": "s1"}), None)
        .await
        .unwrap();
    assert_eq!(bad_args.is_error, Some(true));
    assert!(
        text_of(&bad_args).contains("intent"),
        "{}",
        text_of(&bad_args)
    );
    assert!(served.tasks().await.is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_guard_is_the_nesting_routers_not_rmcps() {
    // rmcp's own DNS-rebinding check would answer 403 to any non-loopback Host; the HTTP API
    // router owns that policy (listen address, [server] allowed_hosts), so this router must let
    // through whatever the guard in front of it accepted.
    let served = Served::start().await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    for host in [
        format!("127.0.0.1:{}", served.addr.port()),
        format!("localhost:{}", served.addr.port()),
        "bot.example.org".to_owned(),
    ] {
        let response = reqwest::Client::new()
            .post(served.url())
            .header("Host", &host)
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "Host {host}");
        let body = response.text().await.unwrap();
        assert!(
            body.contains(r#""name":"mai-agent""#),
            "Host {host}: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_answers_204_and_ends_it() {
    let served = Served::start().await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let client = reqwest::Client::new();
    let response = client
        .post(served.url())
        .header("Accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    response.text().await.unwrap();
    let delete = || {
        client
            .delete(served.url())
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-06-18")
            .send()
    };
    let deleted = delete().await.unwrap();
    assert_eq!(deleted.status(), 204, "{:?}", deleted.text().await);
    // The session is gone: using it again is refused, not accepted.
    let again = client
        .post(served.url())
        .header("Accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert!(again.status().is_client_error(), "{}", again.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_the_http_api_the_token_and_host_guard_apply_to_mcp() {
    let served = Served::start_with(|state, shutdown| {
        let config = ServerConfig {
            auth_token: Some("s3cret".into()),
            ..ServerConfig::default()
        };
        let options = HttpOptions {
            mcp: Some(http_router_until(state.clone(), shutdown)),
            ..HttpOptions::new(config)
        };
        mai_server::router(state, options)
    })
    .await;

    // A real client on loopback with the token: the whole session works.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.url()).auth_header("s3cret"),
    );
    let client = ().serve(transport).await.unwrap();
    assert_eq!(client.list_all_tools().await.unwrap().len(), 11);
    let listed = call(&client, "subagent_list", json!({"stream_id": "s1"}), None)
        .await
        .unwrap();
    assert_eq!(listed.is_error, Some(false), "{}", text_of(&listed));
    client.cancel().await.unwrap();

    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let post = |host: &str, token: Option<&str>| {
        let mut request = reqwest::Client::new()
            .post(served.url())
            .header("Host", host)
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let loopback = format!("127.0.0.1:{}", served.addr.port());
    let no_token = post(&loopback, None).await.unwrap();
    assert_eq!(no_token.status(), 401, "the API's bearer token guards /mcp");
    let wrong_token = post(&loopback, Some("guess")).await.unwrap();
    assert_eq!(wrong_token.status(), 401);
    let rebound = post("evil.example", Some("s3cret")).await.unwrap();
    assert_eq!(
        rebound.status(),
        403,
        "the API's Host guard applies to /mcp"
    );
    let ok = post(&loopback, Some("s3cret")).await.unwrap();
    assert_eq!(ok.status(), 200);

    // The MCP door counts its planner tool calls into the API's metrics.
    let metrics = reqwest::Client::new()
        .get(format!("http://{}/metrics", served.addr))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "mai_planner_tool_calls_total{tool=\"subagent_list\",outcome=\"ok\",door=\"mcp\"} 1"
        ),
        "{metrics}"
    );
}

// --- the official Python MCP client -------------------------------------------------------

#[path = "../../../testing/peers.rs"]
mod shared_peers;
use shared_peers::peers;

async fn python_probe(peers: &Path, args: &[&str]) -> (bool, String, String) {
    let output = tokio::process::Command::new(peers.join("venv/bin/python"))
        .arg(peers.join("mcp_probe.py"))
        .args(args)
        .output()
        .await
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_lists_and_calls_over_http_in_both_handshakes() {
    let Some(peers) = peers() else { return };
    let served = Served::start().await;
    let url = served.url();
    let call = ["--call", "subagent_list", r#"{"stream_id": "qq:group:A"}"#];
    for legacy in [false, true] {
        let mut args: Vec<&str> = if legacy { vec!["--legacy"] } else { vec![] };
        args.extend(call);
        args.push(&url);
        let (ok, stdout, stderr) = python_probe(&peers, &args).await;
        assert!(ok, "legacy={legacy}\nstdout: {stdout}\nstderr: {stderr}");
        assert!(stdout.contains("| server mai-agent"), "{stdout}");
        assert!(stdout.contains("11 tools in 1 page(s)"), "{stdout}");
        for (tool, _) in PLANNER_TOOLS {
            assert!(stdout.contains(&format!("'{tool}'")), "{tool}: {stdout}");
        }
        assert!(
            stdout.contains("call subagent_list isError False") && stdout.contains("'tasks': []"),
            "legacy={legacy}: {stdout}"
        );
    }
}
