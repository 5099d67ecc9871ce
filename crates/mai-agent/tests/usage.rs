//! Usage end to end: the real binary against the fake OpenAI-compatible server, which reports
//! fixed `usage` figures per model, so the sums `mai-agent usage` and `task status` show can be
//! asserted exactly — agent rounds, a sub-agent, the title and the reply's polish.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;

use serde_json::{Value, json};

mod common;

use common::*;

fn json_of(output: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().expect("no stdout")).expect("JSON")
}

fn is_subagent(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|system| system.starts_with("You are a focused helper"))
}

#[tokio::test]
async fn usage_sums_match_the_models_figures_across_rounds_sub_agents_title_and_polish() {
    let (server, _) = fake_model(|results, body| {
        if is_subagent(body) {
            return answer("the helper's answer");
        }
        match results {
            0 => tool_call("s1", "ask_subagent", json!({"intent": "look it up"})),
            _ => answer("done with help"),
        }
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let run = mai(data.path(), &server)
        .env("MAI_AGENT__POLISH__ENABLED", "true")
        .env("MAI_AGENT__LLM__MODELS__REPLYER", "polish-model")
        .args(["run", "find out", "--role", "user", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let result = json_of(&run);
    assert_eq!(result["status"], "completed", "{result}");

    let total = json_of(
        &mai(data.path(), &server)
            .args(["usage", "--json"])
            .output()
            .unwrap(),
    )["total"]
        .clone();
    // Two agent rounds and one sub-agent round, one title, one polish.
    let (agent, title, polish) = (AGENT_USAGE, TITLE_USAGE, POLISH_USAGE);
    assert_eq!(
        total["prompt_tokens"],
        3 * agent.0 + title.0 + polish.0,
        "{total}"
    );
    assert_eq!(total["completion_tokens"], 3 * agent.1 + title.1 + polish.1);
    assert_eq!(total["cached_tokens"], 3 * agent.2 + title.2 + polish.2);
    assert_eq!(total["calls"], 5);
    assert_eq!(total["estimated_calls"], 0);
    assert_eq!(total["cost"], 0.0, "no [prices]: nothing costs anything");

    let by_purpose = json_of(
        &mai(data.path(), &server)
            .args(["usage", "--by", "purpose", "--since", "today", "--json"])
            .output()
            .unwrap(),
    );
    let calls: Vec<(String, u64)> = by_purpose["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["key"].as_str().unwrap().to_owned(),
                g["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("agent".to_owned(), 2),
            ("polish".to_owned(), 1),
            ("subagent".to_owned(), 1),
            ("title".to_owned(), 1)
        ]
    );

    // The task's own sum, in `task status --json`, is the same: everything served it.
    let short = result["task_id"].as_str().unwrap_or_default()[..8].to_owned();
    let status = json_of(
        &mai(data.path(), &server)
            .args(["task", "status", &short, "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(status["usage"]["prompt_tokens"], total["prompt_tokens"]);
    assert_eq!(status["usage"]["calls"], 5);
}

#[tokio::test]
async fn prices_turn_tokens_into_a_cost_shown_beside_them() {
    let (server, _) = fake_model(|_, _| answer("hi")).await;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("config.toml");
    std::fs::write(
        &config,
        "[prices]\ncurrency = \"CNY\"\n\
         [prices.models.agent-model]\ninput = 2.0\ncached_input = 0.5\noutput = 8.0\n",
    )
    .unwrap();
    let with_config = |args: &[&str]| {
        let mut command = mai(data.path(), &server);
        command
            .env("MAI_AGENT__LLM__MODELS__AGENT", "agent-model")
            .arg("--config")
            .arg(&config)
            .args(args)
            .stdin(Stdio::null());
        command.output().unwrap()
    };
    json_of(&with_config(&["run", "say hi", "--json"]));
    let usage = json_of(&with_config(&["usage", "--by", "model", "--json"]));
    let (prompt, completion, cached) = AGENT_USAGE;
    let expected =
        ((prompt - cached) as f64 * 2.0 + cached as f64 * 0.5 + completion as f64 * 8.0) / 1e6;
    let agent = usage["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == "agent-model")
        .expect("a row for the agent model")
        .clone();
    let cost = agent["cost"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-12, "{agent}");
    assert_eq!(agent["currency"], "CNY");
    let table = with_config(&["usage", "--by", "model"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("cost CNY") && table.contains("agent-model"),
        "{table}"
    );
}

#[tokio::test]
async fn a_model_repeating_one_call_fails_the_run_with_an_error_naming_the_tool() {
    let (server, _) = fake_model(|results, _| {
        tool_call(&format!("r{results}"), "read", json!({"path": "a.txt"}))
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let output = mai(data.path(), &server)
        .args(["run", "read it again and again", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "the task did not complete");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["status"], "failed");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("called `read` 5 times with identical arguments"),
        "{error}"
    );
}
