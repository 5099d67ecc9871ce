//! The real `mai-agent` binary against a fake OpenAI-compatible server on loopback: scripted tool
//! calls, files written in the sandbox, questions answered on stdin, a SIGKILL mid-task and a
//! resume that does not repeat checkpointed tool calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

mod common;

use common::*;

fn last_json_line(stdout: &str) -> Value {
    serde_json::from_str(stdout.lines().last().expect("no stdout")).expect("last line is JSON")
}

#[tokio::test]
async fn run_drives_tools_writes_files_and_delivers_the_answer() {
    let (server, _) = fake_model(|results, body| match results {
        0 => tool_call(
            "w1",
            "write",
            json!({"path": "notes/plan.txt", "content": "day 1: temples"}),
        ),
        1 => tool_call("r1", "read", json!({"path": "notes/plan.txt"})),
        _ => {
            assert!(last_tool_result(body).contains("day 1: temples"));
            answer("plan saved: day 1: temples")
        }
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let output = mai(data.path(), &server)
        .args(["run", "plan a trip", "--role", "user", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let result = last_json_line(&stdout);
    assert_eq!(result["status"], "completed");
    assert_eq!(result["answer"], "plan saved: day 1: temples");
    assert_eq!(result["rounds"], 3);
    assert!(
        stdout.contains("mai> plan saved: day 1: temples"),
        "the reply is delivered: {stdout}"
    );
    assert!(
        stderr.contains("→ write") && stderr.contains("← read ok"),
        "live progress: {stderr}"
    );
    // A user's files live in their own space (`console:local` at the terminal).
    let space = data.path().join("files/people/console/local");
    let written = std::fs::read_to_string(space.join("notes/plan.txt")).unwrap();
    assert_eq!(written, "day 1: temples");

    // The task is in the local store, with its timeline.
    let id = result["task_id"].as_str().unwrap();
    let list = mai(data.path(), &server)
        .args(["task", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.contains(&id[..8]) && list.contains("completed") && list.contains("Test title"),
        "{list}"
    );
    let history = mai(data.path(), &server)
        .args(["task", "history", &id[..8]])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(
        history.contains("dispatched") && history.contains("answered"),
        "{history}"
    );
}

#[tokio::test]
async fn run_asks_the_question_at_the_terminal_and_continues_with_the_answer() {
    let (server, _) = fake_model(|results, body| match results {
        0 => tool_call("q1", "ask_user", json!({"question": "Which colour?"})),
        _ => answer(&format!("painting it {}", last_tool_result(body))),
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let mut child = mai(data.path(), &server)
        .args(["run", "paint the fence", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"blue\n").unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("mai> Which colour?"), "{stdout}");
    let result = last_json_line(&stdout);
    assert_eq!(result["status"], "completed");
    assert!(
        result["answer"].as_str().unwrap().contains("blue"),
        "{result}"
    );
}

#[tokio::test]
async fn guests_get_a_clear_refusal_and_bad_config_is_named() {
    let (server, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let output = mai(data.path(), &server)
        .args(["run", "x", "--role", "guest"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("guests cannot create tasks"));

    let output = mai(data.path(), &server)
        .env("MAI_AGENT__TASK__MAX_ROUNDS", "0")
        .args(["tools"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("[task].max_rounds must be ≥ 1, got 0")
    );

    let output = mai(data.path(), &server)
        .args(["tools", "--role", "superuser"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown role `superuser`"));
}

#[tokio::test]
async fn tools_lists_exactly_what_each_role_may_call() {
    let (server, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let names = |role: &str, shell: bool| -> Vec<String> {
        let output = mai(data.path(), &server)
            .env(
                "MAI_AGENT__SHELL__ENABLED",
                if shell { "true" } else { "false" },
            )
            .args(["tools", "--role", role, "--json"])
            .output()
            .unwrap();
        assert!(output.status.success());
        let value: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(value["role"], role);
        value["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names("guest", true),
        [
            "search_memory",
            "fetch_history",
            "query_person",
            "search_users",
            "get_frequency"
        ],
        "guests get the information tools only"
    );
    let user = names("user", true);
    assert_eq!(user[0], "ask_user");
    assert!(user.contains(&"read".to_owned()) && !user.contains(&"run_command".to_owned()));
    assert!(names("admin", true).contains(&"run_command".to_owned()));
    assert!(
        !names("admin", false).contains(&"run_command".to_owned()),
        "[shell] enabled = false hides it"
    );
}

/// SIGKILL mid-task, then `run --resume`: the task completes, the checkpointed tool call does not
/// run again, the interrupted one does.
#[cfg(unix)]
#[tokio::test]
async fn a_killed_run_resumes_without_repeating_checkpointed_tool_calls() {
    let work = tempfile::tempdir().unwrap();
    let side_effects = work.path().join("side_effects");
    let marker = work.path().join("restarted");
    let fifo = work.path().join("reached");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let first = format!("echo x >> {}; echo one", side_effects.display());
    // Reports its process group through the FIFO (the test blocks reading it), then waits until the
    // test marks the restart.
    let second = format!(
        "test -f {m} && echo two && exit 0; echo $$ > {f}; sleep 120",
        m = marker.display(),
        f = fifo.display()
    );
    let (server, _) = fake_model(move |results, _| match results {
        0 => tool_call("c1", "run_command", json!({"command": first})),
        1 => tool_call("c2", "run_command", json!({"command": second})),
        _ => answer("all done"),
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let mut child = mai(data.path(), &server)
        .env("MAI_AGENT__SHELL__ENABLED", "true")
        .args(["run", "two steps", "--role", "admin", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Blocks until the second command is running and has told us its process group.
    let fifo_reader = fifo.clone();
    let pgid = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo_reader))
        .await
        .unwrap()
        .unwrap();
    let pgid: i32 = pgid.trim().parse().expect("a process group id");
    assert!(pgid > 1, "never signal group {pgid}");
    // SIGKILL the service, then clean up the command it left behind.
    child.kill().unwrap();
    child.wait().unwrap();
    // Signal the group directly: the `kill` binaries disagree on how they parse `-PGID`, and
    // one of them turns it into kill(-1) — every process of the user.
    let group = rustix::process::Pid::from_raw(pgid).expect("a positive group id");
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let created = stderr
        .lines()
        .find(|l| l.starts_with("task "))
        .expect("task line");
    let short = created.split_whitespace().nth(1).unwrap().to_owned();
    std::fs::write(&marker, "").unwrap();

    let output = mai(data.path(), &server)
        .env("MAI_AGENT__SHELL__ENABLED", "true")
        .args(["run", "--resume", &short, "--role", "admin", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let result = last_json_line(&stdout);
    assert_eq!(result["status"], "completed");
    assert_eq!(result["answer"], "all done");
    let lines = BufReader::new(std::fs::File::open(&side_effects).unwrap())
        .lines()
        .count();
    assert_eq!(lines, 1, "the checkpointed first command did not run again");
    let history = mai(data.path(), &server)
        .args(["task", "history", &short])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(history.contains("recovered from running"), "{history}");
}

/// Whether this kernel can enforce Landlock, asked of the binary's own launcher.
fn landlock_here() -> bool {
    let check = Command::new(binary())
        .args(["sandbox-exec", "--check"])
        .output()
        .unwrap();
    check.status.success()
}

#[test]
fn the_sandbox_launcher_is_built_into_the_binary_and_fails_closed() {
    let work = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let script = format!(
        "echo \"$MAI_SANDBOX\" > {work}/inside; echo x > {outside}/escaped",
        work = work.path().display(),
        outside = outside.path().display()
    );
    let output = Command::new(binary())
        .arg("sandbox-exec")
        .arg("--workdir")
        .arg(work.path())
        .args(["--", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if landlock_here() {
        let inside = std::fs::read_to_string(work.path().join("inside")).unwrap();
        assert!(inside.starts_with("fs"), "confined: {inside}");
        assert!(!outside.path().join("escaped").exists(), "{stderr}");
    } else {
        // Fails closed: nothing ran, the reason is on stderr.
        assert_eq!(output.status.code(), Some(125), "{stderr}");
        assert!(stderr.starts_with("mai-sandbox: "), "{stderr}");
        assert!(!work.path().join("inside").exists());
    }
    let usage = Command::new(binary())
        .args(["sandbox-exec", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("--workdir DIR -- COMMAND"));
}

#[tokio::test]
async fn run_command_in_the_sandbox_needs_no_second_binary() {
    let (server, _) = fake_model(|results, body| match results {
        0 => tool_call(
            "c1",
            "run_command",
            json!({"command": "echo sandbox=$MAI_SANDBOX"}),
        ),
        _ => answer(&last_tool_result(body)),
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let output = mai(data.path(), &server)
        .args(["run", "show the sandbox", "--role", "admin", "--json"])
        .env("MAI_AGENT__PERMISSION__ADMINS", r#"["console:local"]"#)
        .env("MAI_AGENT__SHELL__ENABLED", "true")
        .env("MAI_AGENT__SHELL__SANDBOX", "true")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let answer = last_json_line(&stdout)["answer"].to_string();
    if landlock_here() {
        assert!(answer.contains("sandbox=fs"), "{answer}\nstderr: {stderr}");
    } else {
        assert!(answer.contains("Landlock"), "{answer}\nstderr: {stderr}");
    }
    assert!(!answer.contains("not found"), "{answer}");
}

#[test]
fn config_init_writes_a_commented_config_that_passes_check_and_never_overwrites() {
    let data = tempfile::tempdir().unwrap();
    let init = || {
        Command::new(binary())
            .arg("--data-dir")
            .arg(data.path())
            .args(["config", "init"])
            .env_remove("MAI_AGENT_CONFIG")
            .output()
            .unwrap()
    };
    let first = init();
    assert!(first.status.success(), "{first:?}");
    let path = data.path().join("config.toml");
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("# mai-agent configuration"), "{written}");
    assert!(written.contains("guest_replies"), "{written}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "it may come to hold secrets");
    }
    let check = Command::new(binary())
        .args(["config", "check"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    // A second init refuses and leaves the file as it was.
    std::fs::write(&path, "[task]\nmax_rounds = 7\n").unwrap();
    let second = init();
    assert_eq!(second.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("already exists; nothing was written"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "[task]\nmax_rounds = 7\n"
    );
}

#[tokio::test]
async fn the_cassette_documented_in_providers_md_replays_a_whole_run() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/providers.md"),
    )
    .unwrap();
    let cassette = doc
        .split("```jsonl\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/providers.md has a ```jsonl cassette");
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("trip.jsonl");
    std::fs::write(&path, cassette).unwrap();
    // No model server is reachable: every answer comes from the cassette.
    let (unused, _) = fake_model(|_, _| panic!("the API was called")).await;
    let output = mai(data.path(), &unused)
        .args(["run", "plan a trip", "--role", "user", "--json", "--replay"])
        .arg(&path)
        .env("MAI_AGENT__POLISH__ENABLED", "true")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let result = last_json_line(&stdout);
    assert_eq!(result["status"], "completed", "{stderr}");
    assert_eq!(result["answer"], "Saved the plan: day 1, temples.");
    assert!(
        stdout.contains("mai> Saved the plan: day 1, temples."),
        "{stdout}"
    );
    let written = data.path().join("files/people/console/local/plan.txt");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "day 1: temples");
}
