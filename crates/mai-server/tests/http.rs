//! The HTTP API against a real engine, host and store, served on 127.0.0.1:0 and driven with
//! reqwest: every endpoint, the guard (token, Host, Origin, body size), client mistakes as 4xx
//! with a JSON error naming the field, and a task created over HTTP running to a delivered reply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../testing/sse.rs"]
mod sse;

use common::{Served, Service, TOKEN, call, json_of, serve, server_config};
use mai_core::config::ServerConfig;
use mai_core::model::ChatResponse;
use mai_core::task::{TaskId, TaskStatus};
use mai_llm::ScriptedModel;
use mai_server::HttpOptions;
use serde_json::{Value, json};
use sse::SseReader;

async fn start(model: ScriptedModel) -> (Service, Served) {
    let service = Service::start(model).await;
    let served = serve(&service, HttpOptions::new(server_config())).await;
    (service, served)
}

/// The `/metrics` text, checked to hold every one of `lines`.
async fn metrics_holding(served: &Served, lines: &[&str]) -> String {
    let metrics = served
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in lines {
        assert!(metrics.contains(line), "missing `{line}` in:\n{metrics}");
    }
    metrics
}

fn task_id(body: &Value) -> TaskId {
    serde_json::from_value(body["id"].clone()).unwrap()
}

#[tokio::test]
async fn healthz_is_open_and_everything_else_needs_the_token() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let anonymous = reqwest::Client::new();
    let (status, body) = json_of(anonymous.get(served.url("/healthz")).send().await.unwrap()).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    for path in [
        "/v1/tasks",
        "/metrics",
        "/openapi.json",
        "/v1/planner/board?stream_id=s",
    ] {
        let response = anonymous.get(served.url(path)).send().await.unwrap();
        assert_eq!(
            response.headers()["www-authenticate"],
            "Bearer realm=\"mai-agent\""
        );
        let (status, body) = json_of(response).await;
        assert_eq!(status, 401, "{path}");
        assert!(
            body["error"].as_str().unwrap().contains("Authorization"),
            "{body}"
        );
        let wrong = anonymous
            .get(served.url(path))
            .bearer_auth("s3cret-tokeN")
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(wrong).await;
        assert_eq!(status, 401, "{path}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("wrong bearer token"),
            "{body}"
        );
    }
    let (status, _) = json_of(served.get("/v1/tasks").send().await.unwrap()).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn rebinding_hosts_and_foreign_origins_are_refused() {
    let (_service, served) = start(ScriptedModel::default()).await;
    for host in [
        "evil.example",
        "evil.example:8760",
        "localhost.evil.example",
    ] {
        let response = served
            .get("/v1/tasks")
            .header("host", host)
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(response).await;
        assert_eq!(status, 403, "{host}");
        assert!(
            body["error"].as_str().unwrap().contains("allowed_hosts"),
            "{body}"
        );
    }
    let response = served
        .get("/v1/tasks")
        .header("host", "localhost:1234")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    for origin in [
        "http://evil.example",
        "null",
        "http://localhost.evil.example",
    ] {
        let response = served
            .get("/v1/tasks")
            .header("origin", origin)
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(response).await;
        assert_eq!(status, 403, "{origin}");
        assert!(
            body["error"].as_str().unwrap().contains("allowed_origins"),
            "{body}"
        );
    }
    let response = served
        .get("/v1/tasks")
        .header("origin", "http://127.0.0.1:5173")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Even a rebinding page that knows the token is refused; healthz stays open.
    let response = reqwest::Client::new()
        .get(served.url("/healthz"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// A web page on an allowed origin (a dashboard) can call the API: its preflight is answered
/// without the token, and every answer — errors too — names the origin so the page may read it.
#[tokio::test]
async fn browsers_on_allowed_origins_pass_cors_and_others_do_not() {
    let service = Service::start(ScriptedModel::default()).await;
    let mut config = server_config();
    config.allowed_origins = vec!["https://dash.example.org".into()];
    let mut options = HttpOptions::new(config);
    options.mcp = Some(axum::Router::new().fallback(|| async { "mcp here" }));
    let served = serve(&service, options).await;
    let anonymous = reqwest::Client::new();
    let preflight = |origin: &str, path: &str| {
        anonymous
            .request(reqwest::Method::OPTIONS, served.url(path))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .send()
    };
    for path in [
        "/v1/tasks",
        "/v1/planner/tools/subagent_list",
        "/mcp",
        "/v1/events",
    ] {
        let response = preflight("https://dash.example.org", path).await.unwrap();
        assert_eq!(response.status(), 204, "{path}");
        let headers = response.headers();
        assert_eq!(
            headers["access-control-allow-origin"],
            "https://dash.example.org"
        );
        assert!(
            headers["access-control-allow-methods"]
                .to_str()
                .unwrap()
                .contains("POST")
        );
        let allowed = headers["access-control-allow-headers"].to_str().unwrap();
        assert!(allowed.contains("authorization") && allowed.contains("content-type"));
        assert_eq!(headers["vary"], "origin");
    }
    // A loopback page (a dashboard served locally) is allowed by default.
    let response = preflight("http://localhost:3000", "/v1/tasks")
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    // Any other origin: refused, and nothing says it may read the answer.
    let response = preflight("https://evil.example", "/v1/tasks")
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert!(
        !response
            .headers()
            .contains_key("access-control-allow-origin")
    );
    // Without the preflight headers an OPTIONS is an ordinary request: the token is needed.
    let response = anonymous
        .request(reqwest::Method::OPTIONS, served.url("/v1/tasks"))
        .header("origin", "https://dash.example.org")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    // The real request: answered with the origin, the headers the page may read exposed.
    let response = served
        .post("/v1/planner/tools/subagent_list")
        .header("origin", "https://dash.example.org")
        .json(&json!({"arguments": {"stream_id": "A"}, "context": {"chat_id": "A"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://dash.example.org"
    );
    assert!(
        headers["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .contains("x-tool-outcome")
    );
    // A refusal is readable too (the page can show "wrong token").
    let response = anonymous
        .get(served.url("/v1/tasks"))
        .header("origin", "https://dash.example.org")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://dash.example.org"
    );
    // No Origin (not a browser): no CORS headers at all.
    let response = served.get("/v1/tasks").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        !response
            .headers()
            .contains_key("access-control-allow-origin")
    );
}

#[tokio::test]
async fn allowed_hosts_and_origins_from_the_config_are_let_in() {
    let service = Service::start(ScriptedModel::default()).await;
    let config = ServerConfig {
        auth_token: None,
        allowed_hosts: vec!["bot.example.org".into()],
        allowed_origins: vec!["https://dash.example.org".into()],
        ..ServerConfig::default()
    };
    let served = serve(&service, HttpOptions::new(config)).await;
    let response = served
        .get("/v1/tasks")
        .header("host", "bot.example.org:443")
        .header("origin", "https://dash.example.org")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn client_mistakes_are_4xx_with_an_error_naming_the_field() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let cases: Vec<(&str, &str, &str, u16, &str)> = vec![
        (
            "POST",
            "/v1/tasks",
            "{not json",
            400,
            "parse the request body as JSON",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"stream_id":"s","platform":"qq"}"#,
            422,
            "intent",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":5,"stream_id":"s","platform":"qq"}"#,
            422,
            "intent",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":"s","platform":"qq","delay_second":5}"#,
            422,
            "delay_second",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":"s","platform":"qq","level":"huge"}"#,
            422,
            "level",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":"s","platform":"qq","delay_seconds":5,"cron_expr":"0 18 * * *"}"#,
            400,
            "not both",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":"s","platform":"qq","cron_expr":"every day"}"#,
            400,
            "cron",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":"s","platform":"qq","timezone":"Asia/Shanghai"}"#,
            400,
            "only a cron_expr has a time zone",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":"s","platform":"qq","cron_expr":"0 18 * * *","timezone":"Beijing"}"#,
            400,
            "not an IANA time zone name",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"  ","stream_id":"s","platform":"qq"}"#,
            400,
            "intent is empty",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":" ","platform":"qq"}"#,
            400,
            "stream_id",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":"s","platform":"qq","user_id":"a b"}"#,
            400,
            "user_id",
        ),
        (
            "POST",
            "/v1/tasks",
            r#"{"intent":"x","stream_id":"s","platform":"q:q"}"#,
            400,
            "platform",
        ),
        ("GET", "/v1/tasks?status=done", "", 400, "status"),
        ("GET", "/v1/tasks?limit=0", "", 400, "limit"),
        ("GET", "/v1/tasks?limit=many", "", 400, "limit"),
        ("GET", "/v1/tasks?colour=red", "", 400, "colour"),
        ("GET", "/v1/tasks/deadbeef", "", 404, "deadbeef"),
        ("POST", "/v1/tasks/deadbeef/cancel", "", 404, "deadbeef"),
        (
            "POST",
            "/v1/tasks/deadbeef/inject",
            r#"{"instruction":"go"}"#,
            404,
            "deadbeef",
        ),
        (
            "POST",
            "/v1/tasks/deadbeef/inject",
            r#"{}"#,
            422,
            "instruction",
        ),
        ("GET", "/v1/tasks/deadbeef/history", "", 404, "deadbeef"),
        (
            "POST",
            "/v1/messages",
            r#"{"platform":"qq","text":"hi"}"#,
            422,
            "user_id",
        ),
        (
            "POST",
            "/v1/messages",
            r#"{"platform":"qq","user_id":"u","text":"hi","stream_id":""}"#,
            422,
            "stream_id",
        ),
        (
            "POST",
            "/v1/messages",
            r#"{"platform":"planner","user_id":"u","text":"hi"}"#,
            400,
            "planner",
        ),
        (
            "POST",
            "/v1/planner/tools/subagent_list",
            r#"{"arguments":[1]}"#,
            400,
            "arguments",
        ),
        (
            "POST",
            "/v1/planner/tools/subagent_list",
            r#"{"arguments":{},"context":{"chat":"x"}}"#,
            422,
            "chat",
        ),
        (
            "POST",
            "/v1/planner/tools/subagent_list",
            r#"{"arguments":{}}"#,
            422,
            "stream_id",
        ),
        ("GET", "/v1/planner/board", "", 400, "stream_id"),
        ("GET", "/v1/nothing", "", 404, "openapi.json"),
        ("DELETE", "/v1/tasks", "", 405, "method"),
    ];
    let mut wrong = Vec::new();
    for (method, path, body, want, mentions) in cases {
        let mut request = served
            .client
            .request(method.parse().unwrap(), served.url(path));
        request = request.bearer_auth(TOKEN);
        if !body.is_empty() {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let (status, json) = json_of(request.send().await.unwrap()).await;
        let error = json["error"].as_str().unwrap_or_default();
        if status != want || !error.contains(mentions) {
            wrong.push(format!("{method} {path} {body}: {status} {error}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // No JSON content type.
    let response = served.post("/v1/tasks").body("{}").send().await.unwrap();
    let (status, json) = json_of(response).await;
    assert_eq!(status, 415, "{json}");
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let text = "x".repeat(10_000);
    let response = served
        .post("/v1/messages")
        .json(&json!({"platform": "qq", "user_id": "user", "text": text}))
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!(status, 413);
    assert!(
        body["error"].as_str().unwrap().contains("max_body_bytes"),
        "{body}"
    );
    // A chunked body (no Content-Length) is cut off while it is read.
    let body = format!(r#"{{"platform":"qq","user_id":"user","text":"{text}"}}"#);
    let chunks = futures::stream::iter([Ok::<_, std::io::Error>(body.into_bytes())]);
    let response = served
        .post("/v1/messages")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    let (status, _) = json_of(response).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn a_task_created_over_http_runs_and_its_reply_reaches_the_channel() {
    let model = ScriptedModel::from_responses([
        call("list_my_tasks", json!({})),
        ChatResponse::text("Water reminder is set up."),
    ]);
    let (mut service, served) = start(model).await;
    // The group exists in the host once someone spoke there.
    service.say("user", Some("42"), "hello").await;
    let response = served
        .post("/v1/tasks")
        .json(&json!({
            "intent": "set up a water reminder",
            "stream_id": "qq:group:42",
            "platform": "qq",
            "title": "water",
            "priority": 3,
        }))
        .send()
        .await
        .unwrap();
    let (status, created) = json_of(response).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["owner"], "planner:qq:group:42");
    assert_eq!(created["title"], "water");
    assert_eq!(created["priority"], 3);
    let id = task_id(&created);
    assert_eq!(created["short_id"], id.short());
    let (stream, text) = service.next_sent().await;
    assert_eq!(stream, "qq:group:42");
    assert_eq!(text, "Water reminder is set up.");
    service.wait_status(id, TaskStatus::Completed).await;
    // … and so does the reply task that delivered its answer.
    service
        .wait_for("the reply task completed", |e| {
            matches!(e, mai_engine::TaskEvent::Status { task_id, status: TaskStatus::Completed, .. } if *task_id != id)
        })
        .await;

    // Read it back: by short id, in the list, its history.
    let (status, task) = json_of(
        served
            .get(&format!("/v1/tasks/{}", id.short()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, task["status"].as_str()), (200, Some("completed")));
    let (_, listed) = json_of(
        served
            .get("/v1/tasks?stream_id=qq:group:42&status=completed,failed&limit=10")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&id.to_string().as_str()), "{listed}");
    let (_, running) = json_of(served.get("/v1/tasks?status=running").send().await.unwrap()).await;
    assert_eq!(running["tasks"], json!([]), "{running}");
    let (status, history) = json_of(
        served
            .get(&format!("/v1/tasks/{id}/history"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let log: Vec<&str> = history["status_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(log.first(), Some(&"pending"));
    assert_eq!(log.last(), Some(&"completed"));
    assert!(!history["entries"].as_array().unwrap().is_empty());

    // A finished task can no longer be cancelled or instructed.
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{id}/cancel"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{id}/inject"))
            .json(&json!({"instruction": "also tea"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409, "{body}");

    // The run shows in the metrics.
    let response = served.get("/metrics").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let metrics = response.text().await.unwrap();
    for line in [
        "mai_agent_rounds_total 2",
        "mai_tool_calls_total{tool=\"list_my_tasks\",outcome=\"ok\"} 1",
        "mai_model_request_duration_seconds_count{purpose=\"agent\",outcome=\"ok\"} 2",
        "mai_tasks{state=\"running\"} 0",
    ] {
        assert!(metrics.contains(line), "missing `{line}` in:\n{metrics}");
    }
    // The task itself and its reply task both completed.
    assert!(
        metrics.contains("mai_tasks_finished_total{state=\"completed\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn scheduled_tasks_are_cancelled_and_instructions_checked() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let (status, created) = json_of(
        served
            .post("/v1/tasks")
            .json(&json!({
                "intent": "remind the group to drink water",
                "stream_id": "qq:group:42",
                "platform": "qq",
                "title": "water",
                "cron_expr": "0 18 * * *",
                "timezone": "Asia/Shanghai",
                "level": "instant",
            }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "scheduled");
    assert_eq!(created["level"], "instant");
    assert_eq!(created["trigger"]["timezone"], "Asia/Shanghai", "{created}");
    let at = created["scheduled_at"].as_str().unwrap();
    assert!(
        at.ends_with("T10:00:00Z"),
        "18:00 in Shanghai, whole seconds: {at}"
    );
    let id = task_id(&created);
    let (status, scheduled) = json_of(
        served
            .get("/v1/tasks?status=scheduled")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(scheduled["tasks"].as_array().unwrap().len(), 1);
    // The metrics count it among the active tasks, by state.
    metrics_holding(
        &served,
        &[
            "mai_tasks{state=\"scheduled\"} 1",
            "mai_tasks{state=\"pending\"} 0",
        ],
    )
    .await;
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/inject", id.short()))
            .json(&json!({"instruction": "  "}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/inject", id.short()))
            .json(&json!({"instruction": "use emoji"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("scheduled"),
        "{body}"
    );
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/cancel", id.short()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["task"]["status"], "cancelled");
    assert_eq!(body["stopping"], false);
    let (_, history) = json_of(
        served
            .get(&format!("/v1/tasks/{id}/history"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let last = history["status_log"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["actor"], "planner:qq:group:42");
}

#[tokio::test]
async fn a_task_for_a_person_takes_their_role() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let body = |user: &str| {
        json!({
            "intent": "later",
            "stream_id": "qq:group:42",
            "group_id": "42",
            "platform": "qq",
            "user_id": user,
            "title": "later",
            "delay_seconds": 3600,
        })
    };
    let (status, error) = json_of(
        served
            .post("/v1/tasks")
            .json(&body("stranger"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("guests"),
        "{error}"
    );
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
    assert_eq!(created["metadata"]["group_id"], "42");
}

#[tokio::test]
async fn a_waiting_task_is_answered_through_inject() {
    let model = ScriptedModel::from_responses([
        common::ask("which colour?"),
        ChatResponse::text("painted it red"),
    ]);
    let (mut service, served) = start(model).await;
    service.say("user", Some("42"), "hello").await;
    let (_, created) = json_of(
        served
            .post("/v1/tasks")
            .json(&json!({"intent": "paint", "stream_id": "qq:group:42", "platform": "qq", "title": "paint"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = task_id(&created);
    assert_eq!(service.next_sent().await.1, "which colour?");
    service.wait_status(id, TaskStatus::WaitingInput).await;
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/inject", id.short()))
            .json(&json!({"instruction": "red"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["answered"], true);
    assert_eq!(service.next_sent().await.1, "painted it red");
}

#[tokio::test]
async fn messages_run_commands_answer_tasks_or_are_stored() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let (status, body) = json_of(
        served
            .post("/v1/messages")
            .json(&json!({"platform": "qq", "user_id": "user", "group_id": "42", "group_name": "tea", "sender_name": "U", "text": "/mt help"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "command");
    assert_eq!(body["stream_id"], "qq:group:42");
    assert_eq!(body["delivered"], true);
    assert!(
        body["reply"].as_str().unwrap().contains("/maitask"),
        "{body}"
    );
    // A platform with no channel: the reply comes back here instead.
    let (status, body) = json_of(
        served
            .post("/v1/messages")
            .json(&json!({"platform": "web", "user_id": "u1", "text": "/maitask list"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["delivered"], false);
    assert_eq!(body["reply"], "no tasks");
    let (status, body) = json_of(
        served
            .post("/v1/messages")
            .json(&json!({"platform": "qq", "user_id": "user", "stream_id": "custom-1", "text": "just chatting"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"outcome": "stored", "stream_id": "custom-1"}));
}

#[tokio::test]
async fn planner_tools_run_with_the_host_context_and_keep_streams_apart() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let create = json!({
        "arguments": {"intent": "check disk usage", "stream_id": "A", "delay_seconds": 3600},
        "context": {"chat_id": "A", "platform": "qq", "user_id": "user", "group_id": "42"},
    });
    let response = served
        .post("/v1/planner/tools/subagent_create")
        .json(&create)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-tool-outcome"], "ok");
    let (status, created) = json_of(response).await;
    assert_eq!(status, 200, "{created}");
    assert_ne!(created["success"], false, "{created}");
    // The model names stream B while the host says the conversation is A: refused.
    let response = served
        .post("/v1/planner/tools/subagent_list")
        .json(
            &json!({"arguments": {"stream_id": "B", "chat_id": "B"}, "context": {"chat_id": "A"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-tool-outcome"], "failed");
    let (status, refused) = json_of(response).await;
    assert_eq!(status, 200);
    assert_eq!(refused["success"], false);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("not the current conversation"),
        "{refused}"
    );
    // In its own conversation it sees its task.
    let (status, listed) = json_of(
        served
            .post("/v1/planner/tools/subagent_list")
            .json(&json!({"arguments": {"stream_id": "A"}, "context": {"chat_id": "A"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(listed.to_string().contains("check disk usage"), "{listed}");
    // Unknown tool: 404 with the names.
    let (status, unknown) = json_of(
        served
            .post("/v1/planner/tools/subagent_explode")
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    let names = unknown["tools"].as_array().unwrap();
    assert_eq!(names.len(), 11, "{unknown}");
    assert!(names.contains(&json!("subagent_create")));
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("subagent_explode")
    );
    // Arguments that do not fit the schema never reach the tool.
    let response = served
        .post("/v1/planner/tools/subagent_create")
        .json(&json!({"arguments": {"stream_id": "A"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-tool-outcome"], "invalid_arguments");
    assert_eq!(response.status(), 422);

    // Every call the door ran is counted, by tool, outcome and door (the unknown name never
    // reached the tools).
    let metrics = metrics_holding(
        &served,
        &[
            "mai_planner_tool_calls_total{tool=\"subagent_create\",outcome=\"ok\",door=\"http\"} 1",
            "mai_planner_tool_calls_total{tool=\"subagent_list\",outcome=\"failed\",door=\"http\"} 1",
            "mai_planner_tool_calls_total{tool=\"subagent_list\",outcome=\"ok\",door=\"http\"} 1",
            "mai_planner_tool_calls_total{tool=\"subagent_create\",outcome=\"invalid_arguments\",door=\"http\"} 1",
        ],
    )
    .await;
    assert!(!metrics.contains("subagent_explode"), "{metrics}");
}

#[tokio::test]
async fn the_planner_tools_are_listed_in_order_with_the_registrys_definitions() {
    let (service, served) = start(ScriptedModel::default()).await;
    let (status, body) = json_of(served.get("/v1/planner/tools").send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    let tools = body["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let expected: Vec<&str> = mai_engine::PLANNER_TOOLS
        .iter()
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(names, expected);
    for (tool, (name, visibility)) in tools.iter().zip(mai_engine::PLANNER_TOOLS) {
        let definition = service.state.planner.get(name).unwrap();
        assert_eq!(tool["description"], definition.description(), "{name}");
        assert_eq!(&tool["parameters"], definition.parameters(), "{name}");
        assert_eq!(tool["visibility"], visibility.as_str(), "{name}");
    }
    let anonymous = reqwest::Client::new();
    let response = anonymous
        .get(served.url("/v1/planner/tools"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

#[tokio::test]
async fn the_planner_board_introduces_itself_once_per_session() {
    let (_service, served) = start(ScriptedModel::default()).await;
    let (status, first) = json_of(
        served
            .get("/v1/planner/board?stream_id=qq:group:42&session=s1")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert!(
        first["board"].as_str().is_some_and(|b| !b.is_empty()),
        "{first}"
    );
    assert_eq!(first["session"], "s1");
    let (_, second) = json_of(
        served
            .get("/v1/planner/board?stream_id=qq:group:42&session=s1")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(second["board"], Value::Null, "{second}");
}

#[test]
fn the_route_table_of_the_http_api_doc_lists_every_route_the_router_serves() {
    let doc_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/http-api.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| ")).collect();
    let served = mai_server::http::routes()
        .into_iter()
        .chain(mai_server::http::dashboard_routes());
    for (method, path) in served {
        let row = format!("| {method} | `{path}` |");
        assert!(
            rows.iter().any(|r| r.starts_with(&row)),
            "docs/http-api.md's route table has no row `{row} … |`"
        );
    }
}

#[tokio::test]
async fn every_documented_route_is_served_and_mcp_sits_behind_the_guard() {
    let service = Service::start(ScriptedModel::default()).await;
    let mut options = HttpOptions::new(server_config());
    options.mcp = Some(axum::Router::new().fallback(|| async { "mcp here" }));
    let served = serve(&service, options).await;
    let (status, doc) = json_of(served.get("/openapi.json").send().await.unwrap()).await;
    assert_eq!(status, 200);
    let routes = mai_server::http::routes()
        .into_iter()
        .chain(mai_server::http::dashboard_routes());
    for (method, path) in routes {
        let item = &doc["paths"][path][method.as_str().to_lowercase()];
        assert!(
            item.is_object(),
            "{method} {path} missing from /openapi.json"
        );
        // Served: whatever the answer, it is not the "no such endpoint" fallback.
        let concrete = path
            .replace("{id}", "deadbeef")
            .replace("{name}", "subagent_list");
        let response = served
            .client
            .request(method.clone(), served.url(&concrete))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        if path == "/v1/events" {
            // A stream that does not end: its head is the answer.
            assert_eq!(status, 200);
            assert_eq!(response.headers()["content-type"], "text/event-stream");
            continue;
        }
        let text = response.text().await.unwrap();
        assert!(
            !text.contains("no such endpoint") && status < 500,
            "{method} {concrete}: {status} {text}"
        );
    }
    let anonymous = reqwest::Client::new();
    let response = anonymous.post(served.url("/mcp")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let response = served.post("/mcp").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "mcp here");
    let response = served
        .post("/mcp")
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
}

#[tokio::test]
async fn the_person_a_planner_task_is_for_answers_it_through_the_messages_endpoint() {
    let model = ScriptedModel::from_responses([
        // subagent_create has no title: the model writes one first.
        ChatResponse::text("disk check"),
        common::ask("which disk?"),
        ChatResponse::text("/data is 40% full"),
    ]);
    let (mut service, served) = start(model).await;
    service.say("user", Some("42"), "hello").await;
    let (status, created) = json_of(
        served
            .post("/v1/planner/tools/subagent_create")
            .json(&json!({
                "arguments": {"intent": "check the disk usage", "stream_id": "qq:group:42"},
                "context": {"chat_id": "qq:group:42", "platform": "qq", "user_id": "user", "group_id": "42"},
            }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let id = task_id(&created);
    assert_eq!(service.next_sent().await.1, "which disk?");
    service.wait_status(id, TaskStatus::WaitingInput).await;
    // Someone else's reply does not answer it; the person's does.
    let (_, other) = json_of(
        served
            .post("/v1/messages")
            .json(&json!({"platform": "qq", "user_id": "other", "group_id": "42", "text": "/home"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(other["outcome"], "stored", "{other}");
    let (status, answered) = json_of(
        served
            .post("/v1/messages")
            .json(&json!({"platform": "qq", "user_id": "user", "group_id": "42", "text": "/data"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["outcome"], "answered", "{answered}");
    assert_eq!(answered["task_id"], id.to_string());
    assert_eq!(service.next_sent().await.1, "/data is 40% full");
}

/// Regression: without TCP_NODELAY, Nagle held back the end of every MCP call's SSE response
/// until the client's delayed ACK (~40 ms per call, found by `examples/loadgen_http`).
#[tokio::test]
async fn the_listener_sets_nodelay_on_every_connection() {
    use axum::serve::Listener;
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let mut listener = mai_server::http::listener(tcp);
    let (client, (accepted, _)) =
        tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
    assert!(accepted.nodelay().unwrap());
    drop(client);
}

#[tokio::test]
async fn live_events_follow_a_task_filter_by_task_and_end_when_the_server_stops() {
    let model = ScriptedModel::from_responses([
        call("list_my_tasks", json!({})),
        ChatResponse::text("Water reminder is set up."),
    ]);
    let service = Service::start(model).await;
    service.say("user", Some("42"), "hello").await;
    let options = HttpOptions::new(server_config());
    let stop = options.shutdown.clone();
    let served = serve(&service, options).await;

    let response = served.get("/v1/events").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut all = SseReader::new(response);
    let (_, created) = json_of(
        served
            .post("/v1/tasks")
            .json(
                &json!({"intent": "set up a water reminder", "stream_id": "qq:group:42",
                          "platform": "qq", "title": "water"}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = task_id(&created);
    // Its whole life, in order, as it happens.
    let mut seen = Vec::new();
    loop {
        let (name, data) = all.next_of(id).await;
        assert_eq!(data["event"], name.as_str(), "{data}");
        let done = name == "status" && data["status"] == "completed";
        seen.push(match name.as_str() {
            "status" => format!("status {}", data["status"].as_str().unwrap()),
            "tool_call" | "tool_result" => format!("{name} {}", data["tool"].as_str().unwrap()),
            "answer" => format!("answer {}", data["text"].as_str().unwrap()),
            other => other.to_owned(),
        });
        if done {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            "created",
            "status running",
            "round",
            "tool_call list_my_tasks",
            "tool_result list_my_tasks",
            "round",
            "answer Water reminder is set up.",
            "status completed",
        ]
    );

    // Only one task's events: another task's creation is not in the filtered stream.
    let later = |title: &str| {
        json!({"intent": "later", "stream_id": "qq:group:42", "platform": "qq",
               "title": title, "delay_seconds": 3600})
    };
    let (_, b) = json_of(
        served
            .post("/v1/tasks")
            .json(&later("b"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let b = task_id(&b);
    let response = served
        .get(&format!("/v1/events?task_id={}", b.short()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut only_b = SseReader::new(response);
    let (status, _) = json_of(
        served
            .post("/v1/tasks")
            .json(&later("c"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = json_of(
        served
            .post(&format!("/v1/tasks/{}/cancel", b.short()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let (name, data) = only_b.next().await.unwrap();
    assert_eq!(
        (name.as_str(), data["task_id"].as_str()),
        ("status", Some(b.to_string().as_str()))
    );
    assert_eq!(data["status"], "cancelled");

    // Mistakes are plain JSON errors.
    let (status, body) = json_of(
        served
            .get("/v1/events?task_id=nosuchtask")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = json_of(served.get("/v1/events?since=5").send().await.unwrap()).await;
    assert_eq!(status, 400, "{body}");

    // Stopping the server ends the streams (a graceful shutdown would wait for them otherwise).
    stop.cancel();
    for mut stream in [all, only_b] {
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while stream.next().await.is_some() {}
        });
        assert!(ended.await.is_ok(), "the stream did not end");
    }
}

#[tokio::test]
async fn usage_is_summed_per_task_and_over_any_grouping_and_metrics_count_tokens() {
    let with_usage = |mut response: ChatResponse, prompt: u64| {
        response.usage = Some(mai_core::model::Usage {
            prompt_tokens: prompt,
            completion_tokens: 5,
            total_tokens: prompt + 5,
            cached_tokens: 2,
        });
        response
    };
    let model = ScriptedModel::from_responses([
        with_usage(call("list_my_tasks", json!({})), 100),
        with_usage(ChatResponse::text("Nothing else."), 30),
    ]);
    let (mut service, served) = start(model).await;
    let (status, created) = json_of(
        served
            .post("/v1/tasks")
            .json(&json!({"intent": "look around", "stream_id": "qq:group:42",
                          "platform": "qq", "title": "look"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = task_id(&created);
    service.wait_status(id, TaskStatus::Completed).await;

    let (status, task) = json_of(
        served
            .get(&format!("/v1/tasks/{}", id.short()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(task["usage"]["prompt_tokens"], 130, "{task}");
    assert_eq!(task["usage"]["completion_tokens"], 10);
    assert_eq!(task["usage"]["cached_tokens"], 4);
    assert_eq!(task["usage"]["calls"], 2);
    assert_eq!(task["usage"]["currency"], "USD");

    let (status, usage) = json_of(
        served
            .get("/v1/usage?group_by=stream&since=today")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["groups"][0]["key"], "qq:group:42");
    assert_eq!(usage["groups"][0]["prompt_tokens"], 130);
    assert_eq!(usage["total"]["calls"], 2);

    let (status, error) = json_of(
        served
            .get("/v1/usage?group_by=colour")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(error.to_string().contains("group_by"), "{error}");
    let (status, error) = json_of(
        served
            .get("/v1/usage?since=yesterday-ish")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(error.to_string().contains("since"), "{error}");

    metrics_holding(
        &served,
        &[
            "mai_model_tokens_total{model=\"gpt-4o-mini\",purpose=\"agent\",kind=\"prompt\"} 130",
            "mai_model_calls_total{model=\"gpt-4o-mini\",purpose=\"agent\"} 2",
        ],
    )
    .await;
}
