//! What start-up tells the operator, and `config check` agreeing with `serve`: the model named in
//! the banner (never the key), the no-key warning before the listener accepts, `config check`
//! checking the file `serve` would use with `serve`'s checks, `--probe` against a loopback model
//! server, env-variable errors that name the variable, and a model that is down failing a task
//! at once with one clear line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output, Stdio};

use common::*;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A loopback address where nothing listens (a port that was just free).
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}/v1", listener.local_addr().unwrap())
}

fn serve_in(data: &std::path::Path, model: &wiremock::MockServer) -> Command {
    let mut command = mai(data, model);
    command.args(["serve", "--listen", "127.0.0.1:0"]);
    command
}

/// A fake model that is never asked, and a data dir whose `config.toml` is `config`.
async fn with_config(config: &str) -> (wiremock::MockServer, tempfile::TempDir) {
    let (model, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("config.toml"), config).unwrap();
    (model, data)
}

#[tokio::test]
async fn serve_without_an_api_key_warns_before_the_banner_and_the_banner_names_the_model() {
    let (model, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let mut command = serve_in(data.path(), &model);
    command.env_remove("MAI_AGENT__LLM__API_KEY");
    let mut served = Served::start(command);
    served.wait_line("the model line", |l| l.contains("model:"));
    let log = served.log.lock().unwrap().clone();
    let warning = log
        .iter()
        .position(|l| l == "warning: no API key set ([llm] api_key / MAI_AGENT__LLM__API_KEY)")
        .unwrap_or_else(|| panic!("no key warning in {log:#?}"));
    let banner = log
        .iter()
        .position(|l| l.contains("serving on http://"))
        .unwrap();
    assert!(warning < banner, "the warning comes first: {log:#?}");
    let model_line = log.iter().find(|l| l.contains("model:")).unwrap();
    assert!(
        model_line.contains(&format!("{}/v1", model.uri()))
            && model_line.contains("agent agent-model")
            && model_line.contains("title title-model")
            && model_line.contains("API key not set"),
        "{model_line}"
    );
}

#[tokio::test]
async fn run_without_an_api_key_warns_before_the_task_starts() {
    let (model, _) = fake_model(|_, _| answer("done")).await;
    let data = tempfile::tempdir().unwrap();
    let output = mai(data.path(), &model)
        .env_remove("MAI_AGENT__LLM__API_KEY")
        .args(["run", "say done"])
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    let warning = stderr
        .find("warning: no API key set ([llm] api_key / MAI_AGENT__LLM__API_KEY)")
        .unwrap_or_else(|| panic!("no key warning in {stderr}"));
    let created = stderr.find("created").unwrap_or(usize::MAX);
    assert!(warning < created, "the warning comes first: {stderr}");
}

#[tokio::test]
async fn the_banner_says_a_key_is_set_without_showing_it() {
    let (model, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let mut served = Served::start(serve_in(data.path(), &model));
    served.wait_line("the model line", |l| l.contains("model:"));
    let log = served.log.lock().unwrap().join("\n");
    assert!(log.contains("API key set"), "{log}");
    assert!(!log.contains("test-key"), "the key is never shown: {log}");
    assert!(!log.contains("no API key set"), "{log}");
}

#[tokio::test]
async fn the_banner_names_the_time_zone_cron_reads_and_where_it_came_from() {
    let (model, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let mut command = serve_in(data.path(), &model);
    command.env("MAI_AGENT__TASK__TIMEZONE", "Asia/Shanghai");
    let mut served = Served::start(command);
    served.wait_line("the last banner line", |l| l.contains("Ctrl-C stops"));
    let log = served.log.lock().unwrap().clone();
    let time = log
        .iter()
        .find(|l| l.contains("time:"))
        .unwrap_or_else(|| panic!("no time line before the banner's last line: {log:#?}"));
    assert_eq!(
        time.trim(),
        "time:   cron expressions read in Asia/Shanghai ([task] timezone)"
    );
}

#[tokio::test]
async fn config_check_without_a_file_checks_the_data_dir_config_and_refuses_what_serve_refuses() {
    let (model, data) =
        with_config("[storage]\nurl = \"mysql://mai:s3cret@127.0.0.1:3306/mai\"\n").await;
    let check = mai(data.path(), &model)
        .args(["config", "check"])
        .output()
        .unwrap();
    let serve = serve_in(data.path(), &model)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    for (what, output) in [("config check", &check), ("serve", &serve)] {
        let (_, stderr) = text(output);
        assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
        assert!(
            stderr.contains("config.toml")
                && stderr.contains("[storage].url")
                && stderr.contains("cannot open"),
            "{what}: {stderr}"
        );
        assert!(
            !stderr.contains("s3cret"),
            "{what} echoes the password: {stderr}"
        );
    }
    let stray: Vec<_> = std::fs::read_dir(data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|name| name.to_string_lossy().contains("mysql"))
        .collect();
    assert!(stray.is_empty(), "no file named after the URL: {stray:?}");
}

#[tokio::test]
async fn serve_on_a_postgres_url_nobody_answers_fails_naming_storage_url_but_never_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (model, data) = with_config(&format!(
        "[storage]\nurl = \"postgres://mai:s3cret@127.0.0.1:{port}/mai\"\n"
    ))
    .await;
    let check = mai(data.path(), &model)
        .args(["config", "check"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&check);
    assert!(check.status.success(), "{stderr}");
    assert!(
        stdout.contains("database: PostgreSQL ([storage] url)"),
        "{stdout}"
    );
    let serve = serve_in(data.path(), &model)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = text(&serve);
    assert!(!serve.status.success(), "{stderr}");
    assert!(
        stderr.contains("the PostgreSQL database of [storage] url")
            && stderr.contains("connecting to PostgreSQL"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("s3cret"),
        "serve echoes the password: {stderr}"
    );
}

#[tokio::test]
async fn config_check_and_serve_refuse_a_missing_templates_dir_and_an_unset_env_reference() {
    let (model, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let missing = data.path().join("no-such-templates");
    let cases = [
        (
            format!(
                "[prompts]\ntemplates_dir = {:?}\n",
                missing.display().to_string()
            ),
            "templates_dir",
        ),
        (
            "[[mcp.servers]]\nname = \"search\"\ntransport = \"http\"\n\
             url = \"http://127.0.0.1:9/mcp\"\n\
             headers = { Authorization = \"Bearer ${MAI_TEST_UNSET_TOKEN}\" }\n"
                .to_owned(),
            "MAI_TEST_UNSET_TOKEN",
        ),
    ];
    for (config, named) in cases {
        std::fs::write(data.path().join("config.toml"), &config).unwrap();
        let check = mai(data.path(), &model)
            .env_remove("MAI_TEST_UNSET_TOKEN")
            .args(["config", "check"])
            .output()
            .unwrap();
        let serve = serve_in(data.path(), &model)
            .env_remove("MAI_TEST_UNSET_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        for (what, output) in [("config check", &check), ("serve", &serve)] {
            let (_, stderr) = text(output);
            assert_eq!(
                output.status.code(),
                Some(2),
                "{what} with {config}: {stderr}"
            );
            assert!(stderr.contains(named), "{what}: {stderr}");
        }
    }
}

#[tokio::test]
async fn a_numeric_permission_id_gets_the_qq_id_it_most_likely_means() {
    let (model, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let file = data.path().join("bot.toml");
    std::fs::write(&file, "[permission]\nusers = [10001]\n").unwrap();
    let output = mai(data.path(), &model)
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("[permission].users[0]") && stderr.contains("did you mean \"qq:10001\"?"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_env_override_error_names_the_variable_and_a_misspelled_one_warns() {
    let (model, data) = with_config("[splitter]\nenable = true\n").await;
    let output = mai(data.path(), &model)
        .env("MAI_AGENT__TASK__MAX_ROUNDS", "0")
        .args(["config", "check"])
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("environment variable MAI_AGENT__TASK__MAX_ROUNDS")
            && stderr.contains("must be ≥ 1, got 0"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("config file"),
        "the file is not blamed: {stderr}"
    );

    let output = mai(data.path(), &model)
        .env("MAI_AGENT_TASK__MAX_ROUNDS", "50")
        .args(["config", "check"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("config.toml: ok"), "{stdout}");
    assert!(
        stderr.contains("MAI_AGENT_TASK__MAX_ROUNDS matches no setting")
            && stderr.contains("did you mean MAI_AGENT__TASK__MAX_ROUNDS?"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[splitter] enable is the old spelling"),
        "{stderr}"
    );
}

#[tokio::test]
async fn config_check_probe_lists_models_and_asks_each_model_for_one_token() {
    let (model, _) = fake_model(|_, _| answer("OK")).await;
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "object": "list",
            "data": [{"id": "agent-model", "object": "model"}]
        })))
        .mount(&model)
        .await;
    let data = tempfile::tempdir().unwrap();
    let output = mai(data.path(), &model)
        .args(["config", "check", "--probe"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("GET /models: ok, 1 model(s)"), "{stdout}");
    assert!(
        stdout.contains("`title-model` is not in the list"),
        "{stdout}"
    );
    assert!(
        stdout.contains("completion with `agent-model`: ok"),
        "{stdout}"
    );
    assert!(
        stdout.contains("completion with `title-model`: ok"),
        "{stdout}"
    );
    let asked: Vec<_> = model
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.url.path() == "/v1/chat/completions")
        .map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).unwrap())
        .collect();
    assert_eq!(asked.len(), 2);
    assert!(
        asked.iter().all(|body| body["max_tokens"] == 1),
        "{asked:?}"
    );
}

#[tokio::test]
async fn config_check_probe_against_a_model_server_that_is_down_fails_naming_it() {
    let (model, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let down = closed_port_url();
    let output = mai(data.path(), &model)
        .env("MAI_AGENT__LLM__BASE_URL", &down)
        .env_remove("MAI_AGENT__LLM__MODELS__TITLE")
        .args(["config", "check", "--probe"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stdout.contains("GET /models: failed"), "{stdout}");
    assert!(
        stdout.contains("completion with `agent-model`: failed: could not connect")
            && stdout.contains(&down),
        "{stdout}"
    );
    assert!(
        stderr.contains("does not answer for `agent-model`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_model_server_that_is_down_fails_the_task_at_once_with_one_clear_line() {
    let (model, _) = fake_model(|_, _| answer("unused")).await;
    let data = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let output = mai(data.path(), &model)
        .env("MAI_AGENT__LLM__BASE_URL", closed_port_url())
        // Were a refused connection retried, these waits alone would take over 30 s.
        .env("MAI_AGENT__LLM__RETRY_INITIAL_DELAY_MS", "10000")
        .args(["run", "hello", "--role", "user"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "took {:?}: {stderr}",
        started.elapsed()
    );
    assert!(!stderr.contains("retrying"), "{stderr}");
    let failed: Vec<_> = stderr.lines().filter(|l| l.contains("[failed]")).collect();
    assert_eq!(failed.len(), 1, "{stderr}");
    assert!(
        failed[0].contains("could not connect to the model API")
            && failed[0].contains("is the model server running?"),
        "{stderr}"
    );
    assert!(!stderr.contains("after 0 round(s)"), "{stderr}");
    assert!(
        stderr.contains("failed before the model answered"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_retried_model_call_is_logged_once_with_its_count() {
    let model = wiremock::MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(503).set_body_string("overloaded"))
        .mount(&model)
        .await;
    let data = tempfile::tempdir().unwrap();
    let output = mai(data.path(), &model)
        .env("MAI_AGENT__LLM__MAX_RETRIES", "2")
        .env("MAI_AGENT__LLM__RETRY_INITIAL_DELAY_MS", "1")
        .args(["run", "hello", "--role", "user"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("retrying"), "no line per retry: {stderr}");
    let calls = model.received_requests().await.unwrap().len();
    let logged = stderr
        .lines()
        .filter(|l| l.contains("model call failed after 2 retries"))
        .count();
    assert!(logged >= 1, "{stderr}");
    assert_eq!(
        logged * 3,
        calls,
        "one line per call of 3 attempts: {stderr}"
    );
}

#[tokio::test]
async fn the_cli_says_what_cancel_did_and_speaks_to_the_admin_it_is() {
    let (model, _) =
        fake_model(|_, _| tool_call("q1", "ask_user", json!({"question": "Which?"}))).await;
    let data = tempfile::tempdir().unwrap();
    // stdin closed while the task waits: `run` gives up, the task stays waiting in the store.
    let output = mai(data.path(), &model)
        .args(["run", "pick one", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    let short = stderr
        .lines()
        .find_map(|l| l.strip_prefix("task "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no task line: {stderr}"))
        .to_owned();

    let output = mai(data.path(), &model)
        .args(["task", "cancel", &short])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.starts_with(&format!("cancelled task {short} \"Test title\"")),
        "{stdout}"
    );

    for (reference, expected) in [
        ("ab", "give at least 4 characters"),
        ("deadbeef", "no task matches `deadbeef`"),
    ] {
        let output = mai(data.path(), &model)
            .args(["task", "status", reference])
            .output()
            .unwrap();
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(
            !stderr.contains("of yours"),
            "the CLI sees every task: {stderr}"
        );
    }
}
