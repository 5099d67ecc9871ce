//! What the web dashboard needs from the HTTP API, against a real engine, host and store served
//! on 127.0.0.1:0: its page and files load without the token but behind the Host/Origin checks
//! and with a strict Content-Security-Policy; pause and resume; filters and per-status counts on
//! the task list; the role × tool matrix; MCP servers; a stream's recent messages; the health
//! history; and changes sent by the dashboard logged as `dashboard:operator`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Served, Service, call, json_of, serve, server_config};
use mai_core::model::ChatResponse;
use mai_core::task::{TaskId, TaskStatus};
use mai_llm::ScriptedModel;
use mai_server::HttpOptions;
use serde_json::{Value, json};

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
async fn tasks_are_paused_and_resumed_and_a_dashboard_change_names_the_dashboard() {
    let model = ScriptedModel::from_responses([common::ask("which colour?")]);
    let (mut service, served) = start(model).await;
    service.say("user", Some("42"), "hello").await;
    let scheduled = create(
        &served,
        json!({"intent": "later", "title": "later", "delay_seconds": 3600}),
    )
    .await;
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/pause", task_id(&scheduled).short()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        status, 409,
        "a scheduled task is cancelled, not paused: {body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("cancel a scheduled one"),
        "{body}"
    );

    let waiting = create(&served, json!({"intent": "paint", "title": "paint"})).await;
    let id = task_id(&waiting);
    service.wait_status(id, TaskStatus::WaitingInput).await;
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/pause", id.short()))
            .header("X-Mai-Client", "dashboard")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["task"]["status"], "paused");
    assert_eq!(body["stopping"], false);
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/pause", id.short()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409, "paused twice: {body}");
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/resume", id.short()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["task"]["status"], "pending");
    let log = body["task"]["status_log"].as_array().unwrap();
    let actors: Vec<&str> = log.iter().map(|l| l["actor"].as_str().unwrap()).collect();
    assert_eq!(
        actors[actors.len() - 2..],
        ["dashboard:operator", "planner:qq:group:42"],
        "{log:?}"
    );
    let (status, body) = json_of(
        served
            .post(&format!("/v1/tasks/{}/resume", task_id(&scheduled).short()))
            .send()
            .await
            .unwrap(),
    )
    .await;
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
async fn the_tools_route_gives_the_role_matrix_and_each_roles_tools() {
    let (service, served) = start(ScriptedModel::default()).await;
    let registry = service.state.engine.registry();
    let (status, matrix) = json_of(served.get("/v1/tools").send().await.unwrap()).await;
    assert_eq!(status, 200, "{matrix}");
    let tools = matrix["tools"].as_array().unwrap();
    assert_eq!(tools.len(), registry.all().len());
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
async fn a_streams_recent_messages_and_the_health_history_are_served() {
    let model = ScriptedModel::from_responses([
        call("list_my_tasks", json!({})),
        ChatResponse::text("done"),
    ]);
    let (mut service, served) = start(model).await;
    service.say("user", Some("42"), "hello <b>there</b>").await;
    let (status, body) = json_of(
        served
            .get("/v1/streams/qq%3Agroup%3A42/messages?limit=5")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["stream_id"], "qq:group:42");
    assert_eq!(body["messages"][0]["text"], "hello <b>there</b>");
    let (status, body) = json_of(
        served
            .get("/v1/streams/qq:group:42/messages?limit=0")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");

    let created = create(&served, json!({"intent": "count", "title": "count"})).await;
    service
        .wait_status(task_id(&created), TaskStatus::Completed)
        .await;
    // Its reply runs after it: nothing is running once the reply is delivered too.
    let admin = mai_engine::Caller::admin_reader("test").unwrap();
    let record = service.state.engine.get(&admin, task_id(&created)).await;
    let reply = mai_engine::reply_task_id(&record.unwrap());
    service.wait_status(reply, TaskStatus::Completed).await;
    let (status, body) = json_of(served.get("/v1/health/history").send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["interval_secs"], 10);
    let now = &body["now"];
    assert_eq!(now["model"]["calls"], 2, "{body}");
    assert_eq!(now["model"]["errors"], 0);
    assert_eq!(now["active"]["running"], 0);
    assert!(body["samples"].is_array());
}
