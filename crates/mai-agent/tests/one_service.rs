//! One service per data directory: a second engine (`serve`, `run`) refuses naming the first
//! one's pid, a restart after SIGKILL works (the kernel released the lock), and the CLI's task
//! changes reach a running `serve` through its API instead of waiting for a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../testing/sse.rs"]
mod sse;

use std::time::Duration;

use common::*;
use serde_json::json;
use sse::SseReader;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_or_run_on_the_same_data_dir_refuses_naming_the_first_pid() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, "").unwrap();
    let mut first = Served::start(serve_command(data.path(), &model, Some(&config)));
    let pid = first.child.id();

    let second = serve_command(data.path(), &model, Some(&config))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!("`mai-agent serve` (pid {pid})")),
        "{stderr}"
    );
    assert!(stderr.contains("--data-dir"), "{stderr}");
    assert!(
        !stderr.contains("serving on"),
        "the second serve started: {stderr}"
    );

    let run = mai(data.path(), &model)
        .args(["run", "say done"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains(&format!("(pid {pid})")), "{stderr}");

    // Reading tasks runs beside the live service.
    let list = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["task", "list"])
        .output()
        .unwrap();
    assert!(list.status.success(), "{list:?}");
    assert!(first.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_killed_with_sigkill_starts_again_on_the_same_data_dir() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, "").unwrap();
    let mut first = Served::start(serve_command(data.path(), &model, Some(&config)));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);

    let mut again = Served::start(serve_command(data.path(), &model, Some(&config)));
    let health = reqwest::get(format!("{}/healthz", again.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert!(again.terminate().success());
}

/// Creates an agent task in the console chat (which exists once its person has said
/// something: a question needs a chat to go to); returns its id.
async fn create_task(client: &reqwest::Client, base: &str, intent: &str) -> String {
    let said = client
        .post(format!("{base}/v1/messages"))
        .json(&json!({"platform": "console", "user_id": "local", "text": "hi"}))
        .send()
        .await
        .unwrap();
    assert!(said.status().is_success(), "{}", said.text().await.unwrap());
    create_console_task(client, base, intent).await
}

/// The agent asks which colour, then paints with the answer it got.
fn ask_then_paint(results: usize, body: &serde_json::Value) -> serde_json::Value {
    if results == 0 {
        return tool_call("q1", "ask_user", json!({"question": "Which colour?"}));
    }
    answer(&format!("painting it {}", last_tool_result(body)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ask_from_the_cli_reaches_a_running_serve_and_the_task_completes() {
    let (model, _) = fake_model(ask_then_paint).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    // With a token: the CLI sends the one its config names.
    std::fs::write(&config, "[server]\nauth_token = \"s3cret-token\"\n").unwrap();
    let mut served = Served::start(serve_command(data.path(), &model, Some(&config)));
    let client = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                "Bearer s3cret-token".parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
    let mut events = SseReader::new(events(&client, &served.base).await);
    let id = create_task(&client, &served.base, "paint the fence").await;
    let asked = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (name, _) = events.next_of(&id).await;
            if name == "question" {
                break;
            }
        }
    })
    .await;
    assert!(
        asked.is_ok(),
        "the task never asked its question: {}",
        served.log.lock().unwrap().join("\n")
    );

    let ask = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["task", "ask", &id[..8], "blue"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&ask.stdout);
    assert!(ask.status.success(), "{ask:?}");
    assert!(stdout.contains("running service continues it"), "{stdout}");

    events
        .wait_status(&id, "completed", "the answered task")
        .await;
    let task = task_record(&client, &served.base, &id).await;
    assert!(
        task["metadata"]["answer"]
            .as_str()
            .unwrap()
            .contains("blue"),
        "{task}"
    );

    // The service's log tells the task's life at the default level.
    let short = &id[..8];
    for line in [
        "created: Test title",
        "started: Test title",
        "asks: Which colour?",
        "answered, running again: Test title",
        "completed after 2 round(s)",
    ] {
        let wanted = format!("task {short} {line}");
        served.wait_line(&wanted, |l| l.contains(&wanted));
    }

    // A second answer is refused by the service, not silently dropped.
    let again = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["task", "ask", &id[..8], "red"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("running `mai-agent serve`"), "{stderr}");
    assert!(served.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_cancel_and_inject_from_the_cli_reach_a_running_serve() {
    let (model, _) = fake_model(ask_then_paint).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, "").unwrap();
    let mut served = Served::start(serve_command(data.path(), &model, Some(&config)));
    let client = reqwest::Client::new();
    let mut events = SseReader::new(events(&client, &served.base).await);
    let mut ids = Vec::new();
    for intent in ["paint the fence", "paint the door"] {
        ids.push(create_task(&client, &served.base, intent).await);
    }
    let mut waiting = std::collections::HashSet::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while waiting.len() < 2 {
            let (name, data) = events.next().await.expect("the stream ended");
            if name == "question" {
                waiting.insert(data["task_id"].as_str().unwrap().to_owned());
            }
        }
    })
    .await
    .expect("both tasks ask their question");

    let inject = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["task", "inject", &ids[0][..8], "green"])
        .output()
        .unwrap();
    assert!(inject.status.success(), "{inject:?}");
    let stdout = String::from_utf8_lossy(&inject.stdout);
    assert!(stdout.contains("answered the question"), "{stdout}");

    let cancel = mai(data.path(), &model)
        .arg("--config")
        .arg(&config)
        .args(["task", "cancel", &ids[1][..8]])
        .output()
        .unwrap();
    assert!(cancel.status.success(), "{cancel:?}");
    assert_eq!(
        task_record(&client, &served.base, &ids[1]).await["status"],
        "cancelled"
    );
    let mut finished = false;
    tokio::time::timeout(Duration::from_secs(60), async {
        while !finished {
            let (name, data) = events.next_of(&ids[0]).await;
            finished = name == "status" && data["status"] == "completed";
        }
    })
    .await
    .expect("the injected task completes");
    let task = task_record(&client, &served.base, &ids[0]).await;
    assert!(
        task["metadata"]["answer"]
            .as_str()
            .unwrap()
            .contains("green"),
        "{task}"
    );
    assert!(served.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_change_while_run_holds_the_data_dir_is_refused_naming_run() {
    use std::io::{BufRead, Write};
    let (model, _) = fake_model(ask_then_paint).await;
    let data = tempfile::tempdir().unwrap();
    let mut run = mai(data.path(), &model)
        .args(["run", "paint the fence", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (lines, said) = std::sync::mpsc::channel();
    let stdout = run.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    // The task waits for the answer at run's terminal.
    loop {
        let line = said.recv_timeout(Duration::from_secs(60)).unwrap();
        if line.contains("Which colour?") {
            break;
        }
    }
    let list = mai(data.path(), &model)
        .args(["task", "list", "--json"])
        .output()
        .unwrap();
    assert!(list.status.success(), "reading beside run: {list:?}");
    let tasks: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let id = tasks[0]["id"].as_str().unwrap().to_owned();

    let cancel = mai(data.path(), &model)
        .args(["task", "cancel", &id[..8]])
        .output()
        .unwrap();
    assert_eq!(cancel.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&cancel.stderr);
    assert!(
        stderr.contains(&format!("`mai-agent run` (pid {})", run.id())),
        "{stderr}"
    );
    assert!(stderr.contains("no HTTP API"), "{stderr}");

    // Nothing changed behind run's back: it finishes with the answer given at its terminal.
    run.stdin.take().unwrap().write_all(b"blue\n").unwrap();
    assert!(run.wait().unwrap().success());
}
