//! The multi-instance crash suite: three real `mai-agent serve` processes (instances `a`, `b`,
//! `c`, shell on) on one throwaway PostgreSQL database, against one fake model. A seeded mix of
//! tasks (agent tasks with checkpointed `run_command` rounds, agent tasks that `ask_user`,
//! instant, delayed, cron) is created through random instances; questions are answered through
//! random instances (as the person, `POST /v1/messages`, or by inject). A random instance is
//! SIGKILLed at a random moment while it works, and restarted at once under its own name; each
//! process start is one *life*. Then:
//!
//! - 0 lost: every created task exists; every non-cron task is completed; every cron task is
//!   armed; every question reached a chat;
//! - no reply part sent twice after it was recorded sent: a final text printed by several lives
//!   was printed by at most one life still alive when its delivery was recorded (the others died
//!   with it in flight), and never twice by one life;
//! - no inbound message processed twice: each answer the person sends carries a platform
//!   message id and goes to two instances at once (as one OneBot implementation delivers it to
//!   every instance connected to it); at most one copy is taken in, the other is `duplicate`;
//! - no checkpointed tool call run twice: every round ran in the life whose result the history
//!   holds, and any other run was in a life SIGKILLed before that run started (a run lost with
//!   its process, never one racing a live instance).
//!
//! `MAI_CRASH_TASKS` (120) and `MAI_CRASH_KILLS` (6) size the run; `MAI_CRASH_SEED` replays one.
//! The test waits on events: the database's `mai_tasks` notifications (LISTEN), the instances'
//! output lines and the fake model's calls; the only timers are the random kill moments and the
//! deadlines that fail a hung run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod crash_kit;
#[path = "../../../testing/postgres.rs"]
mod pg_cluster;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::*;
use crash_kit::*;
use mai_store::sqlx;
use serde_json::{Value, json};
use tokio::sync::Notify;
use wiremock::{Mock, MockServer};

const INSTANCES: [&str; 3] = ["a", "b", "c"];

/// One process start of an instance.
struct Life {
    instance: &'static str,
    served: Served,
    /// When it was SIGKILLed (anything it made durable is older), if it was.
    killed_at: Option<DateTime<Utc>>,
}

/// The three instances and every life they had.
struct Fleet {
    model: MockServer,
    config: std::path::PathBuf,
    data: std::path::PathBuf,
    lives: Vec<Life>,
    /// The index in `lives` of each instance's current life.
    current: [usize; 3],
    /// Notified on anything worth a look: a task changed in the database, a line printed.
    woke: Arc<Notify>,
}

impl Fleet {
    /// Starts (or restarts) instance `slot` as a new life, its data directory its own.
    fn start(&mut self, slot: usize) {
        let life = self.lives.len();
        let name = INSTANCES[slot];
        let mut command = mai(&self.data.join(name), &self.model);
        command
            .env("MAI_CRASH_LIFE", life.to_string())
            .env("MAI_AGENT__SERVER__INSTANCE_ID", name)
            .env("MAI_AGENT__POLISH__ENABLED", "true")
            .env("MAI_AGENT__LLM__MODELS__REPLYER", "polish-model")
            .arg("--config")
            .arg(&self.config)
            .args(["serve", "--listen", "127.0.0.1:0"]);
        let served = Served::start(command);
        let (printed, woke) = (served.line_added.clone(), self.woke.clone());
        tokio::spawn(async move {
            loop {
                printed.notified().await;
                woke.notify_one();
            }
        });
        self.current[slot] = life;
        self.lives.push(Life {
            instance: name,
            served,
            killed_at: None,
        });
    }

    fn base(&self, slot: usize) -> String {
        self.lives[self.current[slot]].served.base.clone()
    }

    /// The live instances' addresses, `a` first.
    fn bases(&self) -> Vec<String> {
        (0..INSTANCES.len()).map(|slot| self.base(slot)).collect()
    }

    fn logs(&self) -> Vec<Log> {
        self.lives.iter().map(|l| l.served.log.clone()).collect()
    }

    fn kill(&mut self, slot: usize) {
        let life = &mut self.lives[self.current[slot]];
        life.served.child.kill().unwrap();
        life.served.child.wait().unwrap();
        life.killed_at = Some(Utc::now());
    }
}

/// Forwards the database's `mai_tasks` notifications (every task change, on any instance) to
/// `woke`.
async fn listen(url: &str, woke: Arc<Notify>) {
    let mut listener = sqlx::postgres::PgListener::connect(url).await.unwrap();
    listener.listen("mai_tasks").await.unwrap();
    tokio::spawn(async move {
        while listener.recv().await.is_ok() {
            woke.notify_one();
        }
    });
}

/// What the drive of the run leaves to check.
struct Driven {
    planned: Vec<Planned>,
    /// A task's id once its create answered 201; `None` when the instance died under its create
    /// (then nobody knows whether it exists: it is not checked).
    ids: Vec<Option<String>>,
    uncertain: usize,
    side_effects: std::path::PathBuf,
    calls: Arc<AtomicUsize>,
    /// Per message the person sent (each to two instances at once, with one platform message
    /// id), the outcomes of the copies that were answered.
    said: Vec<Vec<String>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_database_lose_nothing_and_rerun_nothing_checkpointed_under_random_sigkills()
 {
    let Some(cluster) = pg_cluster::PgCluster::start() else {
        return;
    };
    let total = env_usize("MAI_CRASH_TASKS", 120);
    let kills = env_usize("MAI_CRASH_KILLS", 6);
    let seed = seed();
    println!("instances crash suite: {total} tasks, {kills} kills, MAI_CRASH_SEED={seed}");
    let started = Instant::now();
    let url = cluster.database();
    let dir = tempfile::tempdir().unwrap();
    let (mut fleet, mut driven) = drive(&url, dir.path(), total, kills, seed).await;
    settle(&fleet, &mut driven, seed).await;
    let figures = check(&fleet, &driven, seed).await;
    println!(
        "instances crash suite: seed {seed}: {total} tasks, {kills} kills, 3 instances, \
         {figures}, {} creates cut by a kill, {} model calls, {:.1} s",
        driven.uncertain,
        driven.calls.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
    for slot in 0..INSTANCES.len() {
        let life = fleet.current[slot];
        assert!(fleet.lives[life].served.terminate().success());
    }
    fleet.lives.clear();
}

/// Starts the fleet and runs the plan: each round creates its share of the tasks through
/// random instances, then SIGKILLs a random instance at a random moment of its work (while the
/// rest of the share is being created through it) and restarts it.
async fn drive(
    url: &str,
    dir: &std::path::Path,
    total: usize,
    kills: usize,
    seed: u64,
) -> (Fleet, Driven) {
    let mut rng = Rng(seed);
    let side_effects = dir.join("side_effects");
    let calls = Arc::new(AtomicUsize::new(0));
    let called = Arc::new(Notify::new());
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
    let config = dir.join("mai-agent.toml");
    let storage = format!("[storage]\nurl = \"{url}\"\nlease_secs = 3\nheartbeat_secs = 1\n");
    std::fs::write(&config, crash_kit::config(&storage)).unwrap();
    let woke = Arc::new(Notify::new());
    let mut fleet = Fleet {
        model,
        config,
        data: dir.to_owned(),
        lives: Vec::new(),
        current: [0; 3],
        woke: woke.clone(),
    };
    for slot in 0..INSTANCES.len() {
        fleet.start(slot);
    }
    listen(url, woke).await;
    let client = reqwest::Client::new();
    // The console chat exists once its person has said something.
    let said = client
        .post(format!("{}/v1/messages", fleet.base(0)))
        .json(&json!({"platform": "console", "user_id": "local", "text": "hi"}))
        .send()
        .await
        .unwrap();
    assert!(said.status().is_success());
    let mut driven = Driven {
        planned: plan(total, &mut rng),
        ids: vec![None; total],
        uncertain: 0,
        side_effects,
        calls,
        said: Vec::new(),
    };
    let batch = total.div_ceil(kills + 1).max(1);
    let mut next = 0;
    for round in 0..=kills {
        let before_window = if round == kills {
            total
        } else {
            (next + batch * 2 / 3).min(total)
        };
        while next < before_window {
            let base = fleet.base(rng.below(3) as usize);
            let created = create(&client, &base, &driven.planned[next].body()).await;
            driven.ids[next] = Some(created.expect("a live instance creates the task"));
            next += 1;
        }
        if round == kills {
            break;
        }
        let end = ((round + 1) * batch).min(total);
        next = kill_one(&mut fleet, &mut driven, &mut rng, &called, next..end).await;
    }
    (fleet, driven)
}

/// Creates the tasks `racing` through a random instance while waiting until the fleet works (a
/// model call), answering questions, then SIGKILLs that instance at a random moment and
/// restarts it. Returns the next task to create.
async fn kill_one(
    fleet: &mut Fleet,
    driven: &mut Driven,
    rng: &mut Rng,
    called: &Notify,
    racing: std::ops::Range<usize>,
) -> usize {
    let client = reqwest::Client::new();
    let victim = rng.below(3) as usize;
    let bodies: Vec<(usize, Value)> = racing
        .clone()
        .map(|i| (i, driven.planned[i].body()))
        .collect();
    let (racer_client, racer_base) = (client.clone(), fleet.base(victim));
    let racer = tokio::spawn(async move {
        let mut answered = Vec::new();
        for (i, body) in bodies {
            let created = create(&racer_client, &racer_base, &body).await;
            let died = created.is_none();
            answered.push((i, created));
            if died {
                break;
            }
        }
        answered
    });
    let calls_at_start = driven.calls.load(Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while driven.calls.load(Ordering::SeqCst) == calls_at_start {
        let said = answer_waiting(
            &client,
            &fleet.bases(),
            rng.below(3) as usize,
            &fleet.logs(),
            2,
        )
        .await;
        driven.said.extend(said);
        tokio::select! {
            () = called.notified() => {}
            () = fleet.woke.notified() => {}
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    let kill_at = tokio::time::Instant::now() + Duration::from_millis(rng.below(500));
    loop {
        let said = answer_waiting(
            &client,
            &fleet.bases(),
            rng.below(3) as usize,
            &fleet.logs(),
            2,
        )
        .await;
        driven.said.extend(said);
        tokio::select! {
            () = fleet.woke.notified() => {}
            () = tokio::time::sleep_until(kill_at) => break,
        }
    }
    fleet.kill(victim);
    let mut next = racing.start;
    for (i, created) in racer.await.unwrap() {
        match created {
            Some(id) => driven.ids[i] = Some(id),
            None => driven.uncertain += 1,
        }
        next = i + 1;
    }
    fleet.start(victim);
    next
}

/// Runs everything to the end: no active task left but cron ones. Looks again whenever a task
/// changes in the database or an instance prints a line (a question to answer).
async fn settle(fleet: &Fleet, driven: &mut Driven, seed: u64) {
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    for pass in 0.. {
        let bases = fleet.bases();
        let said = answer_waiting(&client, &bases, pass, &fleet.logs(), 2).await;
        driven.said.extend(said);
        let left: Vec<Value> = active_tasks(&client, &bases[pass % bases.len()])
            .await
            .into_iter()
            .filter(|t| t["trigger"]["kind"] != "cron")
            .collect();
        if left.is_empty() {
            return;
        }
        let woke = tokio::time::timeout_at(deadline, fleet.woke.notified()).await;
        assert!(woke.is_ok(), "tasks never finished (seed {seed}): {left:?}");
    }
}

/// Every check of the run; returns the figures.
async fn check(fleet: &Fleet, driven: &Driven, seed: u64) -> String {
    let client = reqwest::Client::new();
    let base = fleet.base(0);
    let known: Vec<(&Planned, &String)> = driven
        .planned
        .iter()
        .zip(&driven.ids)
        .filter_map(|(task, id)| Some((task, id.as_ref()?)))
        .collect();
    let (recovered, adopters) = check_tasks(&client, &base, &known, seed).await;
    let seen = wait_deliveries(fleet, &known, seed).await;
    let redelivered = check_deliveries(&client, &base, fleet, &known, &seen, seed).await;
    let (rounds, reran) = check_runs(&client, &base, fleet, driven, &known, seed).await;
    let questions = check_questions(&known, &seen, seed);
    let (messages, duplicates) = check_inbound(&driven.said, seed);
    format!(
        "{rounds} agent rounds, {recovered} recoveries of a running task ({adopters}), \
         {reran} tool calls re-run (in flight at a kill, not checkpointed), {redelivered} \
         re-delivered (in flight at a kill), {questions} questions asked, {messages} answers \
         sent to two instances each ({duplicates} copies dropped as duplicates)"
    )
}

/// Every created task exists and is where it should be. Returns how many running tasks were
/// recovered, and by which instances.
async fn check_tasks(
    client: &reqwest::Client,
    base: &str,
    known: &[(&Planned, &String)],
    seed: u64,
) -> (usize, String) {
    let mut recovered = 0;
    let mut by: HashMap<String, usize> = HashMap::new();
    for &(task, id) in known {
        let record = get(client, format!("{base}/v1/tasks/{id}")).await;
        for change in record["status_log"].as_array().unwrap() {
            if change["reason"] == "recovered from running" {
                recovered += 1;
                *by.entry(change["actor"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
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
    }
    let mut by: Vec<String> = by.into_iter().map(|(a, n)| format!("{a} {n}")).collect();
    by.sort();
    (recovered, by.join(", "))
}

/// Per printed text, the lives that printed it, once every expected final text was printed.
async fn wait_deliveries(
    fleet: &Fleet,
    known: &[(&Planned, &String)],
    seed: u64,
) -> HashMap<String, Vec<usize>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen: HashMap<String, Vec<usize>> = HashMap::new();
        for (life, lived) in fleet.lives.iter().enumerate() {
            for line in lived.served.log.lock().unwrap().iter() {
                if let Some(text) = line.strip_prefix("mai> ") {
                    seen.entry(text.to_owned()).or_default().push(life);
                }
            }
        }
        let missing: Vec<String> = known
            .iter()
            .filter(|(t, _)| t.kind != Kind::Cron && !seen.contains_key(&t.final_text()))
            .map(|(t, _)| t.final_text())
            .collect();
        if missing.is_empty() {
            return seen;
        }
        let woke = tokio::time::timeout_at(deadline, fleet.woke.notified()).await;
        assert!(woke.is_ok(), "never delivered (seed {seed}): {missing:?}");
    }
}

/// No final text printed twice by one life, nor by two lives alive when its delivery was
/// recorded. Returns how many copies were printed by lives that died with them in flight.
async fn check_deliveries(
    client: &reqwest::Client,
    base: &str,
    fleet: &Fleet,
    known: &[(&Planned, &String)],
    seen: &HashMap<String, Vec<usize>>,
    seed: u64,
) -> usize {
    let mut redelivered = 0;
    for &(task, id) in known.iter().filter(|(t, _)| t.kind != Kind::Cron) {
        let text = task.final_text();
        let lives_of = &seen[&text];
        let mut distinct = lives_of.clone();
        distinct.dedup();
        assert_eq!(
            &distinct, lives_of,
            "`{text}` delivered twice by one life (seed {seed}): lives {lives_of:?}"
        );
        if lives_of.len() == 1 {
            continue;
        }
        let record = get(client, format!("{base}/v1/tasks/{}", task.delivering(id))).await;
        let completed = completed_at(&record)
            .unwrap_or_else(|| panic!("{text}: its delivery never completed: {record}"));
        let alive_at_record: Vec<&usize> = lives_of
            .iter()
            .filter(|&&life| fleet.lives[life].killed_at.is_none_or(|k| k > completed))
            .collect();
        assert!(
            alive_at_record.len() <= 1,
            "`{text}` was sent by lives {alive_at_record:?}, all alive when it was recorded \
             sent (seed {seed}): {record}"
        );
        println!("instances crash suite: `{text}` delivered by lives {lives_of:?}");
        redelivered += lives_of.len() - 1;
    }
    redelivered
}

/// Every round of every agent task ran, its result checkpointed once, and every other run of it
/// was lost with a life SIGKILLed before the checkpointed run started. Returns the rounds and
/// the re-runs.
async fn check_runs(
    client: &reqwest::Client,
    base: &str,
    fleet: &Fleet,
    driven: &Driven,
    known: &[(&Planned, &String)],
    seed: u64,
) -> (usize, usize) {
    let executed = runs_by_key(&driven.side_effects);
    let (mut rounds, mut reran) = (0, 0);
    let agents = known
        .iter()
        .filter(|(t, _)| matches!(t.kind, Kind::Agent | Kind::Ask | Kind::Delayed));
    for &(task, id) in agents {
        let history = get(client, format!("{base}/v1/tasks/{id}/history")).await;
        for round in 0..task.rounds {
            rounds += 1;
            let key = format!("{}-r{round}", task.key);
            let runs = executed
                .get(&key)
                .unwrap_or_else(|| panic!("{key} never ran (seed {seed})"));
            let checkpointed = checkpointed_lives(&history, &key);
            assert_eq!(
                checkpointed.len(),
                1,
                "{key}: one checkpointed result (seed {seed}): {checkpointed:?} in {history}"
            );
            let counted: Vec<&Run> = runs.iter().filter(|r| r.life == checkpointed[0]).collect();
            assert_eq!(
                counted.len(),
                1,
                "{key}: the checkpointed life ran it once (seed {seed}): {runs:?}"
            );
            for run in runs.iter().filter(|r| r.life != checkpointed[0]) {
                let life = &fleet.lives[run.life];
                let lost = life
                    .killed_at
                    .and_then(|k| k.timestamp_nanos_opt())
                    .is_some_and(|k| i128::from(k) < counted[0].at_ns);
                assert!(
                    lost,
                    "{key} ran in life {} (instance {}) besides the checkpointed life {}, and \
                     that life was not killed before the checkpointed run began (seed {seed}): \
                     {runs:?}",
                    run.life, life.instance, checkpointed[0]
                );
                reran += 1;
            }
        }
    }
    (rounds, reran)
}

/// Every question reached a chat (at least once: a kill right after sending it resends it).
/// Returns how many were asked.
fn check_questions(
    known: &[(&Planned, &String)],
    seen: &HashMap<String, Vec<usize>>,
    seed: u64,
) -> usize {
    let asking: Vec<&Planned> = known
        .iter()
        .filter(|(t, _)| t.kind == Kind::Ask)
        .map(|(t, _)| *t)
        .collect();
    let unasked: Vec<&str> = asking
        .iter()
        .filter(|t| !seen.contains_key(&format!("question-{}?", t.key)))
        .map(|t| t.key.as_str())
        .collect();
    assert!(
        unasked.is_empty(),
        "questions that never reached a chat (seed {seed}): {unasked:?}"
    );
    asking.len()
}

/// No inbound message processed twice: of the two copies of each answer the person sent (one
/// platform message id, two instances), at most one was taken in (the other is `duplicate`, or
/// never answered because its instance died). Returns the messages and the copies dropped.
fn check_inbound(said: &[Vec<String>], seed: u64) -> (usize, usize) {
    let mut duplicates = 0;
    for outcomes in said {
        let taken = outcomes.iter().filter(|o| *o != "duplicate").count();
        assert!(
            taken <= 1,
            "one message processed by {taken} instances (seed {seed}): {outcomes:?}"
        );
        duplicates += outcomes.len() - taken;
    }
    assert!(
        said.is_empty() || duplicates > 0,
        "no copy was ever dropped: the second copies were not delivered (seed {seed})"
    );
    (said.len(), duplicates)
}
