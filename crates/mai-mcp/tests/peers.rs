//! The manager against real third-party MCP peers (the official reference servers and the
//! official Python SDK), installed by `testing/peers/setup.sh`. When the peers cannot be
//! installed (no node/npm/python or no network), every test fails under `CI=true` and elsewhere
//! prints a SKIP line and returns (`testing/peers.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mai_core::config::{Config, McpServerConfig, McpTransport};
use mai_core::ids::StreamId;
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{Effect, FixedRole, OutcomeKind, ToolContext, ToolRegistry};
use mai_mcp::{ManagerOptions, McpManager, ServerState, apply_to_registry};
use serde_json::json;
use tokio_util::sync::CancellationToken;

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

fn stdio(name: &str, command: impl Into<String>, args: &[&str]) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        transport: McpTransport::Stdio,
        command: Some(command.into()),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Default::default(),
        url: None,
        headers: Default::default(),
        startup_timeout_secs: 30,
        call_timeout_secs: 30,
        min_role: Role::Admin,
        tool_roles: Default::default(),
    }
}

fn everything(dir: &Path, name: &str) -> McpServerConfig {
    let bin = dir.join("node/node_modules/.bin/mcp-server-everything");
    stdio(name, bin.to_string_lossy(), &["stdio"])
}

fn paged(dir: &Path) -> McpServerConfig {
    let python = dir.join("venv/bin/python");
    let script = dir.join("paged_server.py");
    stdio(
        "paged",
        python.to_string_lossy(),
        &[&script.to_string_lossy(), "stdio"],
    )
}

fn ctx(role: Role) -> ToolContext {
    ToolContext::new(
        TaskId::new(),
        "qq:1".parse().unwrap(),
        StreamId::new("s1").unwrap(),
        "qq",
        Arc::new(FixedRole(role)),
        CancellationToken::new(),
        Arc::new(Config::default()),
    )
}

/// Waits (on the manager's change signal, no polling) until `done` holds for the status.
async fn wait_until(
    manager: &McpManager,
    limit: Duration,
    done: impl Fn(&[mai_mcp::ServerStatus]) -> bool,
) -> bool {
    let mut changes = manager.subscribe();
    let reached = async {
        loop {
            changes.borrow_and_update();
            if done(&manager.status()) {
                return;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    };
    tokio::time::timeout(limit, reached).await.is_ok()
}

fn state_of(manager: &McpManager, name: &str) -> Option<ServerState> {
    manager
        .status()
        .into_iter()
        .find(|s| s.name == name)
        .map(|s| s.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_stdio_lists_tools_and_echoes() {
    let dir = peers_or_skip!();
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[everything(&dir, "everything")]).await;
    assert_eq!(
        state_of(&manager, "everything"),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    let tools = manager.tools();
    let echo = tools
        .iter()
        .find(|t| t.raw_name == "echo")
        .expect("server-everything has an echo tool");
    assert_eq!(echo.name, "mcp_everything_echo");
    assert!(tools.iter().all(|t| t.name.starts_with("mcp_everything_")));
    let result = manager
        .call(
            Role::Admin,
            "everything",
            "echo",
            json!({"message": "hi there"}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result["success"], true);
    assert_eq!(result["text"], "Echo: hi there");

    // Structured content and images come through in the model's shape.
    let structured = tools
        .iter()
        .find(|t| t.raw_name == "get-structured-content");
    if structured.is_some() {
        let result = manager
            .call(
                Role::Admin,
                "everything",
                "get-structured-content",
                json!({"location": "New York"}),
                &CancellationToken::new(),
            )
            .await
            .unwrap();
        assert!(result.get("structured_content").is_some(), "{result}");
    }
    let image = manager
        .call(
            Role::Admin,
            "everything",
            "get-tiny-image",
            json!({}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(image["images"][0]["mime_type"], "image/png", "{image}");

    // The planner's proxy reaches the same servers under the servers' own tool names.
    let proxy: &dyn mai_core::capabilities::McpProxy = &manager;
    let listed = proxy.list_tools(Role::Admin).await.unwrap();
    assert!(
        listed
            .iter()
            .any(|(server, tool, _)| server == "everything" && tool == "echo")
    );
    let echoed = proxy
        .call_tool(
            Role::Admin,
            "everything",
            "echo",
            json!({"message": "via proxy"}),
        )
        .await
        .unwrap();
    assert_eq!(echoed["text"], "Echo: via proxy");
    assert!(
        proxy
            .call_tool(Role::Admin, "nope", "echo", json!({}))
            .await
            .is_err()
    );
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paginated_tools_list_gives_all_25_tools() {
    let dir = peers_or_skip!();
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[paged(&dir)]).await;
    assert_eq!(
        state_of(&manager, "paged"),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    let tools = manager.tools();
    assert_eq!(
        tools.len(),
        25,
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    assert!(tools.iter().any(|t| t.name == "mcp_paged_tool_24"));
    let result = manager
        .call(
            Role::Admin,
            "paged",
            "tool_24",
            json!({"x": "y"}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result["success"], true);
    assert!(result["text"].as_str().unwrap().starts_with("tool_24:"));
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_server_reads_a_file() {
    let dir = peers_or_skip!();
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::write(root_path.join("note.txt"), "hello from disk").unwrap();
    let bin = dir.join("node/node_modules/.bin/mcp-server-filesystem");
    let config = stdio("fs", bin.to_string_lossy(), &[&root_path.to_string_lossy()]);
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[config]).await;
    assert_eq!(
        state_of(&manager, "fs"),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    assert!(
        manager
            .tools()
            .iter()
            .any(|t| t.name == "mcp_fs_read_text_file")
    );
    let path = root_path.join("note.txt");
    let result = manager
        .call(
            Role::Admin,
            "fs",
            "read_text_file",
            json!({"path": path.to_string_lossy()}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result["success"], true, "{result}");
    assert!(result["text"].as_str().unwrap().contains("hello from disk"));
    // Outside the allowed root: the server says isError, the model sees a failure.
    let result = manager
        .call(
            Role::Admin,
            "fs",
            "read_text_file",
            json!({"path": "/etc/passwd"}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result["success"], false, "{result}");
    manager.shutdown();
}

/// The official filesystem server confined to `root`, with the default roles (admin only).
fn filesystem(dir: &Path, root: &Path) -> McpServerConfig {
    let bin = dir.join("node/node_modules/.bin/mcp-server-filesystem");
    stdio("fs", bin.to_string_lossy(), &[&root.to_string_lossy()])
}

/// A started manager serving `config` (asserted ready).
async fn ready(config: McpServerConfig) -> McpManager {
    let name = config.name.clone();
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[config]).await;
    assert_eq!(
        state_of(&manager, &name),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    manager
}

fn mcp_names(tools: &[Arc<mai_core::tool::ToolDefinition>]) -> Vec<String> {
    tools
        .iter()
        .map(|t| t.name().to_owned())
        .filter(|n| n.starts_with("mcp_"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_task_is_neither_offered_nor_can_call_an_admin_only_servers_tools() {
    let dir = peers_or_skip!();
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let manager = ready(filesystem(&dir, &root)).await;
    let registry = ToolRegistry::new();
    let fetcher = mai_mcp::fetch::Fetcher::new(
        mai_mcp::fetch::FetchOptions::default(),
        Arc::new(mai_mcp::fetch::SystemResolver),
    );
    registry.register(mai_mcp::fetch::fetch_tool(fetcher).unwrap());
    apply_to_registry(&manager, &registry);
    assert!(registry.get("mcp_fs_write_file").is_some());

    // Not offered to a user (nor a guest); `fetch` stays a user tool beside it.
    for role in [Role::Guest, Role::User] {
        assert!(mcp_names(&registry.presented(role)).is_empty(), "{role}");
        assert!(
            mcp_names(&registry.list_discoverable(role)).is_empty(),
            "{role}"
        );
    }
    assert!(registry.get(mai_mcp::fetch::FETCH).unwrap().min_role() == Role::User);
    let user_tools = registry.list_discoverable(Role::User);
    assert!(user_tools.iter().any(|t| t.name() == mai_mcp::fetch::FETCH));
    assert!(!mcp_names(&registry.list_discoverable(Role::Admin)).is_empty());

    // Not callable: refused before the server sees it, so nothing is written.
    let target = root.join("user.txt");
    let args = json!({"path": target.to_string_lossy(), "content": "from a user"});
    let refused = registry
        .execute(
            "mcp_fs_write_file",
            Role::User,
            args.clone(),
            &ctx(Role::User),
        )
        .await;
    assert_eq!(
        refused.kind,
        OutcomeKind::PermissionDenied,
        "{:?}",
        refused.value
    );
    // Even a handler reached with a user context (the registry bypassed) refuses.
    let direct = manager
        .call(
            Role::User,
            "fs",
            "write_file",
            args.clone(),
            &CancellationToken::new(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(direct.contains("requires role admin"), "{direct}");
    assert!(!target.exists(), "the server never received the call");

    let written = registry
        .execute("mcp_fs_write_file", Role::Admin, args, &ctx(Role::Admin))
        .await;
    assert_eq!(written.kind, OutcomeKind::Ok, "{:?}", written.value);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "from a user");
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_roles_override_lets_a_user_call_exactly_that_tool() {
    let dir = peers_or_skip!();
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    std::fs::write(root.join("note.txt"), "shared note").unwrap();
    let mut config = filesystem(&dir, &root);
    // A misspelled key is only warned about: the server still starts, nothing else is lowered.
    config.tool_roles = [("read_text_file", Role::User), ("raed_file", Role::User)]
        .into_iter()
        .map(|(tool, role)| (tool.to_owned(), role))
        .collect();
    let manager = ready(config).await;
    let registry = ToolRegistry::new();
    apply_to_registry(&manager, &registry);

    assert_eq!(
        mcp_names(&registry.list_discoverable(Role::User)),
        ["mcp_fs_read_text_file"]
    );
    let note = root.join("note.txt");
    let read = registry
        .execute(
            "mcp_fs_read_text_file",
            Role::User,
            json!({"path": note.to_string_lossy()}),
            &ctx(Role::User),
        )
        .await;
    assert_eq!(read.kind, OutcomeKind::Ok, "{:?}", read.value);
    assert!(read.value["text"].as_str().unwrap().contains("shared note"));

    let target = root.join("user.txt");
    let write = json!({"path": target.to_string_lossy(), "content": "x"});
    let refused = registry
        .execute("mcp_fs_write_file", Role::User, write, &ctx(Role::User))
        .await;
    assert_eq!(refused.kind, OutcomeKind::PermissionDenied);
    assert!(!target.exists());
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_only_roles_applies_them_without_a_restart() {
    let dir = peers_or_skip!();
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let config = filesystem(&dir, &root);
    let manager = ready(config.clone()).await;
    let registry = ToolRegistry::new();
    apply_to_registry(&manager, &registry);
    let pid = manager.status()[0].pid;
    assert!(mcp_names(&registry.list_discoverable(Role::User)).is_empty());

    let mut lowered = config.clone();
    lowered.min_role = Role::User;
    manager.reconcile(&[lowered]).await;
    apply_to_registry(&manager, &registry);
    assert_eq!(
        manager.status()[0].pid,
        pid,
        "a role change keeps the process"
    );
    assert_eq!(
        registry.get("mcp_fs_write_file").unwrap().min_role(),
        Role::User
    );

    // Raised again: the very next call is refused, even before the registry is re-applied.
    manager.reconcile(&[config]).await;
    let target = root.join("late.txt");
    let args = json!({"path": target.to_string_lossy(), "content": "x"});
    let refused = registry
        .execute("mcp_fs_write_file", Role::User, args, &ctx(Role::User))
        .await;
    assert_eq!(refused.kind, OutcomeKind::Failed, "{:?}", refused.value);
    assert!(
        refused.value["error"]
            .as_str()
            .unwrap()
            .contains("requires role admin")
    );
    assert!(!target.exists());
    apply_to_registry(&manager, &registry);
    assert!(mcp_names(&registry.list_discoverable(Role::User)).is_empty());
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planner_proxy_lists_and_calls_only_what_the_speakers_role_may_use() {
    let dir = peers_or_skip!();
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let mut config = filesystem(&dir, &root);
    config.tool_roles = [("list_allowed_directories".to_owned(), Role::User)].into();
    let manager = ready(config).await;
    let proxy: &dyn mai_core::capabilities::McpProxy = &manager;

    let tools = |listed: Vec<(String, String, String)>| -> Vec<String> {
        listed.into_iter().map(|(_, tool, _)| tool).collect()
    };
    assert_eq!(
        tools(proxy.list_tools(Role::User).await.unwrap()),
        ["list_allowed_directories"]
    );
    assert!(proxy.list_tools(Role::Guest).await.unwrap().is_empty());
    let admin = tools(proxy.list_tools(Role::Admin).await.unwrap());
    assert!(admin.iter().any(|t| t == "write_file"), "{admin:?}");

    let target = root.join("planner.txt");
    let args = json!({"path": target.to_string_lossy(), "content": "from the planner"});
    let refused = proxy
        .call_tool(Role::User, "fs", "write_file", args.clone())
        .await
        .unwrap_err();
    for part in [
        "`write_file`",
        "requires role admin",
        "min_role",
        "tool_roles",
        "[[mcp.servers]]",
    ] {
        assert!(refused.contains(part), "{part}: {refused}");
    }
    assert!(!target.exists(), "the server never received the call");
    let allowed = proxy
        .call_tool(Role::User, "fs", "list_allowed_directories", json!({}))
        .await
        .unwrap();
    assert_eq!(allowed["success"], true, "{allowed}");

    let written = proxy
        .call_tool(Role::Admin, "fs", "write_file", args)
        .await
        .unwrap();
    assert_eq!(written["success"], true, "{written}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "from the planner"
    );
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_skipped_within_its_budget() {
    let dir = peers_or_skip!();
    let mut silent = stdio("silent", "sleep", &["100"]);
    silent.startup_timeout_secs = 2;
    let broken = stdio(
        "broken",
        "sh",
        &["-c", "echo 'missing API key' >&2; exit 3"],
    );
    let manager = McpManager::new(ManagerOptions::default());
    let started = Instant::now();
    manager.start(&[silent, broken, paged(&dir)]).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "start took {:?}",
        started.elapsed()
    );
    let status = manager.status();
    let silent = status.iter().find(|s| s.name == "silent").unwrap();
    assert_eq!(silent.state, ServerState::Failed);
    assert!(
        silent
            .last_error
            .as_deref()
            .unwrap()
            .contains("startup_timeout_secs"),
        "{silent:?}"
    );
    let broken = status.iter().find(|s| s.name == "broken").unwrap();
    assert_eq!(broken.state, ServerState::Failed);
    assert!(
        broken
            .last_error
            .as_deref()
            .unwrap()
            .contains("missing API key"),
        "stderr is part of the start-up error: {broken:?}"
    );
    assert_eq!(state_of(&manager, "paged"), Some(ServerState::Ready));
    let tools = manager.tools();
    assert_eq!(tools.len(), 25);
    assert!(tools.iter().all(|t| t.server == "paged"));
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_errors_then_restarts() {
    let dir = peers_or_skip!();
    let pid_dir = tempfile::tempdir().unwrap();
    let pid_file = pid_dir.path().join("pid");
    let bin = dir.join("node/node_modules/.bin/mcp-server-everything");
    // `exec` keeps the pid: the file names the server process itself.
    let script = format!(
        "echo $$ > '{}'; exec '{}' stdio",
        pid_file.display(),
        bin.display()
    );
    let config = stdio("victim", "sh", &["-c", &script]);
    let options = ManagerOptions {
        restart_backoff: Duration::from_millis(50),
        ..ManagerOptions::default()
    };
    let manager = McpManager::new(options);
    manager.start(&[config]).await;
    assert_eq!(
        state_of(&manager, "victim"),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let call = {
        let manager = manager.clone();
        tokio::spawn(async move {
            manager
                .call(
                    Role::Admin,
                    "victim",
                    "trigger-long-running-operation",
                    json!({"duration": 20, "steps": 20}),
                    &CancellationToken::new(),
                )
                .await
        })
    };
    // The call is most likely in flight by now (rmcp gives no hook for "request written"); if
    // the kill lands first the call fails just the same, which is the behaviour under test.
    tokio::task::yield_now().await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap()
        .unwrap();
    let error = outcome.expect_err("a killed server cannot answer");
    println!("error for the model: {error}");

    // Until the supervisor notices the crash the old status may still say ready: wait for a
    // restart that reached ready again.
    let restarted = wait_until(&manager, Duration::from_secs(30), |status| {
        status
            .iter()
            .any(|s| s.name == "victim" && s.restarts >= 1 && s.state == ServerState::Ready)
    })
    .await;
    assert!(restarted, "{:?}", manager.status());
    let result = manager
        .call(
            Role::Admin,
            "victim",
            "echo",
            json!({"message": "again"}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result["text"], "Echo: again");
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_to_one_server_are_not_serialized() {
    let dir = peers_or_skip!();
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[everything(&dir, "ev")]).await;
    assert_eq!(state_of(&manager, "ev"), Some(ServerState::Ready));
    // A 6 s operation and an echo at once: the echo must come back while the long one runs.
    let long = {
        let manager = manager.clone();
        tokio::spawn(async move {
            manager
                .call(
                    Role::Admin,
                    "ev",
                    "trigger-long-running-operation",
                    json!({"duration": 6, "steps": 3}),
                    &CancellationToken::new(),
                )
                .await
        })
    };
    let echo = manager
        .call(
            Role::Admin,
            "ev",
            "echo",
            json!({"message": "quick"}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(echo["text"], "Echo: quick");
    assert!(
        !long.is_finished(),
        "the echo did not wait behind the long call"
    );
    let long = long.await.unwrap().unwrap();
    assert_eq!(long["success"], true, "{long}");
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_cancelled() {
    let dir = peers_or_skip!();
    let mut config = everything(&dir, "slow");
    config.call_timeout_secs = 1;
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[config]).await;
    let error = manager
        .call(
            Role::Admin,
            "slow",
            "trigger-long-running-operation",
            json!({"duration": 10, "steps": 10}),
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("call_timeout_secs"), "{error}");
    // The session survives a cancelled request.
    let echo = manager
        .call(
            Role::Admin,
            "slow",
            "echo",
            json!({"message": "still here"}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(echo["text"], "Echo: still here");
    manager.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_integration_and_config_reload() {
    let dir = peers_or_skip!();
    let manager = McpManager::new(ManagerOptions::default());
    let registry = ToolRegistry::new();
    // `ev` lowered to user by the operator; `paged` keeps the default, admin.
    let mut ev = everything(&dir, "ev");
    ev.min_role = Role::User;
    manager.start(&[paged(&dir), ev]).await;
    let report = apply_to_registry(&manager, &registry);
    assert!(report.refused.is_empty(), "{report:?}");
    assert!(registry.get("mcp_paged_tool_00").is_some());
    assert!(
        registry
            .all()
            .iter()
            .all(|t| t.effects() == Effect::CallsMcp.into()),
        "every MCP tool says it calls an MCP server (and nothing else)"
    );
    assert!(
        registry
            .list_discoverable(Role::User)
            .iter()
            .all(|t| !t.name().starts_with("mcp_paged_")),
        "admin-only by default"
    );
    assert!(registry.get("mcp_ev_echo").is_some());
    assert!(
        registry
            .names(Role::Guest)
            .iter()
            .all(|n| !n.starts_with("mcp_"))
    );
    assert!(
        registry
            .list_discoverable(Role::User)
            .iter()
            .any(|t| t.name() == "mcp_ev_echo")
    );

    let refused = registry
        .execute(
            "mcp_ev_echo",
            Role::Guest,
            json!({"message": "x"}),
            &ctx(Role::Guest),
        )
        .await;
    assert_eq!(refused.kind, OutcomeKind::PermissionDenied);
    let done = registry
        .execute(
            "mcp_ev_echo",
            Role::User,
            json!({"message": "via registry"}),
            &ctx(Role::User),
        )
        .await;
    assert_eq!(done.kind, OutcomeKind::Ok, "{:?}", done.value);
    assert_eq!(done.value["text"], "Echo: via registry");

    // Reload: `paged` is unchanged, `ev` removed. Only `ev` stops; paged keeps its process.
    let paged_pid = manager
        .status()
        .iter()
        .find(|s| s.name == "paged")
        .and_then(|s| s.pid);
    assert!(paged_pid.is_some());
    manager.reconcile(&[paged(&dir)]).await;
    let report = apply_to_registry(&manager, &registry);
    assert!(
        report.removed.iter().any(|n| n == "mcp_ev_echo"),
        "{report:?}"
    );
    assert!(registry.get("mcp_ev_echo").is_none());
    assert!(registry.get("mcp_paged_tool_00").is_some());
    let paged_status = manager.status();
    assert_eq!(paged_status.len(), 1);
    assert_eq!(
        paged_status[0].pid, paged_pid,
        "the unchanged server was not restarted"
    );
    assert_eq!(paged_status[0].state, ServerState::Ready);
    // A changed config restarts that server (new process), tools come back under the same names.
    let mut changed = paged(&dir);
    changed.call_timeout_secs = 7;
    manager.reconcile(&[changed]).await;
    let now = manager.status();
    assert_eq!(now[0].state, ServerState::Ready);
    assert_ne!(now[0].pid, paged_pid);
    apply_to_registry(&manager, &registry);
    assert!(registry.get("mcp_paged_tool_00").is_some());
    manager.shutdown();
    apply_to_registry(&manager, &registry);
    assert!(
        registry
            .names(Role::Admin)
            .iter()
            .all(|n| !n.starts_with("mcp_"))
    );
}

/// A server (official Python SDK) whose `grow` tool adds a tool and sends
/// `notifications/tools/list_changed`.
const GROWING_SERVER: &str = r#"
import anyio
import mcp.types as types
from mcp.server.lowlevel import Server, NotificationOptions
from mcp.server.stdio import stdio_server

names = ["grow"]

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name=n, description=n, input_schema={"type": "object"}) for n in names])

async def call_tool(ctx, params):
    if params.name == "grow":
        names.append(f"grown_{len(names)}")
        await ctx.session.send_tool_list_changed()
    return types.CallToolResult(content=[types.TextContent(type="text", text=params.name)])

server = Server("growing", version="0.1", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options(NotificationOptions(tools_changed=True)))

anyio.run(main)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_changed_refreshes_the_registry() {
    let dir = peers_or_skip!();
    let scratch = tempfile::tempdir().unwrap();
    let script = scratch.path().join("growing.py");
    std::fs::write(&script, GROWING_SERVER).unwrap();
    let python = dir.join("venv/bin/python");
    let config = stdio(
        "grow",
        python.to_string_lossy(),
        &[&script.to_string_lossy()],
    );
    let manager = McpManager::new(ManagerOptions::default());
    let registry = ToolRegistry::new();
    manager.start(&[config]).await;
    apply_to_registry(&manager, &registry);
    assert!(
        registry.get("mcp_grow_grow").is_some(),
        "{:?}",
        manager.status()
    );
    assert!(registry.get("mcp_grow_grown_1").is_none());

    let mut changes = manager.subscribe();
    changes.borrow_and_update();
    let done = registry
        .execute("mcp_grow_grow", Role::Admin, json!({}), &ctx(Role::Admin))
        .await;
    assert_eq!(done.kind, OutcomeKind::Ok, "{:?}", done.value);
    let grown = wait_until(&manager, Duration::from_secs(20), |_| {
        manager.tools().iter().any(|t| t.name == "mcp_grow_grown_1")
    })
    .await;
    assert!(grown, "the new tool appears after list_changed");
    apply_to_registry(&manager, &registry);
    assert!(registry.get("mcp_grow_grown_1").is_some());
    manager.shutdown();
}

/// server-everything in one of its HTTP modes on a free port, once it says it listens.
async fn everything_on_http(dir: &Path, mode: &str) -> (tokio::process::Child, u16) {
    use tokio::io::AsyncBufReadExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bin = dir.join("node/node_modules/.bin/mcp-server-everything");
    let mut server = tokio::process::Command::new(&bin)
        .arg(mode)
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The server says on stderr when it listens: wait for that line, not for a fixed time.
    let mut lines = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let listening = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("listening") || line.contains("running on port") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        listening.ok(),
        Some(true),
        "server-everything did not start its {mode} mode"
    );
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (server, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http() {
    let dir = peers_or_skip!();
    let (mut server, port) = everything_on_http(&dir, "streamableHttp").await;
    // `${HOME}` is set wherever cargo runs; the headers prove substitution and the bearer path
    // do not break the request (the server ignores both).
    let config = McpServerConfig {
        name: "web".into(),
        transport: McpTransport::Http,
        command: None,
        args: Vec::new(),
        env: Default::default(),
        url: Some(format!("http://127.0.0.1:{port}/mcp")),
        headers: [
            ("X-Home".to_owned(), "${HOME}".to_owned()),
            ("Authorization".to_owned(), "Bearer test-token".to_owned()),
        ]
        .into_iter()
        .collect(),
        startup_timeout_secs: 30,
        call_timeout_secs: 30,
        min_role: Role::Admin,
        tool_roles: Default::default(),
    };
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[config]).await;
    assert_eq!(
        state_of(&manager, "web"),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    assert!(manager.tools().iter().any(|t| t.name == "mcp_web_echo"));
    let result = manager
        .call(
            Role::Admin,
            "web",
            "echo",
            json!({"message": "over http"}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result["text"], "Echo: over http");
    manager.shutdown();
    let _ = server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_legacy_sse() {
    let dir = peers_or_skip!();
    let (mut server, port) = everything_on_http(&dir, "sse").await;
    let config = McpServerConfig {
        name: "old".into(),
        transport: McpTransport::Sse,
        command: None,
        args: Vec::new(),
        env: Default::default(),
        url: Some(format!("http://127.0.0.1:{port}/sse")),
        headers: [("Authorization".to_owned(), "Bearer test-token".to_owned())]
            .into_iter()
            .collect(),
        startup_timeout_secs: 30,
        call_timeout_secs: 30,
        min_role: Role::Admin,
        tool_roles: Default::default(),
    };
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[config]).await;
    assert_eq!(
        state_of(&manager, "old"),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    assert!(manager.tools().iter().any(|t| t.name == "mcp_old_echo"));
    // Concurrent calls over the one event stream come back to their callers.
    let calls = (0..5).map(|i| {
        let manager = manager.clone();
        async move {
            manager
                .call(
                    Role::Admin,
                    "old",
                    "echo",
                    json!({"message": format!("sse {i}")}),
                    &CancellationToken::new(),
                )
                .await
                .unwrap()
        }
    });
    let results = futures::future::join_all(calls).await;
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["text"], format!("Echo: sse {i}"));
    }
    manager.shutdown();
    let _ = server.kill().await;
}

#[tokio::test]
async fn a_legacy_sse_url_that_is_not_an_event_stream_fails_within_its_budget() {
    // A plain HTTP server that answers 404 to everything: reported, never fatal.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
        }
    });
    let config = McpServerConfig {
        name: "gone".into(),
        transport: McpTransport::Sse,
        command: None,
        args: Vec::new(),
        env: Default::default(),
        url: Some(format!("http://127.0.0.1:{port}/sse")),
        headers: Default::default(),
        startup_timeout_secs: 2,
        call_timeout_secs: 2,
        min_role: Role::Admin,
        tool_roles: Default::default(),
    };
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[config]).await;
    let status = manager.status();
    assert_eq!(status[0].state, ServerState::Failed, "{status:?}");
    let error = status[0].last_error.clone().unwrap();
    assert!(error.contains("404"), "{error}");
    manager.shutdown();
}

/// A server that records whether its slow call was cancelled (by `notifications/cancelled`).
const CANCEL_SERVER: &str = r#"
import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

cancelled = anyio.Event()

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name=n, description=n, input_schema={"type": "object"}) for n in ("slow", "was_cancelled")])

async def call_tool(ctx, params):
    if params.name == "slow":
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return types.CallToolResult(content=[types.TextContent(type="text", text="finished")])
    with anyio.move_on_after(10):
        await cancelled.wait()
    return types.CallToolResult(content=[types.TextContent(type="text", text=str(cancelled.is_set()))])

server = Server("cancel", version="0.1", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_sends_notifications_cancelled() {
    let dir = peers_or_skip!();
    let scratch = tempfile::tempdir().unwrap();
    let script = scratch.path().join("cancel.py");
    std::fs::write(&script, CANCEL_SERVER).unwrap();
    let python = dir.join("venv/bin/python");
    let mut config = stdio("c", python.to_string_lossy(), &[&script.to_string_lossy()]);
    config.call_timeout_secs = 1;
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[config]).await;
    assert_eq!(
        state_of(&manager, "c"),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    let error = manager
        .call_by_name(
            Role::Admin,
            "mcp_c_slow",
            json!({}),
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("call_timeout_secs"), "{error}");
    let seen = manager
        .call_by_name(
            Role::Admin,
            "mcp_c_was_cancelled",
            json!({}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        seen["text"], "True",
        "the server saw the cancellation: {seen}"
    );
    assert!(
        manager
            .call_by_name(Role::Admin, "mcp_c", json!({}), &CancellationToken::new())
            .await
            .is_err(),
        "no prefix matching"
    );
    manager.shutdown();
}

/// A server of the first protocol revision only: the official SDK with its handshake versions cut
/// down to 2024-11-05, so whatever the client offers, it counters with 2024-11-05.
const OLD_PROTOCOL_SERVER: &str = r#"
import anyio
import mcp.types as types
import mcp.server.runner as runner
runner.HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05",)
runner.LATEST_HANDSHAKE_VERSION = "2024-11-05"
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="hello", description="greets", input_schema={"type": "object", "properties": {"name": {"type": "string"}}})])

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="hello " + params.arguments.get("name", "?"))])

server = Server("old", version="0.1", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_protocol_2024_11_05_works() {
    let dir = peers_or_skip!();
    let scratch = tempfile::tempdir().unwrap();
    let script = scratch.path().join("old.py");
    std::fs::write(&script, OLD_PROTOCOL_SERVER).unwrap();
    let python = dir.join("venv/bin/python");
    let config = stdio("v1", python.to_string_lossy(), &[&script.to_string_lossy()]);
    let manager = McpManager::new(ManagerOptions::default());
    manager.start(&[config]).await;
    assert_eq!(
        state_of(&manager, "v1"),
        Some(ServerState::Ready),
        "{:?}",
        manager.status()
    );
    let result = manager
        .call(
            Role::Admin,
            "v1",
            "hello",
            json!({"name": "2024"}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(result["text"], "hello 2024");
    manager.shutdown();
}
