//! What the web dashboard needs from the HTTP API, against a real engine, host and store served
//! on 127.0.0.1:0: its page and files load without the token but behind the Host/Origin checks
//! and with a strict Content-Security-Policy; pause and resume (scheduled tasks too); filters,
//! per-status counts and paging on the task list; the role × tool matrix; MCP servers (a real
//! one from `testing/peers`, and one that cannot start); a task's chat (404 for a chat no task
//! is in, 503 while the host is away); `created` events naming the parent; the health history
//! from the metrics; and changes sent by the dashboard logged as `dashboard:operator`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../testing/sse.rs"]
mod sse;

use std::time::Duration;

use common::{Served, Service, ServiceOptions, call, json_of, serve, server_config};
use mai_core::model::ChatResponse;
use mai_core::task::{TaskId, TaskStatus};
use mai_host::{MaiBotConfig, MaiBotHost};
use mai_llm::ScriptedModel;
use mai_server::HttpOptions;
use serde_json::{Value, json};
use sse::SseReader;

async fn start(model: ScriptedModel) -> (Service, Served) {
    let service = Service::start(model).await;
    let served = serve(&service, HttpOptions::new(server_config())).await;
    (service, served)
}

fn task_id(body: &Value) -> TaskId {
    serde_json::from_value(body["id"].clone()).unwrap()
}

async fn create(served: &Served, fields: Value) -> Value {
    let mut fields = fields;
    fields["stream_id"] = json!("qq:group:42");
    fields["platform"] = json!("qq");
    let (status, body) =
        json_of(served.post("/v1/tasks").json(&fields).send().await.unwrap()).await;
    assert_eq!(status, 201, "{body}");
    body
}

/// `POST path` (as the dashboard when `dashboard`): the status and the JSON body.
async fn post(served: &Served, path: &str, dashboard: bool) -> (u16, Value) {
    let mut request = served.post(path);
    if dashboard {
        request = request.header("X-Mai-Client", "dashboard");
    }
    json_of(request.send().await.unwrap()).await
}

/// `POST /v1/tasks/{id}/{what}` (pause, resume, …; as the dashboard when `dashboard`).
async fn act(served: &Served, id: TaskId, what: &str, dashboard: bool) -> (u16, Value) {
    post(
        served,
        &format!("/v1/tasks/{}/{what}", id.short()),
        dashboard,
    )
    .await
}

/// `GET path`: the status and the JSON body.
async fn get(served: &Served, path: &str) -> (u16, Value) {
    json_of(served.get(path).send().await.unwrap()).await
}

#[tokio::test]
async fn the_dashboard_page_loads_without_the_token_behind_the_host_check_with_a_strict_policy() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let anonymous = reqwest::Client::new();
    let page = anonymous.get(served.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
    ] {
        assert!(policy.contains(part), "{policy}");
    }
    assert!(
        !policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"),
        "{policy}"
    );
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let html = page.text().await.unwrap();
    assert!(
        html.contains(r#"<script type="module" src="/ui/main.js">"#),
        "{html}"
    );
    assert!(!html.contains("<script>"), "no inline script: {html}");

    for name in mai_server::http::dashboard::asset_names() {
        let file = anonymous
            .get(served.url(&format!("/ui/{name}")))
            .send()
            .await
            .unwrap();
        assert_eq!(file.status(), 200, "{name}");
        assert!(
            file.headers().contains_key("content-security-policy"),
            "{name}"
        );
    }
    let js = anonymous
        .get(served.url("/ui/main.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        js.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let missing = anonymous
        .get(served.url("/ui/secrets.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let (status, body) = json_of(anonymous.post(served.url("/")).send().await.unwrap()).await;
    assert_eq!(status, 405, "{body}");
    assert!(body["error"].as_str().unwrap().contains("method"), "{body}");

    // The data is not open: the page's calls need the token.
    let data = anonymous.get(served.url("/v1/tasks")).send().await.unwrap();
    assert_eq!(data.status(), 401);
    // Same Host and Origin checks as the API.
    let rebound = anonymous
        .get(served.url("/"))
        .header("Host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    let foreign = anonymous
        .get(served.url("/"))
        .header("Origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
}

#[tokio::test]
async fn a_page_served_under_an_allowed_host_may_call_the_api_from_its_own_origin() {
    let service = Service::start(ScriptedModel::default()).await;
    let mut config = server_config();
    config.allowed_hosts = vec!["bot.lan".into()];
    let served = serve(&service, HttpOptions::new(config)).await;
    let port = served.port();
    let own = served
        .get("/v1/tasks")
        .header("Host", format!("bot.lan:{port}"))
        .header("Origin", format!("http://bot.lan:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);
    let other = served
        .get("/v1/tasks")
        .header("Host", format!("bot.lan:{port}"))
        .header("Origin", "http://bot.lan:1")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 403);
}

#[tokio::test]
async fn tasks_scheduled_or_waiting_are_paused_and_resumed_and_a_dashboard_change_names_the_dashboard()
 {
    let model = ScriptedModel::from_responses([common::ask("which colour?")]);
    let (mut service, served) = start(model).await;
    service.say("user", Some("42"), "hello").await;
    let scheduled = create(
        &served,
        json!({"intent": "later", "title": "later", "delay_seconds": 3600}),
    )
    .await;
    // A scheduled task pauses (its timer stops) and resumes to its time, still ahead.
    let (status, body) = act(&served, task_id(&scheduled), "pause", true).await;
    assert_eq!(status, 200, "a scheduled task pauses: {body}");
    assert_eq!(body["task"]["status"], "paused");
    assert_eq!(body["stopping"], false);
    let (status, body) = act(&served, task_id(&scheduled), "resume", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["task"]["status"], "scheduled",
        "its time is ahead: {body}"
    );
    assert_eq!(body["task"]["scheduled_at"], scheduled["scheduled_at"]);

    let waiting = create(&served, json!({"intent": "paint", "title": "paint"})).await;
    let id = task_id(&waiting);
    service.wait_status(id, TaskStatus::WaitingInput).await;
    let (status, body) = act(&served, id, "pause", true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["task"]["status"], "paused");
    assert_eq!(body["stopping"], false);
    let (status, body) = act(&served, id, "pause", false).await;
    assert_eq!(status, 409, "paused twice: {body}");
    let (status, body) = act(&served, id, "resume", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["task"]["status"], "pending");
    let log = body["task"]["status_log"].as_array().unwrap();
    let actors: Vec<&str> = log.iter().map(|l| l["actor"].as_str().unwrap()).collect();
    assert_eq!(
        actors[actors.len() - 2..],
        ["dashboard:operator", "planner:qq:group:42"],
        "{log:?}"
    );
    let (status, body) = act(&served, task_id(&scheduled), "resume", false).await;
    assert_eq!(status, 409, "resuming a task that is not paused: {body}");
}

#[tokio::test]
async fn an_answer_from_the_dashboard_is_named_in_the_resume_line() {
    let model = ScriptedModel::from_responses([
        common::ask("which colour?"),
        ChatResponse::text("red it is"),
    ]);
    let (mut service, served) = start(model).await;
    service.say("user", Some("42"), "hello").await;
    let created = create(&served, json!({"intent": "paint", "title": "paint"})).await;
    let id = task_id(&created);
    service.wait_status(id, TaskStatus::WaitingInput).await;
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/answer", id.short()))
            .header("X-Mai-Client", "dashboard")
            .json(&json!({"text": "red"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    service.wait_status(id, TaskStatus::Completed).await;
    let (_, task) = json_of(served.get(&format!("/v1/tasks/{id}")).send().await.unwrap()).await;
    let resumed = task["status_log"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["reason"] == "resumed with the answer")
        .cloned()
        .unwrap();
    assert_eq!(resumed["actor"], "dashboard:operator", "{resumed}");
    assert!(
        task["metadata"].get("answered_by").is_none(),
        "cleared: {task}"
    );
}

#[tokio::test]
async fn the_task_list_filters_by_owner_level_time_and_text_and_counts_per_status() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let water = create(&served, json!({"intent": "water", "title": "Water the plants", "cron_expr": "0 18 * * *", "level": "instant"})).await;
    create(
        &served,
        json!({"intent": "report", "title": "weekly report", "delay_seconds": 3600}),
    )
    .await;
    let mine = create(&served, json!({"intent": "mine", "title": "my errand", "user_id": "user", "group_id": "42", "delay_seconds": 60})).await;
    let cancelled = create(
        &served,
        json!({"intent": "gone", "title": "gone", "delay_seconds": 60}),
    )
    .await;
    served
        .post(&format!("/v1/tasks/{}/cancel", task_id(&cancelled).short()))
        .send()
        .await
        .unwrap();

    let list = |query: &str| {
        let request = served.get(&format!("/v1/tasks?{query}"));
        async move { json_of(request.send().await.unwrap()).await }
    };
    let titles = |body: &Value| -> Vec<String> {
        body["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["title"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, body) = list("counts=true").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["counts"], json!({"scheduled": 3, "cancelled": 1}));
    assert_eq!(body["counts_complete"], true);
    let (_, body) = list("counts=true&status=cancelled").await;
    assert_eq!(titles(&body), ["gone"]);
    assert_eq!(
        body["counts"]["scheduled"], 3,
        "counts ignore the status filter"
    );
    let (_, body) = list("q=WATER").await;
    assert_eq!(titles(&body), ["Water the plants"]);
    let (_, body) = list(&format!("q={}", &water["short_id"].as_str().unwrap()[..6])).await;
    assert_eq!(titles(&body), ["Water the plants"]);
    let (_, body) = list("level=instant").await;
    assert_eq!(titles(&body), ["Water the plants"]);
    let (_, body) = list(&format!("owner={}", mine["owner"].as_str().unwrap())).await;
    assert_eq!(titles(&body), ["my errand"]);
    let (_, body) = list("since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z&counts=true").await;
    assert_eq!(titles(&body), Vec::<String>::new());
    assert_eq!(body["counts"], json!({}));
    let (status, body) = list("since=yesterday").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = list("owner=nobody").await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("owner"), "{body}");
}

#[tokio::test]
async fn the_task_list_pages_through_every_task_newest_or_oldest_first_with_a_total() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let mut ids = Vec::new();
    for n in 0..5 {
        let task = create(
            &served,
            json!({"intent": "later", "title": format!("t{n}"), "delay_seconds": 3600}),
        )
        .await;
        ids.push(task_id(&task));
    }
    let page = |query: &str| {
        let request = served.get(&format!("/v1/tasks?{query}"));
        let query = query.to_owned();
        async move {
            let (status, body) = json_of(request.send().await.unwrap()).await;
            assert_eq!(status, 200, "{query}: {body}");
            let titles: Vec<String> = body["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["title"].as_str().unwrap().to_owned())
                .collect();
            (titles, body)
        }
    };
    let (titles, body) = page("limit=2").await;
    assert_eq!(titles, ["t4", "t3"]);
    assert_eq!(
        (&body["total"], &body["next_offset"], &body["complete"]),
        (&json!(5), &json!(2), &json!(true))
    );
    let (titles, body) = page("limit=2&offset=2").await;
    assert_eq!(titles, ["t2", "t1"]);
    assert_eq!(body["next_offset"], 4);
    let (titles, body) = page("limit=2&offset=4").await;
    assert_eq!(titles, ["t0"]);
    assert_eq!(body["next_offset"], Value::Null, "the last page: {body}");
    let (titles, body) = page("order=oldest&limit=3").await;
    assert_eq!(titles, ["t0", "t1", "t2"]);
    assert_eq!(body["next_offset"], 3);
    let (titles, body) = page("order=oldest&offset=3").await;
    assert_eq!(titles, ["t3", "t4"]);
    assert_eq!(body["next_offset"], Value::Null);
    let (titles, body) = page("offset=9").await;
    assert!(titles.is_empty(), "{body}");
    assert_eq!(
        (&body["total"], &body["next_offset"]),
        (&json!(5), &Value::Null)
    );

    // The total counts what the status filter keeps.
    served
        .post(&format!("/v1/tasks/{}/cancel", ids[1].short()))
        .send()
        .await
        .unwrap();
    let (titles, body) = page("status=scheduled&order=oldest&counts=true").await;
    assert_eq!(titles, ["t0", "t2", "t3", "t4"]);
    assert_eq!(body["total"], 4);
    assert_eq!(body["counts"], json!({"scheduled": 4, "cancelled": 1}));
    let (status, body) =
        json_of(served.get("/v1/tasks?order=sideways").send().await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("order"), "{body}");
}

#[tokio::test]
async fn the_tools_route_gives_the_role_matrix_and_each_roles_tools() {
    let (service, served) = start(ScriptedModel::default()).await;
    let registry = service.state.engine.registry();
    let (status, matrix) = json_of(served.get("/v1/tools").send().await.unwrap()).await;
    assert_eq!(status, 200, "{matrix}");
    // The one matrix function `mai-agent tools --json` prints too.
    assert_eq!(
        matrix,
        serde_json::to_value(mai_tools::matrix::matrix(registry)).unwrap()
    );
    let tools = matrix["tools"].as_array().unwrap();
    assert_eq!(tools.len(), registry.all().len());
    for tool in tools {
        assert!(tool["schema_tokens"].as_u64().unwrap() > 0, "{tool}");
        assert!(!tool["description"].as_str().unwrap().is_empty(), "{tool}");
    }
    for role in mai_core::role::Role::ALL {
        let names = registry.names(role);
        for tool in tools {
            let listed = tool["roles"]
                .as_array()
                .unwrap()
                .contains(&json!(role.as_str()));
            let shown = names.iter().any(|n| n == tool["name"].as_str().unwrap());
            assert_eq!(listed, shown, "{role} {tool}");
        }
        let (status, one) = json_of(
            served
                .get(&format!("/v1/tools?role={role}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(one["tools"].as_array().unwrap().len(), names.len());
        assert_eq!(one["schema_tokens"], matrix["schema_tokens"][role.as_str()]);
        assert!(one["schema_tokens"].as_u64().unwrap() > 0);
    }
    let (status, body) = json_of(served.get("/v1/tools?role=root").send().await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = json_of(served.get("/v1/mcp/servers").send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"servers": []}));
}

#[tokio::test]
async fn a_tasks_chat_its_reply_nested_live_and_the_health_history_from_the_metrics_are_served() {
    let model = ScriptedModel::from_responses([
        call("list_my_tasks", json!({})),
        ChatResponse::text("done"),
    ]);
    let (mut service, served) = start(model).await;
    service.say("user", Some("42"), "hello <b>there</b>").await;
    let (status, body) = get(&served, "/v1/streams/qq%3Agroup%3A99/messages").await;
    assert_eq!(status, 404, "no task is in that chat: {body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("no task is in stream `qq:group:99`"),
        "{body}"
    );

    let mut events = SseReader::new(served.get("/v1/events").send().await.unwrap());
    let created = create(&served, json!({"intent": "count", "title": "count"})).await;
    // Its own `created` event names no parent; its reply task's names it, so a page can nest
    // the reply under it as it appears.
    let (name, data) = events.next_of(task_id(&created)).await;
    assert_eq!(
        (name.as_str(), &data["parent_task_id"]),
        ("created", &Value::Null)
    );
    let reply_created = loop {
        let (name, data) = events.next().await.expect("the stream goes on");
        if name == "created" {
            break data;
        }
    };
    assert_eq!(
        reply_created["parent_task_id"], created["id"],
        "{reply_created}"
    );
    service
        .wait_status(task_id(&created), TaskStatus::Completed)
        .await;
    // Its reply runs after it: nothing is running once the reply is delivered too.
    let admin = mai_engine::Caller::admin_reader("test").unwrap();
    let record = service.state.engine.get(&admin, task_id(&created)).await;
    let reply = mai_engine::reply_task_id(&record.unwrap());
    assert_eq!(reply_created["task_id"], reply.to_string());
    service.wait_status(reply, TaskStatus::Completed).await;
    the_list_of_what_it_made_holds_its_reply(&served, &created, reply).await;

    let (status, body) = get(&served, "/v1/streams/qq%3Agroup%3A42/messages?limit=5").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["stream_id"], "qq:group:42");
    assert_eq!(body["messages"][0]["text"], "hello <b>there</b>");
    let (status, body) = get(&served, "/v1/streams/qq:group:42/messages?limit=0").await;
    assert_eq!(status, 400, "{body}");

    the_health_history_counts_what_the_metrics_count(&served).await;
}

/// `GET /v1/tasks?parent=…` of a task whose only child is its delivered `reply`: by the full id
/// or the start of it, counted by status; a parent that names no task is 404.
async fn the_list_of_what_it_made_holds_its_reply(served: &Served, created: &Value, reply: TaskId) {
    let short = &created["short_id"].as_str().unwrap()[..6];
    for parent in [created["id"].as_str().unwrap(), short] {
        let (status, body) = get(served, &format!("/v1/tasks?parent={parent}&counts=true")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["tasks"][0]["id"], reply.to_string(), "{body}");
        assert_eq!(body["total"], 1, "{body}");
        assert_eq!(body["counts"], json!({"completed": 1}), "{body}");
    }
    let (status, body) = get(served, "/v1/tasks?parent=ffffffffff").await;
    assert_eq!(status, 404, "a parent that names no task: {body}");
}

/// After one task and its reply ran (two model calls, both finished, nothing active), the
/// health history says so, and its finished count is the metrics' own.
async fn the_health_history_counts_what_the_metrics_count(served: &Served) {
    let (status, body) = get(served, "/v1/health/history").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["interval_secs"], 10);
    let now = &body["now"];
    assert_eq!(now["model"]["calls"], 2, "{body}");
    assert_eq!(now["model"]["errors"], 0);
    // Every active state is counted; with the reply delivered, nothing runs.
    for state in ["scheduled", "pending", "running", "waiting_input", "paused"] {
        assert_eq!(now["active"][state], 0, "{state}: {body}");
    }
    assert!(body["samples"].is_array());
    // Finished tasks are the metrics' own count, not a second one.
    let metrics = served
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let finished: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("mai_tasks_finished_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(finished, 2, "{metrics}");
    assert_eq!(now["finished"], finished, "{body}");
}

#[tokio::test]
async fn a_tasks_chat_is_unavailable_while_the_chat_host_is_away() {
    let bridge = MaiBotHost::new(MaiBotConfig {
        request_timeout: Duration::from_secs(30),
        offline_timeout: Duration::from_secs(600),
    });
    let options = ServiceOptions {
        bridge: Some(bridge),
        ..ServiceOptions::default()
    };
    let service = Service::start_with(ScriptedModel::default(), options).await;
    let served = serve(&service, HttpOptions::new(server_config())).await;
    create(
        &served,
        json!({"intent": "later", "title": "later", "delay_seconds": 3600}),
    )
    .await;
    let (status, body) = get(&served, "/v1/streams/qq%3Agroup%3A42/messages").await;
    assert_eq!(status, 503, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("the chat host cannot give the messages of `qq:group:42` now"),
        "{body}"
    );
    assert!(error.contains("no MaiBot bridge is connected"), "{body}");
}

#[path = "../../../testing/peers.rs"]
mod shared_peers;

/// A stdio MCP server entry for `command args…`, admin-only like every server by default.
fn stdio(name: &str, command: &str, args: &[&str]) -> mai_core::config::McpServerConfig {
    mai_core::config::McpServerConfig {
        name: name.into(),
        transport: mai_core::config::McpTransport::Stdio,
        command: Some(command.into()),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Default::default(),
        url: None,
        headers: Default::default(),
        startup_timeout_secs: 30,
        call_timeout_secs: 30,
        min_role: mai_core::role::Role::Admin,
        tool_roles: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_servers_route_shows_a_real_servers_tools_and_a_broken_ones_error() {
    let Some(peers) = shared_peers::peers() else {
        return;
    };
    let everything = peers.join("node/node_modules/.bin/mcp-server-everything");
    let manager = mai_mcp::McpManager::new(mai_mcp::ManagerOptions::default());
    manager
        .start(&[
            stdio("everything", &everything.to_string_lossy(), &["stdio"]),
            stdio("broken", "/nonexistent/mcp-server", &[]),
        ])
        .await;
    let service = Service::start(ScriptedModel::default()).await;
    let served = serve(
        &service,
        HttpOptions {
            mcp_servers: Some(manager.clone()),
            ..HttpOptions::new(server_config())
        },
    )
    .await;
    let (status, body) = json_of(served.get("/v1/mcp/servers").send().await.unwrap()).await;
    manager.shutdown();
    assert_eq!(status, 200, "{body}");
    let servers = body["servers"].as_array().unwrap();
    let by_name = |name: &str| {
        servers
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {body}"))
    };
    let ready = by_name("everything");
    assert_eq!(ready["state"], "ready", "{ready}");
    assert_eq!(ready["last_error"], Value::Null);
    let tools = ready["tools"].as_array().unwrap();
    assert_eq!(tools.len() as u64, ready["tool_count"].as_u64().unwrap());
    let echo = tools.iter().find(|t| t["raw_name"] == "echo").unwrap();
    assert_eq!(echo["name"], "mcp_everything_echo");
    assert_eq!(echo["min_role"], "admin");
    let broken = by_name("broken");
    assert_eq!(broken["state"], "failed", "{broken}");
    assert!(
        broken["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{broken}"
    );
    assert_eq!(broken["tools"], json!([]));
}
