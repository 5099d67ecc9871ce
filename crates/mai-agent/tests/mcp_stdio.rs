//! `mai-agent mcp` (the real binary) under the official Python MCP client
//! (`testing/peers/mcp_probe.py`, installed by `testing/peers/setup.sh`): the handshake in both
//! the `server/discover` and the legacy `initialize` mode, the 11 planner tools, tool calls, and a
//! stdout that carries nothing but the protocol. When the Python peer cannot be installed, every
//! test fails under `CI=true` and elsewhere prints a SKIP line and returns.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const PLANNER_TOOLS: [&str; 11] = [
    "search_users",
    "subagent_create",
    "subagent_list",
    "subagent_status",
    "subagent_modify",
    "subagent_delete",
    "subagent_history",
    "subagent_schedule",
    "send_message",
    "list_mcp_tools",
    "call_mcp_tool",
];

#[path = "../../../testing/peers.rs"]
mod shared_peers;
use shared_peers::peers;

macro_rules! peers_or_skip {
    () => {
        match peers() {
            Some(dir) => dir,
            None => return,
        }
    };
}

/// A data directory and a config whose model API is a loopback port nobody listens on: the
/// planner tools used here never reach a model.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        // The probe sends no `_meta` (no speaker): planner calls get `[planner] default_role`,
        // here the operator's own terminal setup, admin.
        format!(
            "[llm]\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\n[polish]\nenabled = false\n\n\
             [planner]\ndefault_role = \"admin\"\n"
        ),
    )
    .unwrap();
    (dir, config)
}

/// Runs the probe against `mai-agent mcp`; `probe_args` go before the `--`.
fn probe(peers: &Path, probe_args: &[&str]) -> (Output, String, String) {
    let (dir, config) = workspace();
    let output = Command::new(peers.join("venv/bin/python"))
        .arg(peers.join("mcp_probe.py"))
        .args(probe_args)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_mai-agent"))
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("mcp")
        .env_remove("MAI_AGENT_CONFIG")
        .env_remove("MAI_AGENT_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

fn assert_lists_the_planner_tools(stdout: &str) {
    assert!(
        stdout.contains("| server mai-agent"),
        "server name: {stdout}"
    );
    assert!(
        stdout.contains("11 tools in 1 page(s)"),
        "tool count: {stdout}"
    );
    for tool in PLANNER_TOOLS {
        assert!(
            stdout.contains(&format!("'{tool}'")),
            "{tool} listed: {stdout}"
        );
    }
}

#[test]
fn the_python_client_discovers_lists_and_calls_subagent_list() {
    let peers = peers_or_skip!();
    let (output, stdout, stderr) = probe(
        &peers,
        &["--call", "subagent_list", r#"{"stream_id": "qq:group:1"}"#],
    );
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_lists_the_planner_tools(&stdout);
    assert!(
        stdout.contains("call subagent_list isError False")
            && stdout.contains(r#"'success': True"#)
            && stdout.contains(r#"'tasks': []"#),
        "an empty task list as structured content: {stdout}"
    );
}

#[test]
fn the_python_client_in_legacy_mode_initializes_lists_and_calls() {
    let peers = peers_or_skip!();
    let (output, stdout, stderr) = probe(
        &peers,
        &[
            "--legacy",
            "--call",
            "subagent_list",
            r#"{"stream_id": "s1"}"#,
        ],
    );
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        !stdout.contains("protocol 2026"),
        "the legacy handshake negotiates a pre-discover version: {stdout}"
    );
    assert_lists_the_planner_tools(&stdout);
    assert!(
        stdout.contains("call subagent_list isError False"),
        "{stdout}"
    );
}

#[test]
fn a_refused_call_is_an_error_result_with_the_reason() {
    let peers = peers_or_skip!();
    // No stream_id: the schema requires one.
    let (output, stdout, _) = probe(&peers, &["--call", "subagent_list", "{}"]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "isError makes the probe exit 1: {stdout}"
    );
    assert!(
        stdout.contains("call subagent_list isError True") && stdout.contains("stream_id"),
        "the reason names the missing field: {stdout}"
    );
}

#[test]
fn what_the_bot_sends_to_the_terminal_chat_goes_to_stderr_not_into_the_protocol() {
    let peers = peers_or_skip!();
    let args = r#"{"text": "hello over mcp", "user_id": "local", "platform": "console",
                   "polish": false, "split": false}"#;
    let (output, stdout, stderr) = probe(&peers, &["--call", "send_message", args]);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains("call send_message isError False"),
        "{stdout}"
    );
    assert!(
        stderr.contains("mai> hello over mcp"),
        "delivered on stderr: {stderr}"
    );
}

#[test]
fn closing_stdin_without_a_handshake_exits_cleanly() {
    let (dir, config) = workspace();
    let output = Command::new(env!("CARGO_BIN_EXE_mai-agent"))
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("mcp")
        .env_remove("MAI_AGENT_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(
        output.stdout.is_empty(),
        "nothing but the protocol on stdout: {output:?}"
    );
}
