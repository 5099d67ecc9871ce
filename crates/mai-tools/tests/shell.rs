//! `run_command` against real processes: results, timeouts, tree kill on every exit path,
//! bounded output, cwd checks, the role gates, per-call config, and the Landlock sandbox.
//!
//! No sleeps synchronize anything: tests wait on process exit (pidfd), pipes and FIFOs.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mai_core::config::{Config, ShellConfig};
use mai_core::ids::StreamId;
use mai_core::role::Role;
use mai_core::task::TaskId;
use mai_core::tool::{FixedRole, OutcomeKind, ToolContext, ToolRegistry, TypedTool};
use mai_tools::shell::{
    RUN_COMMAND, RunCommand, RunCommandArgs, run_command_tool, run_command_tool_with_launcher,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[path = "../../../testing/peers.rs"]
mod shared_peers;
use shared_peers::peer_missing;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_mai-sandbox");

fn config(timeout_seconds: u64, max_output_chars: u32, sandbox: bool) -> Arc<Config> {
    Arc::new(Config {
        shell: ShellConfig {
            enabled: true,
            timeout_seconds,
            max_output_chars,
            sandbox,
        },
        ..Default::default()
    })
}

fn ctx_with(role: Role, config: Arc<Config>, cancel: CancellationToken) -> ToolContext {
    ToolContext::new(
        TaskId::new(),
        "qq:1".parse().unwrap(),
        StreamId::new("s1").unwrap(),
        "qq",
        Arc::new(FixedRole(role)),
        cancel,
        config,
    )
}

fn admin() -> ToolContext {
    ctx_with(
        Role::Admin,
        config(60, 8000, false),
        CancellationToken::new(),
    )
}

fn registry() -> ToolRegistry {
    let registry = ToolRegistry::new();
    registry.register(run_command_tool_with_launcher(LAUNCHER).unwrap());
    registry
}

/// Runs through the registry (all gates), returning what the model would see.
async fn run(ctx: &ToolContext, args: Value) -> Value {
    registry()
        .execute(RUN_COMMAND, ctx.role(), args, ctx)
        .await
        .value
}

fn pids(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect()
}

/// Waits (on a pidfd, no polling) until `pid` has exited; false if it still runs after
/// `within`. SIGKILL is delivered asynchronously, so "gone" may lag the kill by microseconds.
fn exits_within(pid: i32, within: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let Ok(pidfd) = pidfd_open(Pid::from_raw(pid).unwrap(), PidfdFlags::empty()) else {
        return true; // no such process
    };
    let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
    let timeout = Timespec {
        tv_sec: within.as_secs() as i64,
        tv_nsec: 0,
    };
    loop {
        // EINTR: the runtime's SIGCHLD handler may interrupt the wait; just wait again.
        match poll(&mut fds, Some(&timeout)) {
            Err(rustix::io::Errno::INTR) => continue,
            ready => return ready.unwrap() == 1,
        }
    }
}

fn assert_all_gone(pids: &[i32]) {
    assert!(
        !pids.is_empty(),
        "the command should have reported its pids"
    );
    for &pid in pids {
        assert!(
            exits_within(pid, Duration::from_secs(2)),
            "process {pid} survived the call"
        );
    }
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Blocks until the command opens the FIFO, writes and closes it.
async fn read_fifo(path: &Path) -> String {
    let path = path.to_owned();
    tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || std::fs::read_to_string(path).unwrap()),
    )
    .await
    .expect("the command never wrote to the FIFO")
    .unwrap()
}

#[tokio::test]
async fn reports_stdout_stderr_and_a_failing_exit_code_as_success() {
    let result = run(
        &admin(),
        json!({"command": "echo out; echo err >&2; exit 3"}),
    )
    .await;
    assert_eq!(result["success"], json!(true));
    assert_eq!(result["exit_code"], json!(3));
    assert_eq!(result["stdout"], json!("out\n"));
    assert_eq!(result["stderr"], json!("err\n"));
    assert_eq!(result["timed_out"], json!(false));
    assert_eq!(result["truncated"], json!(false));
    assert_eq!(result["command"], json!("echo out; echo err >&2; exit 3"));
    assert!(result["duration_seconds"].as_f64().unwrap() >= 0.0);
    assert!(result.get("signal").is_none());
}

#[tokio::test]
async fn a_command_killed_by_a_signal_reports_it() {
    let result = run(&admin(), json!({"command": "kill -TERM $$"})).await;
    assert_eq!(result["success"], json!(true));
    assert_eq!(result["exit_code"], Value::Null);
    assert_eq!(result["signal"], json!(15));
}

#[tokio::test]
async fn timeout_kills_the_command_and_reports_partial_output() {
    let started = Instant::now();
    let result = run(
        &admin(),
        json!({"command": "echo before; sleep 30", "timeout_seconds": 1}),
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(result["success"], json!(false));
    assert_eq!(result["timed_out"], json!(true));
    assert_eq!(result["stdout"], json!("before\n"));
    assert_eq!(result["signal"], json!(9));
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 1 s")
    );
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn timeout_kills_the_whole_process_tree() {
    // Five detached grandchildren (their subshells exit at once) plus a background child.
    let command = "for i in 1 2 3 4 5; do (sleep 300 & echo $!); done; \
                   sleep 300 & echo $!; echo $$; wait";
    let result = run(&admin(), json!({"command": command, "timeout_seconds": 1})).await;
    assert_eq!(result["timed_out"], json!(true));
    let pids = pids(result["stdout"].as_str().unwrap());
    assert_eq!(pids.len(), 7, "{result}");
    assert_all_gone(&pids);
}

#[tokio::test]
async fn a_background_child_holding_stdout_is_killed_and_does_not_hang_the_call() {
    let started = Instant::now();
    let result = run(&admin(), json!({"command": "sleep 300 & echo $!"})).await;
    // Returns on the shell's exit, well before the drain timeout: the group kill closed the pipe.
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(result["success"], json!(true));
    assert_eq!(result["exit_code"], json!(0));
    assert_all_gone(&pids(result["stdout"].as_str().unwrap()));
}

#[tokio::test]
async fn a_process_that_escaped_the_group_cannot_hang_the_call() {
    // `setsid` leaves the process group, so the group kill misses it and it keeps stdout open;
    // only the drain timeout bounds reading the pipe. The FIFO makes the shell print the
    // escapee's pid only once it is in its own session.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("escaped");
    mkfifo(&fifo);
    let fifo = fifo.display();
    let command = format!("setsid sh -c 'echo $$ > \"{fifo}\"; exec sleep 30' & cat '{fifo}'");
    let started = Instant::now();
    let result = run(&admin(), json!({"command": command})).await;
    let elapsed = started.elapsed();
    let escaped = pids(result["stdout"].as_str().unwrap());
    for &pid in &escaped {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert_eq!(result["success"], json!(true), "{result}");
    assert_eq!(escaped.len(), 1, "{result}");
    assert!(
        elapsed >= Duration::from_secs(2),
        "the drain timeout applied: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn cancellation_kills_the_tree_and_reports_partial_output() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("ready");
    mkfifo(&fifo);
    let cancel = CancellationToken::new();
    let ctx = ctx_with(Role::Admin, config(60, 8000, false), cancel.clone());
    let command = format!(
        "echo started; sleep 300 & echo \"$! $$\" > '{}'; wait",
        fifo.display()
    );
    let call = tokio::spawn(async move { run(&ctx, json!({"command": command})).await });

    let pids = pids(&read_fifo(&fifo).await);
    cancel.cancel();
    let result = call.await.unwrap();
    assert_eq!(result["success"], json!(false));
    assert_eq!(result["cancelled"], json!(true));
    assert_eq!(result["stdout"], json!("started\n"));
    assert_eq!(pids.len(), 2);
    assert_all_gone(&pids);
}

#[tokio::test]
async fn dropping_the_call_kills_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("ready");
    mkfifo(&fifo);
    let ctx = admin();
    let command = format!("sleep 300 & echo \"$! $$\" > '{}'; wait", fifo.display());
    let call = tokio::spawn(async move { run(&ctx, json!({"command": command})).await });

    let pids = pids(&read_fifo(&fifo).await);
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert_eq!(pids.len(), 2);
    assert_all_gone(&pids);
}

#[tokio::test]
async fn big_output_is_cut_to_head_and_tail() {
    // 20 MB of output: a capture that kept it all would grow the process by ≥ 20 MiB.
    let before = resident_kib();
    let result = run(
        &admin(),
        json!({"command": "yes | head -c 20000000; echo; echo THE-END"}),
    )
    .await;
    let grown_kib = resident_kib().saturating_sub(before);
    assert_eq!(result["success"], json!(true));
    assert_eq!(result["truncated"], json!(true));
    let stdout = result["stdout"].as_str().unwrap();
    assert!(stdout.chars().count() <= 8000, "{}", stdout.len());
    assert!(stdout.starts_with("y\ny\ny\n"));
    assert!(stdout.ends_with("THE-END\n"));
    assert!(
        stdout.contains("20000009 bytes in total"),
        "note of the size"
    );
    assert_eq!(result["stderr"], json!(""));
    assert!(
        grown_kib < 8 * 1024,
        "memory stayed bounded: grew {grown_kib} KiB"
    );
}

/// This process's resident set size (Linux), in KiB.
fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn invalid_utf8_is_decoded_lossily() {
    let result = run(&admin(), json!({"command": r"printf 'ok \377\376 end'"})).await;
    assert_eq!(result["stdout"], json!("ok \u{FFFD}\u{FFFD} end"));
}

#[tokio::test]
async fn runs_in_the_given_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let result = run(
        &admin(),
        json!({"command": "pwd", "cwd": dir.path().to_str().unwrap()}),
    )
    .await;
    assert_eq!(result["stdout"], json!(format!("{}\n", cwd.display())));
}

#[tokio::test]
async fn a_missing_cwd_or_a_file_cwd_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let result = run(
        &admin(),
        json!({"command": "true", "cwd": missing.to_str().unwrap()}),
    )
    .await;
    assert_eq!(result["success"], json!(false));
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("does not exist") && error.contains("nope"),
        "{error}"
    );

    let file = dir.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let result = run(
        &admin(),
        json!({"command": "true", "cwd": file.to_str().unwrap()}),
    )
    .await;
    assert_eq!(result["success"], json!(false));
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("is not a directory")
    );
}

#[tokio::test]
async fn bad_arguments_are_refused_before_running() {
    let registry = registry();
    let outcome = registry
        .execute(
            RUN_COMMAND,
            Role::Admin,
            json!({"command": "true", "shell": "bash"}),
            &admin(),
        )
        .await;
    assert_eq!(outcome.kind, OutcomeKind::InvalidArguments);
    let outcome = registry
        .execute(
            RUN_COMMAND,
            Role::Admin,
            json!({"command": "true", "timeout_seconds": 0}),
            &admin(),
        )
        .await;
    assert_eq!(outcome.kind, OutcomeKind::InvalidArguments);
    let result = run(&admin(), json!({"command": "  "})).await;
    assert!(result["error"].as_str().unwrap().contains("empty"));
}

#[tokio::test]
async fn a_user_role_is_refused_by_the_registry_and_by_the_handler() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let command = format!("touch '{}'", marker.display());
    let user = ctx_with(
        Role::User,
        config(60, 8000, false),
        CancellationToken::new(),
    );

    let outcome = registry()
        .execute(RUN_COMMAND, Role::User, json!({"command": command}), &user)
        .await;
    assert_eq!(outcome.kind, OutcomeKind::PermissionDenied);

    // The handler called directly (as a buggy or bypassing caller would) checks the role itself.
    let args = RunCommandArgs {
        command,
        timeout_seconds: None,
        cwd: None,
    };
    let error = RunCommand::default().call(&user, args).await.unwrap_err();
    assert!(error.0.contains("permission denied"), "{error}");
    assert!(!marker.exists(), "the command must not have run");
}

#[tokio::test]
async fn a_config_with_the_shell_disabled_is_refused() {
    let mut config = (*config(60, 8000, false)).clone();
    config.shell.enabled = false;
    let ctx = ctx_with(Role::Admin, Arc::new(config), CancellationToken::new());
    let result = run(&ctx, json!({"command": "true"})).await;
    assert_eq!(result["success"], json!(false));
    assert!(result["error"].as_str().unwrap().contains("disabled"));
}

#[tokio::test]
async fn limits_come_from_each_calls_config() {
    let tool = Arc::new(registry());
    let strict = ctx_with(Role::Admin, config(1, 200, false), CancellationToken::new());
    let relaxed = ctx_with(
        Role::Admin,
        config(60, 8000, false),
        CancellationToken::new(),
    );
    let command = json!({"command": "head -c 1000 /dev/zero | tr '\\0' a; sleep 2"});

    let (strict_result, relaxed_result) = tokio::join!(
        tool.execute(RUN_COMMAND, Role::Admin, command.clone(), &strict),
        tool.execute(RUN_COMMAND, Role::Admin, command.clone(), &relaxed),
    );
    let (strict_result, relaxed_result) = (strict_result.value, relaxed_result.value);
    assert_eq!(strict_result["timed_out"], json!(true));
    assert_eq!(strict_result["truncated"], json!(true));
    assert!(strict_result["stdout"].as_str().unwrap().chars().count() <= 200);

    assert_eq!(relaxed_result["success"], json!(true));
    assert_eq!(relaxed_result["truncated"], json!(false));
    assert_eq!(relaxed_result["stdout"].as_str().unwrap().len(), 1000);
}

#[tokio::test]
async fn a_missing_sandbox_launcher_is_a_clear_error() {
    let registry = ToolRegistry::new();
    registry.register(run_command_tool_with_launcher("/nonexistent/mai-sandbox").unwrap());
    let ctx = ctx_with(
        Role::Admin,
        config(60, 8000, true),
        CancellationToken::new(),
    );
    let outcome = registry
        .execute(RUN_COMMAND, Role::Admin, json!({"command": "true"}), &ctx)
        .await;
    let error = outcome.error_message().unwrap();
    assert!(error.contains("sandbox launcher not found"), "{error}");
    // The default definition builds too (it re-executes the running executable).
    assert_eq!(run_command_tool().unwrap().name(), RUN_COMMAND);
}

/// Whether this kernel can enforce Landlock: the launcher refuses (exit 125) when it cannot.
fn landlock_available() -> bool {
    let output = std::process::Command::new(LAUNCHER)
        .args(["--workdir", "/", "--", "true"])
        .output()
        .unwrap();
    output.status.success()
}

#[tokio::test]
async fn the_sandbox_confines_writes_and_network() {
    if !landlock_available() {
        peer_missing(
            "this kernel cannot enforce Landlock (the sandbox test did not run)",
            "a Linux kernel >= 5.13 built with CONFIG_SECURITY_LANDLOCK=y and `landlock` in its \
             `lsm=` boot parameter",
        );
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("readme"), "readable\n").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = outside.path().display();
    let connect = format!(
        "if command -v bash >/dev/null; then \
           bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null \
             && echo net=connected || echo net=denied; \
         else echo net=untested; fi"
    );
    let command = format!(
        "echo sandbox=$MAI_SANDBOX; echo in > inside.txt && echo inside=written; \
         cat '{out}/readme'; echo x > '{out}/new.txt' 2>/dev/null || echo outside=denied; {connect}"
    );
    let ctx = ctx_with(
        Role::Admin,
        config(60, 8000, true),
        CancellationToken::new(),
    );
    let cwd = work.path().to_str().unwrap();
    let result = run(&ctx, json!({"command": command, "cwd": cwd})).await;

    let stdout = result["stdout"].as_str().unwrap();
    assert_eq!(result["success"], json!(true), "{result}");
    assert!(stdout.contains("inside=written"), "{stdout}");
    assert!(work.path().join("inside.txt").exists());
    assert!(
        stdout.contains("readable"),
        "reading outside works: {stdout}"
    );
    assert!(stdout.contains("outside=denied"), "{stdout}");
    assert!(!outside.path().join("new.txt").exists());

    if stdout.contains("net=untested") {
        peer_missing(
            "bash is not installed (the sandbox's network part did not run)",
            "apt-get install bash",
        );
        return;
    }
    if !stdout.contains("sandbox=fs,net") {
        peer_missing(
            &format!("this kernel's Landlock has no network rules, ABI v4 ({stdout})"),
            "a Linux kernel >= 6.7 with Landlock enabled",
        );
        return;
    }
    assert!(stdout.contains("net=denied"), "{stdout}");
    assert!(listener.accept().is_err(), "no connection may have arrived");
    // Control: the same probe connects without the sandbox, so the denial above is Landlock's.
    let result = run(&admin(), json!({"command": connect})).await;
    assert!(
        result["stdout"].as_str().unwrap().contains("net=connected"),
        "{result}"
    );
}
