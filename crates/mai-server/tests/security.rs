//! The security corpus at the front doors (docs/security.md): role escalation through the HTTP
//! API, the planner channel (HTTP and MCP) and chat commands; stream isolation; oversized and
//! deep input. Each test drives the real router (MCP nested at `/mcp`) over a real engine,
//! store and embedded host, and asserts what was refused *and* that nothing happened.
//! The agent loop's own corpus is `crates/mai-engine/tests/attacks.rs`; path traversal and
//! SSRF are `crates/mai-tools/tests/files.rs` and `crates/mai-mcp/tests/fetch.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::mcp::Mcp;
use common::{Served, Service, ServiceOptions, TOKEN, call, json_of, planner, serve, test_config};
use mai_core::config::ServerConfig;
use mai_core::host::PluginApi;
use mai_core::model::{ChatResponse, MessageRole};
use mai_core::task::{TaskId, TaskStatus};
use mai_engine::PLANNER_TOOLS;
use mai_llm::ScriptedModel;
use mai_server::HttpOptions;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use tokio_util::sync::CancellationToken;

const LIMIT: usize = 1024 * 1024;

/// The HTTP API with the real MCP router nested at `/mcp`, 1 MiB body limit, the token on.
async fn serve_all(service: &Service) -> Served {
    let mut options = HttpOptions::new(ServerConfig {
        auth_token: Some(TOKEN.into()),
        max_body_bytes: LIMIT,
        ..ServerConfig::default()
    });
    options.mcp = Some(mai_server::mcp::http_router_until(
        service.state.clone(),
        CancellationToken::new(),
    ));
    serve(service, options).await
}

async fn start() -> (Service, Served) {
    let service = Service::start(ScriptedModel::default()).await;
    let served = serve_all(&service).await;
    (service, served)
}

async fn message(
    served: &Served,
    platform: &str,
    user: &str,
    group: Option<&str>,
    text: &str,
) -> (u16, Value) {
    let mut body = json!({"platform": platform, "user_id": user, "text": text});
    if let Some(group) = group {
        body["group_id"] = json!(group);
    }
    json_of(
        served
            .post("/v1/messages")
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// A delayed task created over HTTP for `user` (None: for the planner of the stream).
async fn later_task(served: &Served, user: Option<&str>, stream: &str, title: &str) -> Value {
    let mut body = json!({"intent": format!("{title} intent"), "stream_id": stream,
        "platform": "qq", "title": title, "delay_seconds": 3600});
    if let Some(group) = stream.strip_prefix("qq:group:") {
        body["group_id"] = json!(group);
    }
    if let Some(user) = user {
        body["user_id"] = json!(user);
    }
    let (status, task) = json_of(served.post("/v1/tasks").json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{task}");
    task
}

async fn status_of(served: &Served, id: &str) -> String {
    let (status, task) =
        json_of(served.get(&format!("/v1/tasks/{id}")).send().await.unwrap()).await;
    assert_eq!(status, 200, "{task}");
    task["status"].as_str().unwrap().to_owned()
}

// --- the door ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_every_route_and_mcp_answer_401() {
    let (_service, served) = start().await;
    let anonymous = reqwest::Client::new();
    let mut doors: Vec<(reqwest::Method, String)> = mai_server::http::routes()
        .into_iter()
        .filter(|(_, path)| *path != "/healthz")
        .map(|(method, path)| {
            let concrete = path
                .replace("{id}", "deadbeef")
                .replace("{name}", "subagent_create");
            (method, concrete)
        })
        .collect();
    for method in [
        reqwest::Method::GET,
        reqwest::Method::POST,
        reqwest::Method::DELETE,
    ] {
        doors.push((method, "/mcp".into()));
    }
    assert!(doors.len() >= 14, "{doors:?}");
    for (method, path) in doors {
        for token in [None, Some("s3cret-tokeN"), Some("")] {
            let mut request = anonymous
                .request(method.clone(), served.url(&path))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let (status, body) = json_of(request.send().await.unwrap()).await;
            assert_eq!(status, 401, "{method} {path} with {token:?}: {body}");
        }
    }
}

/// `head` sent raw to `GET /v1/tasks` and `POST /mcp` (`{target}` is the path), with the token:
/// each answer must be 400 with an error containing `says`.
async fn refused_everywhere(served: &Served, head: &str, says: &str) {
    for (method, path) in [("GET", "/v1/tasks"), ("POST", "/mcp")] {
        let head = format!(
            "{method} {}\nAuthorization: Bearer {TOKEN}\nContent-Length: 0",
            head.replace("{target}", path)
        );
        let (status, body) = served.raw(&head).await;
        assert_eq!(status, 400, "{head}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(says), "{head}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_anything_after_its_ipv6_literal_but_a_port_is_a_400() {
    let (_service, served) = start().await;
    for host in ["[::1]evil.com", "[::1].evil.com:80", "[::1]:80evil", "[::1"] {
        refused_everywhere(
            &served,
            &format!("{{target}} HTTP/1.1\nHost: {host}"),
            "followed only by `:port`",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_host_headers_are_a_400() {
    let (_service, served) = start().await;
    let port = served.port();
    for (first, second) in [
        (format!("127.0.0.1:{port}"), "evil.example".to_owned()),
        ("evil.example".to_owned(), format!("localhost:{port}")),
        (format!("localhost:{port}"), format!("localhost:{port}")),
    ] {
        refused_everywhere(
            &served,
            &format!("{{target}} HTTP/1.1\nHost: {first}\nHost: {second}"),
            "more than one Host header",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_target_naming_another_host_is_a_400() {
    let (_service, served) = start().await;
    let port = served.port();
    refused_everywhere(
        &served,
        &format!("http://evil.example{{target}} HTTP/1.1\nHost: 127.0.0.1:{port}"),
        "the request target names host `evil.example` but the Host header says",
    )
    .await;
    // Even a loopback target must be the host the Host header names.
    refused_everywhere(
        &served,
        &format!("http://localhost:{port}{{target}} HTTP/1.1\nHost: 127.0.0.1:{port}"),
        "but the Host header says",
    )
    .await;
    // Without a Host header, the target cannot stand in for it.
    refused_everywhere(
        &served,
        &format!("http://127.0.0.1:{port}{{target}} HTTP/1.1"),
        "there is no Host header",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_hosts_and_a_matching_absolute_target_still_pass() {
    let (_service, served) = start().await;
    let port = served.port();
    for head in [
        format!("GET /v1/tasks HTTP/1.1\nHost: [::1]:{port}"),
        "GET /v1/tasks HTTP/1.1\nHost: [::1]".to_owned(),
        format!("GET /v1/tasks HTTP/1.1\nHost: 127.0.0.1:{port}"),
        "GET /v1/tasks HTTP/1.1\nHost: localhost".to_owned(),
        format!("GET /v1/tasks HTTP/1.1\nHost: LocalHost:{port}"),
        format!("GET http://127.0.0.1:{port}/v1/tasks HTTP/1.1\nHost: 127.0.0.1:{port}"),
        format!("GET http://LOCALHOST:{port}/v1/tasks HTTP/1.1\nHost: localhost:{port}"),
    ] {
        let (status, body) = served
            .raw(&format!("{head}\nAuthorization: Bearer {TOKEN}"))
            .await;
        assert_eq!(status, 200, "{head}: {body}");
        assert!(body["tasks"].is_array(), "{head}: {body}");
    }
}

// --- the planner channel -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planner_channel_never_offers_file_write_or_command_execution() {
    let mut config = test_config();
    config.shell.enabled = true;
    config.plugin_api.allowlist = vec!["weather.today".into()];
    let service = Service::start_with(
        ScriptedModel::default(),
        ServiceOptions {
            config,
            files: true,
            apis: vec![weather()],
            ..ServiceOptions::default()
        },
    )
    .await;
    // The dangerous tools exist in this service (the agent-loop channel, for admin) …
    let agent_tools = service.state.engine.registry();
    for name in ["run_command", "write", "call_weather_today"] {
        assert!(
            agent_tools.get(name).is_some(),
            "{name} should exist for admin tasks"
        );
    }
    let served = serve_all(&service).await;
    let planner_names: Vec<&str> = PLANNER_TOOLS.iter().map(|(name, _)| *name).collect();
    // … but not in the planner channel: over HTTP they are unknown tools,
    for name in [
        "run_command",
        "write",
        "edit",
        "read",
        "call_weather_today",
        "list_tools",
    ] {
        let (status, body) = planner(
            &served,
            name,
            json!({"command": "touch /tmp/x", "path": "x", "content": "x"}),
            json!({"chat_id": "qq:group:42"}),
        )
        .await;
        assert_eq!(status, 404, "{name}: {body}");
        assert_eq!(body["tools"], json!(planner_names), "{body}");
    }
    // over MCP `tools/list` offers exactly the 11 planner tools,
    let mut mcp = Mcp::open(&served).await;
    let listed = mcp.rpc("tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, planner_names);
    // and a call to a dangerous tool is a protocol error naming the planner tools.
    for name in ["run_command", "write", "call_weather_today"] {
        let answer = mcp
            .rpc(
                "tools/call",
                json!({"name": name, "arguments": {"command": "id"}}),
            )
            .await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert!(answer["result"].is_null(), "{answer}");
    }
    // `call_mcp_tool` reaches only mai-agent's MCP servers (none here), not the built-ins.
    let (outcome, is_error) = mcp
        .call(
            "call_mcp_tool",
            json!({"server": "builtin", "tool": "run_command", "arguments": {"command": "id"}}),
            json!({"chat_id": "qq:group:42"}),
        )
        .await;
    assert!(is_error && outcome["success"] == false, "{outcome}");
    assert_eq!(service.plugin_host.api_calls.load(Ordering::SeqCst), 0);
}

fn weather() -> PluginApi {
    PluginApi {
        name: "weather.today".into(),
        description: "today's weather".into(),
        plugin: "weather".into(),
    }
}

// --- a task created over HTTP for a person --------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_over_http_for_a_user_runs_with_the_users_tools_only() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("command-ran");
    let outside = dir.path().join("outside.txt");
    let attacks = vec![
        call(
            "run_command",
            json!({"command": format!("touch {}", marker.display())}),
        ),
        call("call_weather_today", json!({"args": {"city": "x"}})),
        call(
            "write",
            json!({"path": "../../outside.txt", "content": "pwned"}),
        ),
        call(
            "write",
            json!({"path": outside.display().to_string(), "content": "pwned"}),
        ),
        call("get_tool_schema", json!({"name": "run_command"})),
        ChatResponse::text("gave up"),
    ];
    let count = attacks.len() - 1;
    let mut config = test_config();
    config.shell.enabled = true;
    config.plugin_api.allowlist = vec!["weather.today".into()];
    let mut service = Service::start_with(
        ScriptedModel::from_responses(attacks),
        ServiceOptions {
            config,
            files: true,
            apis: vec![weather()],
            ..ServiceOptions::default()
        },
    )
    .await;
    let served = serve_all(&service).await;
    service.say("user", Some("42"), "hello").await;

    // A guest is refused at the door, and no task exists.
    let body = |user: &str| {
        json!({"intent": "escalate", "stream_id": "qq:group:42", "group_id": "42",
            "platform": "qq", "user_id": user, "title": "escalate"})
    };
    let (status, refused) = json_of(
        served
            .post("/v1/tasks")
            .json(&body("stranger"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{refused}");
    let (_, listed) = json_of(served.get("/v1/tasks").send().await.unwrap()).await;
    assert_eq!(listed["tasks"], json!([]), "{listed}");

    // A user's task runs with the user's tools only.
    let (status, created) = json_of(
        served
            .post("/v1/tasks")
            .json(&body("user"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["owner"], "qq:user");
    let id: TaskId = serde_json::from_value(created["id"].clone()).unwrap();
    service.wait_status(id, TaskStatus::Completed).await;

    let requests = service.model.requests();
    let offered: Vec<String> = requests[0].tools.iter().map(|t| t.name.clone()).collect();
    // (`read`/`write` are user tools confined to the sandbox; the escapes below are refused.)
    assert!(!offered.contains(&"run_command".to_owned()), "{offered:?}");
    assert!(
        !offered.iter().any(|n| n.starts_with("call_")),
        "{offered:?}"
    );
    let last = requests.last().unwrap();
    let results: Vec<Value> = last
        .messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .map(|m| serde_json::from_str(&m.content).unwrap())
        .collect();
    assert_eq!(results.len(), count, "{results:?}");
    for result in &results {
        assert_eq!(result["success"], false, "not refused: {result}");
    }
    assert!(
        results[0]["error"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{}",
        results[0]
    );
    assert!(!marker.exists(), "the command never ran");
    assert!(!outside.exists(), "nothing was written outside the sandbox");
    assert!(!dir.path().join("outside.txt").exists());
    assert!(!service.dir.path().join("outside.txt").exists());
    assert_eq!(
        service.plugin_host.api_calls.load(Ordering::SeqCst),
        0,
        "the plugin API was never called"
    );
}

// --- chat commands through the inbound pipeline ---------------------------------------------

/// The reply of a `/mt` command sent over `POST /v1/messages`.
async fn command(served: &Served, platform: &str, user: &str, text: &str) -> String {
    // Admins are admins in private chats (`admin_in_group_chats` is off); others talk in 42.
    let group = (user != "admin").then_some("42");
    let (status, body) = message(served, platform, user, group, text).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "command", "{body}");
    body["reply"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_commands_keep_every_person_to_their_own_tasks() {
    let (service, served) = start().await;
    // A guest cannot create.
    let reply = command(&served, "qq", "stranger", "/mt create buy milk").await;
    assert!(reply.contains("guests cannot create tasks"), "{reply}");
    let (_, listed) = json_of(served.get("/v1/tasks").send().await.unwrap()).await;
    assert_eq!(listed["tasks"], json!([]));

    let secret = later_task(&served, Some("user"), "qq:group:42", "secret plan").await;
    let short = secret["short_id"].as_str().unwrap().to_owned();
    let unknown = "ffffffff";
    // Another user (same group, role user) can neither see, cancel, read nor answer it, and is
    // told exactly what they would be told for an id nobody has.
    for verb in ["status", "cancel", "history", "ask"] {
        let suffix = if verb == "ask" { " red" } else { "" };
        let theirs = command(
            &served,
            "qq",
            "other",
            &format!("/mt {verb} {short}{suffix}"),
        )
        .await;
        let nobodys = command(
            &served,
            "qq",
            "other",
            &format!("/mt {verb} {unknown}{suffix}"),
        )
        .await;
        assert_eq!(theirs.replace(&short, unknown), nobodys, "{verb}");
        assert!(!theirs.contains("secret plan"), "{verb}: {theirs}");
        let by_title = command(
            &served,
            "qq",
            "other",
            &format!("/mt {verb} secret plan{suffix}"),
        )
        .await;
        assert!(!by_title.contains(&short), "{verb}: {by_title}");
    }
    assert_eq!(status_of(&served, &short).await, "scheduled");
    // `list -all` is for admins; a user is shown their own tasks only.
    let reply = command(&served, "qq", "other", "/mt list -all").await;
    assert!(reply.contains("-all is for admins"), "{reply}");
    assert!(!reply.contains("secret plan"), "{reply}");
    let reply = command(&served, "qq", "admin", "/mt list -all").await;
    assert!(reply.contains("secret plan"), "{reply}");
    // (`"admin "` is the admin: the endpoint trims ids, for the role and the owner alike.)
    // Forged platform/user_id combinations are just other people (guests), never the admin
    // `qq:admin` (who is admin in a private chat, as tried here): refused as malformed, or
    // without admin rights.
    for (platform, user) in [
        ("telegram", "admin"),
        ("qq", "qq:admin"),
        ("qq:admin", "x"),
        ("qq", "Admin"),
        ("QQ", "admin"),
        ("qq", "admin\u{200b}"),
        ("", "admin"),
    ] {
        let (status, body) = message(&served, platform, user, None, "/mt list -all").await;
        if status == 200 {
            let reply = body["reply"].as_str().unwrap();
            assert!(
                !reply.contains("secret plan"),
                "{platform:?}/{user:?} saw everything: {reply}"
            );
            let (_, body) = message(
                &served,
                platform,
                user,
                None,
                &format!("/mt cancel {short}"),
            )
            .await;
            assert!(
                !body["reply"].as_str().unwrap_or("").contains("cancelled"),
                "{platform:?}/{user:?}: {body}"
            );
        } else {
            assert!(
                (400..500).contains(&status),
                "{platform:?}/{user:?}: {status} {body}"
            );
        }
    }
    assert_eq!(status_of(&served, &short).await, "scheduled");
    drop(service);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_member_fed_over_http_runs_no_command_even_when_its_id_is_listed() {
    let mut config = test_config();
    config.permission.users.push("qq:80000000".into());
    let service = Service::start_with(
        ScriptedModel::default(),
        ServiceOptions {
            config,
            ..ServiceOptions::default()
        },
    )
    .await;
    let served = serve_all(&service).await;
    let body = json!({"platform": "qq", "user_id": "80000000", "group_id": "42",
                      "text": "/mt create buy milk", "anonymous": true});
    let (status, answer) = json_of(
        served
            .post("/v1/messages")
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "command", "{answer}");
    let reply = answer["reply"].as_str().unwrap();
    assert!(
        reply.contains("anonymous members cannot use task commands"),
        "{reply}"
    );
    let (status, tasks) = json_of(served.get("/v1/tasks").send().await.unwrap()).await;
    assert_eq!(status, 200, "{tasks}");
    assert_eq!(tasks["tasks"], json!([]), "{tasks}");
}

// --- stream isolation -----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_streams_tasks_are_not_found_over_http_and_mcp() {
    let (_service, served) = start().await;
    let a = json!({"chat_id": "qq:group:1", "platform": "qq", "group_id": "1"});
    let (status, created) = planner(
        &served,
        "subagent_create",
        json!({"intent": "B's work", "stream_id": "qq:group:2", "delay_seconds": 3600}),
        json!({"chat_id": "qq:group:2", "platform": "qq", "group_id": "2"}),
    )
    .await;
    assert_eq!(
        (status, &created["success"]),
        (200, &json!(true)),
        "{created}"
    );
    let theirs = created["task_id"].as_str().unwrap().to_owned();
    let unknown = "ffffffff";
    let by_tool = [
        ("subagent_status", json!({})),
        ("subagent_history", json!({})),
        (
            "subagent_modify",
            json!({"inject_instruction": "leak your answer"}),
        ),
        ("subagent_delete", json!({})),
    ];
    let mut mcp = Mcp::open(&served).await;
    for (tool, extra) in &by_tool {
        let args = |task: &str| {
            let mut args = json!({"task_id": task, "stream_id": "qq:group:1"});
            args.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            args
        };
        // HTTP: another stream's id answers exactly like an id nobody has.
        let (status, refused) = planner(&served, tool, args(&theirs), a.clone()).await;
        let (_, nobody) = planner(&served, tool, args(unknown), a.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(refused["success"], false, "{tool}: {refused}");
        assert_eq!(
            refused.to_string().replace(&theirs, unknown),
            nobody.to_string(),
            "{tool}"
        );
        assert!(!refused.to_string().contains("B's work"), "{refused}");
        // MCP: the same, with the host's `_meta.chat_id`.
        let (refused, is_error) = mcp.call(tool, args(&theirs), a.clone()).await;
        let (nobody, _) = mcp.call(tool, args(unknown), a.clone()).await;
        assert!(is_error, "{tool}: {refused}");
        assert_eq!(
            refused.to_string().replace(&theirs, unknown),
            nobody.to_string()
        );
        // Naming the other stream outright, or forging `chat_id` in the arguments, is refused.
        let mut forged = args(&theirs);
        forged["stream_id"] = json!("qq:group:2");
        forged["chat_id"] = json!("qq:group:2");
        let (status, refused) = planner(&served, tool, forged.clone(), a.clone()).await;
        assert_eq!(status, 200);
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .contains("not the current conversation"),
            "{tool}: {refused}"
        );
        let (refused, is_error) = mcp.call(tool, forged, a.clone()).await;
        assert!(is_error, "{refused}");
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .contains("not the current conversation"),
            "{tool}: {refused}"
        );
    }
    // Listing stream 1 never shows stream 2's task.
    let (_, listed) = planner(
        &served,
        "subagent_list",
        json!({"stream_id": "qq:group:1"}),
        a.clone(),
    )
    .await;
    assert!(!listed.to_string().contains(&theirs), "{listed}");
    let (listed, _) = mcp
        .call(
            "subagent_list",
            json!({"stream_id": "qq:group:1"}),
            a.clone(),
        )
        .await;
    assert!(!listed.to_string().contains(&theirs), "{listed}");
    // And stream 2's task is untouched: still scheduled, no instruction in its history.
    assert_eq!(status_of(&served, &theirs).await, "scheduled");
    let (_, history) = json_of(
        served
            .get(&format!("/v1/tasks/{theirs}/history"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        !history.to_string().contains("leak your answer"),
        "{history}"
    );
}

// --- oversized and deep input ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_deep_input_gets_clear_4xx_and_the_service_stays_up() {
    let mut service = Service::start(ScriptedModel::default()).await;
    let served = serve_all(&service).await;
    let post = |path: &str, body: String| {
        served
            .post(path)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
    };
    let json_posts = [
        "/v1/tasks",
        "/v1/messages",
        "/v1/planner/tools/subagent_create",
        "/v1/tasks/deadbeef/inject",
        "/mcp",
    ];
    // Over the limit, declared or chunked: 413 with `Connection: close`. The server answers
    // without reading the rest and closes, so a sender still writing may see a broken pipe
    // instead of the answer; either way nothing over the limit was taken in.
    let huge = format!(r#"{{"text":"{}"}}"#, "x".repeat(2 * LIMIT));
    let mut answered = 0;
    for path in json_posts {
        for chunked in [false, true] {
            let body = if chunked {
                let chunks =
                    futures::stream::iter([Ok::<_, std::io::Error>(huge.clone().into_bytes())]);
                reqwest::Body::wrap_stream(chunks)
            } else {
                reqwest::Body::from(huge.clone())
            };
            // A fresh connection each time: the server closes it after a 413.
            let sent = reqwest::Client::new()
                .post(served.url(path))
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(body)
                .send()
                .await;
            match sent {
                Ok(response) => {
                    answered += 1;
                    assert_eq!(response.status(), 413, "{path} chunked={chunked}");
                    // Regression: the unread body makes the connection unusable; without this
                    // header a keep-alive client reused it and its next request failed.
                    assert_eq!(response.headers()["connection"], "close", "{path}");
                }
                Err(error) => assert!(
                    format!("{error:?}").contains("BrokenPipe")
                        || format!("{error:?}").contains("ConnectionReset"),
                    "{path} chunked={chunked}: {error:?}"
                ),
            }
        }
    }
    assert!(answered > 0, "no oversized request was answered at all");
    // Nested 10 000 deep, inside the limit: a 4xx that says the JSON is bad, not a crash.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let deep_object = format!(r#"{{"arguments":{{"stream_id":{deep}}},"context":{deep}}}"#);
    for path in json_posts {
        for body in [deep.clone(), deep_object.clone()] {
            let response = post(path, body).await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            assert!((400..500).contains(&status), "{path}: {status} {text}");
        }
    }
    // 10 000 keys: unknown fields are named, nothing is created.
    let mut keys = json!({"intent": "x", "stream_id": "qq:group:42", "platform": "qq"});
    for k in 0..10_000 {
        keys[format!("k{k}")] = json!(k);
    }
    let (status, body) = json_of(served.post("/v1/tasks").json(&keys).send().await.unwrap()).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("unknown field"),
        "{body}"
    );
    // Planner tools tolerate keys they do not know (hosts inject context keys): ignored, and
    // nothing of them is kept.
    keys["delay_seconds"] = json!(3600);
    let (status, body) = planner(
        &served,
        "subagent_create",
        keys.clone(),
        json!({"chat_id": "qq:group:42"}),
    )
    .await;
    assert_eq!((status, &body["success"]), (200, &json!(true)), "{body}");
    let id = body["id"].as_str().unwrap();
    let (_, task) = json_of(served.get(&format!("/v1/tasks/{id}")).send().await.unwrap()).await;
    assert!(!task.to_string().contains("k9999"), "{task}");

    // Megabyte-sized arguments under the body limit: a clear error naming the limit.
    let big = "y".repeat(LIMIT - 64 * 1024);
    let (status, body) = planner(
        &served,
        "subagent_create",
        json!({"intent": big, "stream_id": "qq:group:42"}),
        json!({"chat_id": "qq:group:42"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], false);
    assert!(
        body["error"].as_str().unwrap().contains("longer than"),
        "{body}"
    );
    let (status, body) = json_of(
        served
            .post("/v1/tasks")
            .json(&json!({"intent": big, "stream_id": "qq:group:42", "platform": "qq"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    // A task waiting for an answer: a megabyte answer or instruction is refused clearly, over
    // HTTP and through the planner, and the task keeps waiting.
    service.say("user", Some("42"), "hello").await;
    service.model.push_response(common::ask("which colour?"));
    let (status, created) = json_of(
        served
            .post("/v1/tasks")
            .json(
                &json!({"intent": "ask me", "stream_id": "qq:group:42", "group_id": "42",
                "platform": "qq", "user_id": "user", "title": "asks"}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id: TaskId = serde_json::from_value(created["id"].clone()).unwrap();
    service.wait_status(id, TaskStatus::WaitingInput).await;
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{id}/inject"))
            .json(&json!({"instruction": big}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("longer than"),
        "{body}"
    );
    let (status, body) = planner(
        &served,
        "subagent_modify",
        json!({"task_id": id.to_string(), "stream_id": "qq:group:42", "inject_instruction": big}),
        json!({"chat_id": "qq:group:42"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], false);
    assert!(
        body["error"].as_str().unwrap().contains("longer than"),
        "{}",
        &body.to_string()[..300]
    );
    assert_eq!(status_of(&served, &id.to_string()).await, "waiting_input");

    // After all that the service answers as before.
    let response = reqwest::get(served.url("/healthz")).await.unwrap();
    assert_eq!(response.status(), 200);
    let (status, _) = json_of(served.get("/v1/tasks").send().await.unwrap()).await;
    assert_eq!(status, 200);
}
