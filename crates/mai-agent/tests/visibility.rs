//! What an operator sees of a running `serve`: `GET /v1/health` (behind the token) reports the
//! store, the model's last call, each channel and the instance while `/healthz` stays small and
//! open; and an API reachable beyond loopback without a token is refused unless allowed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../testing/sse.rs"]
mod sse;

use common::*;
use serde_json::Value;
use sse::SseReader;

const TOKEN: &str = "health-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_beyond_loopback_without_a_token_refuses_unless_allow_no_auth_is_set() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let refused = mai(data.path(), &model)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("could act as an admin"), "{stderr}");
    assert!(stderr.contains("[server] auth_token"), "{stderr}");
    assert!(stderr.contains("allow_no_auth = true"), "{stderr}");
    assert!(!stderr.contains("serving on"), "{stderr}");

    let mut command = mai(data.path(), &model);
    command
        .env("MAI_AGENT__SERVER__ALLOW_NO_AUTH", "true")
        .args(["serve", "--listen", "0.0.0.0:0"]);
    let mut allowed = Served::start(command);
    let warned = allowed.log.lock().unwrap().join("\n");
    assert!(warned.contains("without [server] auth_token"), "{warned}");
    assert!(allowed.terminate().success());

    let mut command = mai(data.path(), &model);
    command
        .env("MAI_AGENT__SERVER__AUTH_TOKEN", TOKEN)
        .args(["serve", "--listen", "0.0.0.0:0"]);
    let mut with_token = Served::start(command);
    assert!(with_token.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_health_reports_the_store_the_model_the_channels_and_the_instance_behind_the_token() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    // Nothing listens here: the OneBot channel stays unconnected.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let onebot = format!("ws://{}", closed.local_addr().unwrap());
    drop(closed);
    let config = data.path().join("mai-agent.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nauth_token = \"{TOKEN}\"\n\n[channels.onebot]\nenabled = true\nurl = \
             \"{onebot}\"\n"
        ),
    )
    .unwrap();
    let mut command = mai(data.path(), &model);
    command
        .arg("--config")
        .arg(&config)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let mut served = Served::start(command);
    let open = reqwest::Client::new();
    let healthz = open
        .get(format!("{}/healthz", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200);
    assert!(healthz.text().await.unwrap().len() < 200);
    let refused = open
        .get(format!("{}/v1/health", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    let client = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {TOKEN}").parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
    let health = |client: reqwest::Client, base: String| async move {
        let response = client
            .get(format!("{base}/v1/health"))
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json::<Value>().await.unwrap())
    };
    let (status, before) = health(client.clone(), served.base.clone()).await;
    assert_eq!(status, 503, "{before}");
    assert_eq!(before["status"], "degraded");
    assert_eq!(before["store"]["ok"], true, "{before}");
    assert_eq!(before["model"]["ok"], Value::Null, "no call yet: {before}");
    assert_eq!(before["channels"]["onebot"]["connected"], false, "{before}");
    assert_eq!(before["bridge"]["state"], "not used");
    assert_eq!(before["instance"]["pid"], served.child.id());

    // After a task ran, the model's last call is known to have worked.
    let mut events = SseReader::new(events(&client, &served.base).await);
    let id = create_console_task(&client, &served.base, "say done").await;
    events
        .wait_status(&id, "completed", "the task completes")
        .await;
    let (_, after) = health(client.clone(), served.base.clone()).await;
    assert_eq!(after["model"]["ok"], true, "{after}");
    assert!(after["model"]["last_call_at"].is_string(), "{after}");
    assert!(served.terminate().success());
}
