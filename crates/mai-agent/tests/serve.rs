//! `mai-agent serve` as a process: the banner, health, hot reload of the config file (a bad edit,
//! or one the start-up checks refuse, keeps the last good config), and a graceful stop on SIGTERM that pauses running tasks so the
//! next start finishes them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

#[tokio::test]
async fn serve_reloads_its_config_keeps_the_last_good_one_and_stops_on_sigterm() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, "[task]\nmax_rounds = 30\n").unwrap();
    let mut served = Served::start(serve_command(data.path(), &model, Some(&config)));
    let health = reqwest::get(format!("{}/healthz", served.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    std::fs::write(&config, "[task]\nmax_rounds = 5\n[shell]\nenabled = true\n").unwrap();
    served.wait_line("config reloaded", |l| l.contains("config reloaded"));

    // A section read only at start-up: applied later, and the log says so.
    std::fs::write(
        &config,
        "[task]\nmax_rounds = 5\n[shell]\nenabled = true\n[server]\nlisten = \"127.0.0.1:9\"\n",
    )
    .unwrap();
    let line = served.wait_line("the restart hint", |l| l.contains("restart"));
    assert!(line.contains("[server]"), "{line}");

    std::fs::write(&config, "[task]\nmax_rounds = 0\n").unwrap();
    let line = served.wait_line("the refused edit", |l| l.contains("not reloaded"));
    assert!(line.contains("max_rounds"), "{line}");
    // What `config check` refuses at start (here an unset `${ENV}`) is not reloaded either.
    std::fs::write(
        &config,
        "[mcp]\nenabled = true\n[[mcp.servers]]\nname = \"x\"\ntransport = \"http\"\n\
         url = \"http://127.0.0.1:9/mcp\"\nheaders = { Authorization = \"Bearer \
         ${MAI_TEST_UNSET_TOKEN}\" }\n",
    )
    .unwrap();
    let line = served.wait_line("the refused edit", |l| l.contains("not reloaded"));
    assert!(line.contains("MAI_TEST_UNSET_TOKEN"), "{line}");
    std::fs::write(&config, "[task\nbroken").unwrap();
    let line = served.wait_line("the refused edit", |l| l.contains("not reloaded"));
    assert!(line.contains("mai-agent.toml"), "{line}");
    let health = reqwest::get(format!("{}/healthz", served.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "still serving after bad edits");

    let status = served.terminate();
    assert!(status.success(), "{status:?}");
    served.wait_line("stopped", |l| l.trim() == "stopped");
}

#[tokio::test]
async fn a_taken_port_is_reported_before_anything_starts() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let output = mai(data.path(), &model)
        .args(["serve", "--listen", &address])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {address}")),
        "{stderr}"
    );
    assert!(stderr.contains("--listen"), "{stderr}");
}

/// The first agent call hangs (the task is mid-round when SIGTERM comes) and tells the test it
/// arrived; later calls answer at once.
struct HangFirst {
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    arrived: std::sync::Mutex<std::sync::mpsc::Sender<usize>>,
}

impl wiremock::Respond for HangFirst {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let content = if body["model"] == "title-model" {
            "Stop test".to_owned()
        } else {
            let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = self.arrived.lock().unwrap().send(n);
            if n == 0 {
                return wiremock::ResponseTemplate::new(200)
                    .set_delay(std::time::Duration::from_secs(600));
            }
            "finished after the restart".to_owned()
        };
        wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_pauses_a_running_task_and_the_next_start_finishes_it() {
    let model = wiremock::MockServer::start().await;
    let (arrived, calls) = std::sync::mpsc::channel();
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(HangFirst {
            calls: Default::default(),
            arrived: std::sync::Mutex::new(arrived),
        })
        .mount(&model)
        .await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, "").unwrap();
    let client = reqwest::Client::new();

    let mut served = Served::start(serve_command(data.path(), &model, Some(&config)));
    // The console chat exists once its person has said something; its replies print as `mai>`.
    let said = client
        .post(format!("{}/v1/messages", served.base))
        .json(&serde_json::json!({"platform": "console", "user_id": "local", "text": "hi"}))
        .send()
        .await
        .unwrap();
    assert!(said.status().is_success(), "{}", said.text().await.unwrap());
    let created: serde_json::Value = client
        .post(format!("{}/v1/tasks", served.base))
        .json(&serde_json::json!({"intent": "a long job", "stream_id": "console:local", "platform": "console"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    // The task's first model call is in flight: stop now.
    assert_eq!(
        calls
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap(),
        0
    );
    assert!(served.terminate().success());
    drop(served);

    let output = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["task", "status", &id, "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["status"], "paused", "{status}");

    // The next start resumes it; its answer reaches the console chat.
    let mut served = Served::start(serve_command(data.path(), &model, Some(&config)));
    assert_eq!(
        calls.recv_timeout(std::time::Duration::from_secs(60)),
        Ok(1),
        "the resumed task called the model again"
    );
    // The answer (stdout) may arrive before the banner (stderr) and be passed over while the
    // start waited for the banner: look in the log first (a line is logged before it is sent).
    let answered = |l: &str| l.contains("mai> finished after the restart");
    if !served.log.lock().unwrap().iter().any(|l| answered(l)) {
        served.wait_line("the answer in the console chat", answered);
    }
    let task = task_record(&client, &served.base, &id).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert!(served.terminate().success());
}

// Multi-threaded: the fake model server must keep answering while this thread waits on lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_chat_of_serve_takes_commands_typed_at_the_terminal() {
    use std::io::Write;
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(
        &config,
        "[channels.console]\nenabled = true\n\n[permission]\nusers = [\"console:local\"]\n",
    )
    .unwrap();
    let mut served = Served::start(serve_command(data.path(), &model, Some(&config)));
    served.wait_line("the console hint", |l| l.contains("console chat"));
    let stdin = served.stdin.as_mut().unwrap();
    // A plain line is not chat here: the answer says what to type instead.
    writeln!(stdin, "hello, are you there?").unwrap();
    stdin.flush().unwrap();
    let hint = served.wait_line("the plain-line hint", |l| l.starts_with("mai> "));
    assert!(hint.contains("`/mt create <what to do>`"), "{hint}");
    let stdin = served.stdin.as_mut().unwrap();
    writeln!(stdin, "/mt create say done").unwrap();
    stdin.flush().unwrap();
    let created = served.wait_line("the create reply", |l| l.starts_with("mai> "));
    assert!(created.contains("created"), "{created}");
    // The task runs and its answer comes back to the same terminal chat.
    served.wait_line("the answer", |l| l == "mai> done");
    assert!(served.terminate().success());
}

#[tokio::test]
async fn serve_in_maibot_mode_waits_for_a_bridge_and_says_so() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, "").unwrap();
    let mut command = serve_command(data.path(), &model, Some(&config));
    command.env("MAI_AGENT__HOST__KIND", "maibot");
    let mut served = Served::start(command);
    served.wait_line("the MaiBot host in its banner", |l| {
        l.contains("MaiBot") && l.contains("/v1/bridge")
    });
    let health: serde_json::Value = reqwest::get(format!("{}/healthz", served.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["bridge"], "disconnected", "{health}");
    let status = served.terminate();
    assert!(status.success(), "{status:?}");
}
