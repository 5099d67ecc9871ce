//! `mai-agent serve` as a process: the banner, health, hot reload of the config file (a bad edit
//! keeps the last good config), and a graceful stop on SIGTERM that pauses running tasks so the
//! next start finishes them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

fn serve_command(
    data: &std::path::Path,
    model: &wiremock::MockServer,
    config: &std::path::Path,
) -> std::process::Command {
    let mut command = mai(data, model);
    command
        .arg("--config")
        .arg(config)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    command
}

#[tokio::test]
async fn serve_reloads_its_config_keeps_the_last_good_one_and_stops_on_sigterm() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, "[task]\nmax_rounds = 30\n").unwrap();
    let mut served = Served::start(serve_command(data.path(), &model, &config));
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
