//! The crash suite: the real `mai-agent serve` (shell on) against a fake model, a mix of tasks
//! submitted over the HTTP API (agent, instant, delayed, cron, agent tasks that `ask_user`, answered
//! by the driver through `POST /v1/messages` as the task's person or `POST /v1/tasks/{id}/inject`),
//! SIGKILLed at random moments (seeded; the seed is printed) and restarted each time on the same
//! data dir. Then:
//!
//! - every created task exists; every non-cron task is completed; every cron task is armed;
//! - every final text reached the console chat, and never twice in one life of the server (a
//!   copy in a later life is the documented window: the part in flight when the kill came);
//! - every agent round's `run_command` (which appends `key=<task>-r<round> life=<n>` to a file)
//!   ran at least once, at most once per life, and never after the life whose result is
//!   checkpointed in the task's history: a checkpointed call never runs again.
//!
//! `MAI_CRASH_TASKS` (80) and `MAI_CRASH_KILLS` (5) size the run; `MAI_CRASH_SEED` replays one.
//! The suite runs twice: on the SQLite default and on a throwaway PostgreSQL database.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod crash_kit;
#[path = "../../../testing/postgres.rs"]
mod pg_cluster;
#[path = "../../../testing/sse.rs"]
mod sse;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use crash_kit::*;
use serde_json::{Value, json};
use sse::SseReader;
use wiremock::{Mock, MockServer};

fn serve(
    data: &std::path::Path,
    model: &MockServer,
    config: &std::path::Path,
    life: usize,
) -> Served {
    let mut command = mai(data, model);
    command
        .env("MAI_CRASH_LIFE", life.to_string())
        .env("MAI_AGENT__POLISH__ENABLED", "true")
        .env("MAI_AGENT__LLM__MODELS__REPLYER", "polish-model")
        .arg("--config")
        .arg(config)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    Served::start(command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_survive_random_sigkills_without_loss_double_delivery_or_rerun_checkpoints() {
    crash_suite("").await;
}

/// The same suite with the tasks and the chat tables in a throwaway PostgreSQL database: what
/// is checkpointed there survives a SIGKILL of the engine as it does in the SQLite file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_tasks_survive_random_sigkills_without_loss_double_delivery_or_rerun_checkpoints()
 {
    let Some(cluster) = pg_cluster::PgCluster::start() else {
        return;
    };
    crash_suite(&format!("[storage]\nurl = \"{}\"\n", cluster.database())).await;
}

/// Runs the suite with `storage` (a `[storage]` section, or nothing for the SQLite default)
/// added to the server's config.
async fn crash_suite(storage: &str) {
    let total = env_usize("MAI_CRASH_TASKS", 80);
    let kills = env_usize("MAI_CRASH_KILLS", 5);
    let seed = seed();
    println!("crash suite: {total} tasks, {kills} kills, MAI_CRASH_SEED={seed}");
    let started = Instant::now();
    let mut rng = Rng(seed);

    let data = tempfile::tempdir().unwrap();
    let side_effects = data.path().join("side_effects");
    let calls = Arc::new(AtomicUsize::new(0));
    let called = Arc::new(tokio::sync::Notify::new());
    let model = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(CrashModel {
            side_effects: side_effects.display().to_string(),
            calls: calls.clone(),
            called: called.clone(),
            jitter: AtomicU64::new(seed),
        })
        .mount(&model)
        .await;
    let config = data.path().join("mai-agent.toml");
    std::fs::write(&config, crash_kit::config(storage)).unwrap();
    let client = reqwest::Client::new();

    let planned = plan(total, &mut rng);
    // A task's id once its create answered 201; `None` while not submitted, or when the server
    // died under its create (then nobody knows whether it exists: it is not checked).
    let mut ids: Vec<Option<String>> = vec![None; total];
    let mut uncertain = 0;
    let mut next = 0;
    let mut lives: Vec<Served> = Vec::new();
    let mut logs: Vec<Log> = Vec::new();
    let mut killed_at: Vec<chrono::DateTime<chrono::Utc>> = Vec::new();
    let batch = total.div_ceil(kills + 1).max(1);

    for life in 0..=kills {
        let mut served = serve(data.path(), &model, &config, life);
        logs.push(served.log.clone());
        if life == 0 {
            // The console chat exists once its person has said something.
            let said = client
                .post(format!("{}/v1/messages", served.base))
                .json(&json!({"platform": "console", "user_id": "local", "text": "hi"}))
                .send()
                .await
                .unwrap();
            assert!(said.status().is_success());
        }
        let calls_at_start = calls.load(Ordering::SeqCst);
        // Two thirds of this life's share before the kill window, the rest during it.
        let before_window = if life == kills {
            total
        } else {
            (next + batch * 2 / 3).min(total)
        };
        while next < before_window {
            let created = create(&client, &served.base, &planned[next].body()).await;
            ids[next] = Some(created.unwrap());
            next += 1;
        }
        if life == kills {
            lives.push(served);
            break;
        }
        let racing: Vec<(usize, Value)> = (next..((life + 1) * batch).min(total))
            .map(|i| (i, planned[i].body()))
            .collect();
        let (racer_client, racer_base) = (client.clone(), served.base.clone());
        let racer = tokio::spawn(async move {
            let mut answered = Vec::new();
            for (i, body) in racing {
                let created = create(&racer_client, &racer_base, &body).await;
                let died = created.is_none();
                answered.push((i, created));
                if died {
                    break;
                }
            }
            answered
        });
        // Wait until this life is doing work (a model call), answering questions as they are
        // printed, then kill it at a random moment while the driver keeps answering questions.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while calls.load(Ordering::SeqCst) == calls_at_start {
            answer_waiting(&client, std::slice::from_ref(&served.base), 0, &logs, 1).await;
            tokio::select! {
                () = called.notified() => {}
                () = served.line_added.notified() => {}
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        let kill_at = Instant::now() + Duration::from_millis(rng.below(500));
        while Instant::now() < kill_at {
            answer_waiting(&client, std::slice::from_ref(&served.base), 0, &logs, 1).await;
        }
        served.child.kill().unwrap();
        served.child.wait().unwrap();
        // Anything this life made durable is older than this.
        killed_at.push(chrono::Utc::now());
        lives.push(served);
        for (i, created) in racer.await.unwrap() {
            match created {
                Some(id) => ids[i] = Some(id),
                None => uncertain += 1,
            }
            next = i + 1;
        }
    }

    // The last life runs everything to the end: no active task left but cron ones. Look again
    // whenever it reports an event or prints a line (a question to answer).
    let last = lives.last().unwrap();
    let base = last.base.clone();
    let mut events = SseReader::new(events(&client, &base).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        answer_waiting(&client, std::slice::from_ref(&base), 0, &logs, 1).await;
        let left: Vec<Value> = active_tasks(&client, &base)
            .await
            .into_iter()
            .filter(|t| t["trigger"]["kind"] != "cron")
            .collect();
        if left.is_empty() {
            break;
        }
        let woke = tokio::time::timeout_at(deadline, async {
            tokio::select! {
                event = events.next() => event.is_some(),
                () = last.line_added.notified() => true,
            }
        })
        .await;
        assert!(
            matches!(woke, Ok(true)),
            "tasks never finished (seed {seed}): {left:?}"
        );
    }

    // Every created task exists and is where it should be.
    let mut agent_tasks = Vec::new();
    let mut recovered = 0;
    let known: Vec<(&Planned, &String)> = planned
        .iter()
        .zip(&ids)
        .filter_map(|(task, id)| Some((task, id.as_ref()?)))
        .collect();
    for &(task, id) in &known {
        let record = get(&client, format!("{base}/v1/tasks/{id}")).await;
        recovered += record["status_log"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|change| change["reason"] == "recovered from running")
            .count();
        let status = record["status"].as_str().unwrap();
        if task.kind == Kind::Cron {
            assert!(
                ["scheduled", "pending", "running"].contains(&status),
                "cron {} is {status} (seed {seed})",
                task.key
            );
        } else {
            assert_eq!(status, "completed", "{} (seed {seed}): {record}", task.key);
        }
        if matches!(task.kind, Kind::Agent | Kind::Ask | Kind::Delayed) {
            agent_tasks.push((task, id));
        }
    }

    // Deliveries: per text, the lives that printed it. The last life's stdout is complete once
    // every expected text arrived there or before.
    let expected: Vec<String> = known
        .iter()
        .filter(|(t, _)| t.kind != Kind::Cron)
        .map(|(t, _)| t.final_text())
        .collect();
    let deliveries = |lives: &[Served]| {
        let mut seen: HashMap<String, Vec<usize>> = HashMap::new();
        for (life, served) in lives.iter().enumerate() {
            for line in served.log.lock().unwrap().iter() {
                if let Some(text) = line.strip_prefix("mai> ") {
                    seen.entry(text.to_owned()).or_default().push(life);
                }
            }
        }
        seen
    };
    let printed = lives.last().unwrap().line_added.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let seen = loop {
        let seen = deliveries(&lives);
        let missing: Vec<&String> = expected.iter().filter(|t| !seen.contains_key(*t)).collect();
        if missing.is_empty() {
            break seen;
        }
        assert!(
            tokio::time::timeout_at(deadline, printed.notified())
                .await
                .is_ok(),
            "never delivered (seed {seed}): {missing:?}"
        );
    };
    let mut redelivered = 0;
    for text in &expected {
        let lives_of = &seen[text];
        let mut distinct = lives_of.clone();
        distinct.dedup();
        assert_eq!(
            &distinct, lives_of,
            "`{text}` delivered twice by one life of the server (seed {seed}): lives {lives_of:?}"
        );
        if lives_of.len() > 1 {
            println!("crash suite: `{text}` delivered by lives {lives_of:?}");
            // Allowed only if the delivery was not yet durable when the earlier lives died:
            // the delivering task's completion is younger than their kills.
            let (task, id) = known.iter().find(|(t, _)| t.final_text() == *text).unwrap();
            let delivering = task.delivering(id);
            let record = get(&client, format!("{base}/v1/tasks/{delivering}")).await;
            let completed = completed_at(&record)
                .unwrap_or_else(|| panic!("{text}: its delivery never completed: {record}"));
            for &life in &lives_of[..lives_of.len() - 1] {
                assert!(
                    completed > killed_at[life],
                    "`{text}` was sent again although life {life} had recorded it sent \
                     (seed {seed}): {record}"
                );
            }
        }
        redelivered += lives_of.len() - 1;
    }

    // Side effects: executions per key, by life.
    let executed: HashMap<String, Vec<usize>> = runs_by_key(&side_effects)
        .into_iter()
        .map(|(key, runs)| (key, runs.iter().map(|run| run.life).collect()))
        .collect();
    let mut rounds = 0;
    let mut reran = 0;
    for (task, id) in agent_tasks {
        let history = get(&client, format!("{base}/v1/tasks/{id}/history")).await;
        for round in 0..task.rounds {
            rounds += 1;
            let key = format!("{}-r{round}", task.key);
            let runs = executed
                .get(&key)
                .unwrap_or_else(|| panic!("{key} never ran (seed {seed})"));
            // The life whose result the history holds.
            let checkpointed = checkpointed_lives(&history, &key);
            assert_eq!(
                checkpointed.len(),
                1,
                "{key}: one checkpointed result (seed {seed}): {checkpointed:?} in {history}"
            );
            let mut distinct = runs.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                runs.len(),
                "{key} ran twice in one life (seed {seed}): {runs:?}"
            );
            assert_eq!(
                runs.iter().max(),
                Some(&checkpointed[0]),
                "{key} ran again after its result was checkpointed in life {} (seed {seed}): {runs:?}",
                checkpointed[0]
            );
            if runs.len() > 1 {
                println!("crash suite: {key} ran in lives {runs:?}, checkpointed in the last");
            }
            reran += runs.len() - 1;
        }
    }

    // Every question reached the chat (at least once: a kill right after sending it resends it).
    let questions = known.iter().filter(|(t, _)| t.kind == Kind::Ask).count();
    let unasked: Vec<&str> = known
        .iter()
        .filter(|(t, _)| t.kind == Kind::Ask && !seen.contains_key(&format!("question-{}?", t.key)))
        .map(|(t, _)| t.key.as_str())
        .collect();
    let reasked: usize = known
        .iter()
        .filter(|(t, _)| t.kind == Kind::Ask)
        .filter_map(|(t, _)| seen.get(&format!("question-{}?", t.key)))
        .map(|lives| lives.len().saturating_sub(1))
        .sum();
    println!("crash suite: questions asked again after a kill: {reasked}");
    if !unasked.is_empty() {
        for (task, id) in known
            .iter()
            .filter(|(t, _)| unasked.contains(&t.key.as_str()))
        {
            let history = get(&client, format!("{base}/v1/tasks/{id}/history")).await;
            println!(
                "crash suite: {} (personal: {}) was never asked: {}",
                task.key, task.personal, history
            );
        }
    }
    assert!(
        unasked.is_empty(),
        "questions that never reached the chat (seed {seed}): {unasked:?}"
    );
    println!(
        "crash suite: seed {seed}: {total} tasks, {kills} kills, {rounds} agent rounds, \
         {recovered} recoveries of a running task, {reran} tool calls re-run (in flight at a kill, \
         not checkpointed), {redelivered} re-delivered (in flight at a kill), {questions} questions \
         asked, {uncertain} creates cut by a kill, {} model calls, {:.1} s",
        calls.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
    let mut last = lives.pop().unwrap();
    assert!(last.terminate().success());
}
