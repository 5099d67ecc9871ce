//! Several `mai-agent serve` instances on one PostgreSQL database behave as one service: a task
//! of a SIGKILLed instance resumes on another from its last checkpoint (its checkpointed tool
//! call never runs again); a cancel given to one instance stops the task running on another; an
//! answer given through one instance resumes a task that asked through another; a cron task
//! fires once per fire time with two instances armed; a message that two instances receive from
//! one OneBot implementation is processed by one; a task created and paused through one instance
//! shows live on the other's event stream (`changed` events), as its dashboard needs; under a
//! cluster-wide cap of one, tasks created through both instances run one at a time, and all
//! complete; with the database stopped for 10 s mid-load, both instances stay up and say so
//! (health 503, creates refused with 503, a log line), then finish every task, no checkpointed
//! tool call run again; a task running on an instance without MaiBot's bridge reads the chat,
//! asks and answers through the instance holding it, and a part whose bridge instance is killed
//! mid-send reaches the chat once (a fake plugin speaks the bridge protocol over a loopback
//! WebSocket).
//!
//! Leases are short (`lease_secs = 2`, `heartbeat_secs = 1`). The test waits on events, never on
//! a clock: it LISTENs on the database's `mai_tasks` channel (the instances' own wake-ups) and
//! reads a task's status each time it changes, and it waits on the fake model's calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod crash_kit;
#[path = "../../../testing/postgres.rs"]
mod pg_cluster;
#[path = "../../../testing/sse.rs"]
mod sse;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use futures::{SinkExt, StreamExt};
use mai_store::sqlx;
use pg_cluster::PgCluster;
use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The agent's script: `results` tool results so far → the next message. The first call made
/// with `hold_at` results is held (never answered in the test's time): the instance making it
/// is busy inside that round until it is killed or its task stopped.
struct Script {
    steps: fn(usize, &Value) -> Value,
    hold_at: Option<usize>,
    held: AtomicUsize,
    calls: Arc<Calls>,
}

impl Respond for Script {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if body["model"] == "title-model" {
            return completion(&body, answer("Instance test"));
        }
        let results = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        let hold = self.hold_at == Some(results) && self.held.fetch_add(1, Ordering::SeqCst) == 0;
        let response = completion(&body, (self.steps)(results, &body));
        self.calls.arrived();
        if hold {
            return response.set_delay(Duration::from_secs(3600));
        }
        response
    }
}

/// The fake model running `steps`, holding the first call made with `hold_at` tool results.
async fn model(
    steps: fn(usize, &Value) -> Value,
    hold_at: Option<usize>,
) -> (MockServer, Arc<Calls>) {
    let server = MockServer::start().await;
    let calls = Arc::new(Calls::default());
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(Script {
            steps,
            hold_at,
            held: AtomicUsize::new(0),
            calls: calls.clone(),
        })
        .mount(&server)
        .await;
    (server, calls)
}

/// The shared database, and a LISTEN on its `mai_tasks` channel opened before anything runs.
struct Cluster {
    cluster: PgCluster,
    url: String,
    pool: sqlx::PgPool,
    listener: sqlx::postgres::PgListener,
    config: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(extra: &str) -> Option<Cluster> {
        let cluster = PgCluster::start()?;
        let url = cluster.database();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mai-agent.toml");
        std::fs::write(
            &config,
            format!(
                "[storage]\nurl = \"{url}\"\nlease_secs = 2\nheartbeat_secs = 1\n\
                 [shell]\nenabled = true\n[permission]\nadmins = [\"console:local\"]\n{extra}"
            ),
        )
        .unwrap();
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
            .await
            .unwrap();
        listener.listen("mai_tasks").await.unwrap();
        Some(Cluster {
            cluster,
            url,
            pool,
            listener,
            config,
            _dir: dir,
        })
    }

    /// `serve` as instance `name`, with a data directory of its own (as on another machine).
    fn serve(&self, name: &str, model: &MockServer, data: &std::path::Path) -> Served {
        self.serve_with(name, model, data, &[])
    }

    /// [`Cluster::serve`] with more environment variables.
    fn serve_with(
        &self,
        name: &str,
        model: &MockServer,
        data: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Served {
        let mut command = serve_command(&data.join(name), model, Some(&self.config));
        command
            .env("MAI_AGENT__SERVER__INSTANCE_ID", name)
            .env("MAI_AGENT_LOG", "info")
            .envs(env.iter().copied());
        Served::start(command)
    }

    /// A new pool and LISTEN, after the database was stopped and started again (the old
    /// connections died with it).
    async fn reconnect(&mut self) {
        self.pool = sqlx::PgPool::connect(&self.url).await.unwrap();
        self.listener = sqlx::postgres::PgListener::connect_with(&self.pool)
            .await
            .unwrap();
        self.listener
            .listen_all(["mai_tasks", "test_history"])
            .await
            .unwrap();
    }

    /// The stored status of task `id` (the API's id, with dashes).
    async fn status(&self, id: &str) -> String {
        sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1")
            .bind(id.replace('-', ""))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Waits until task `id` is `status`: reads it, then again after each announced change.
    async fn wait_status(&mut self, id: &str, status: &str) {
        let reached = tokio::time::timeout(Duration::from_secs(90), async {
            loop {
                if self.status(id).await == status {
                    return;
                }
                self.listener.recv().await.unwrap();
            }
        })
        .await;
        assert!(reached.is_ok(), "task {id} never became {status}");
    }

    /// Makes the database announce every history entry written (on `test_history`), so the
    /// test can wait for a checkpoint: the product announces only injections. Needs the tables
    /// (an instance has migrated them).
    async fn announce_history(&mut self) {
        for statement in [
            "CREATE FUNCTION test_history_notify() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_notify('test_history', NEW.task_id); RETURN NULL; END $$",
            "CREATE TRIGGER test_history_notify AFTER INSERT ON task_history \
             FOR EACH ROW EXECUTE FUNCTION test_history_notify()",
        ] {
            sqlx::query(statement).execute(&self.pool).await.unwrap();
        }
        self.listener.listen("test_history").await.unwrap();
    }

    /// Waits until task `id`'s stored history holds a tool result (see `announce_history`).
    async fn wait_checkpointed_tool_result(&mut self, id: &str) {
        let stored = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let results: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM task_history WHERE task_id = $1 \
                     AND payload::jsonb ->> 'role' = 'tool'",
                )
                .bind(id.replace('-', ""))
                .fetch_one(&self.pool)
                .await
                .unwrap();
                if results > 0 {
                    return;
                }
                self.listener.recv().await.unwrap();
            }
        })
        .await;
        assert!(
            stored.is_ok(),
            "task {id}'s tool result was never checkpointed"
        );
    }

    /// The status log of task `id`: `status|actor|reason` lines, in order.
    async fn log(&self, id: &str) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT status || '|' || actor || '|' || reason FROM task_status_log \
             WHERE task_id = $1 ORDER BY seq",
        )
        .bind(id.replace('-', ""))
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    /// The instance whose scheduler claimed task `id` last (`scheduler@<name>`).
    async fn runner(&self, id: &str) -> String {
        let log = self.log(id).await;
        let claim = log
            .iter()
            .rev()
            .find(|line| line.starts_with("running|"))
            .unwrap_or_else(|| panic!("task {id} never ran: {log:?}"));
        let actor = claim.split('|').nth(1).unwrap();
        actor.rsplit('@').next().unwrap().to_owned()
    }
}

/// One `run_command` that appends to the file the intent names (`append-to:<path> `), then the
/// answer.
fn one_command_then_done(results: usize, body: &Value) -> Value {
    let intent = body["messages"].to_string();
    let file = intent
        .split("append-to:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    match results {
        0 => tool_call(
            "c0",
            "run_command",
            json!({"command": format!("echo ran >> {file}")}),
        ),
        _ => answer("done after the command"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_a_killed_instance_resumes_on_another_without_rerunning_its_checkpointed_tool_call()
 {
    let Some(mut cluster) = Cluster::start("").await else {
        return;
    };
    // The call after the command's result is held: its instance is busy in round 2 when killed.
    let (model, calls) = model(one_command_then_done, Some(1)).await;
    let data = tempfile::tempdir().unwrap();
    let ran = data.path().join("ran");
    let mut a = cluster.serve("a", &model, data.path());
    cluster.announce_history().await;
    let client = reqwest::Client::new();
    let id = create_console_task(
        &client,
        &a.base,
        &format!("run it once append-to:{} and stop", ran.display()),
    )
    .await;
    // Round 2's call arrives while the command's result is being checkpointed (the two run
    // together): wait for the result in the stored history, not just for the call.
    cluster.wait_checkpointed_tool_result(&id).await;
    calls.wait_past(1).await;
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");
    assert_eq!(cluster.runner(&id).await, "a");
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let _b = cluster.serve("b", &model, data.path());
    cluster.wait_status(&id, "completed").await;
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "ran\n",
        "the checkpointed command never ran again"
    );
    let log = cluster.log(&id).await;
    assert!(
        log.iter()
            .any(|l| l == "pending|recovery@b|recovered from running"),
        "b adopted the task a held: {log:?}"
    );
    assert_eq!(cluster.runner(&id).await, "b");
    let record: String = sqlx::query_scalar("SELECT record FROM tasks WHERE id = $1")
        .bind(id.replace('-', ""))
        .fetch_one(&cluster.pool)
        .await
        .unwrap();
    assert!(record.contains("done after the command"), "{record}");
    drop(cluster.cluster);
}

/// Asks, and answers with what it was told.
fn ask_then_repeat(results: usize, body: &Value) -> Value {
    match results {
        0 => tool_call("q0", "ask_user", json!({"question": "which colour?"})),
        _ => answer(&format!("you said {}", last_tool_result(body))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_through_one_instance_resumes_a_task_that_asked_through_another() {
    let Some(mut cluster) = Cluster::start("").await else {
        return;
    };
    let (model, _) = model(ask_then_repeat, None).await;
    let data = tempfile::tempdir().unwrap();
    let a = cluster.serve("a", &model, data.path());
    let b = cluster.serve("b", &model, data.path());
    let client = reqwest::Client::new();
    let id = create_console_task(&client, &a.base, "ask me a colour").await;
    cluster.wait_status(&id, "waiting_input").await;
    let asker = cluster.runner(&id).await;
    let other = if asker == "a" { &b } else { &a };

    let answered = client
        .post(format!("{}/v1/tasks/{id}/answer", other.base))
        .json(&json!({"text": "teal"}))
        .send()
        .await
        .unwrap();
    assert!(
        answered.status().is_success(),
        "{}",
        answered.text().await.unwrap()
    );
    cluster.wait_status(&id, "completed").await;
    let record = task_record(&client, &a.base, &id).await;
    assert!(
        record.to_string().contains("you said") && record.to_string().contains("teal"),
        "{record}"
    );
    let log = cluster.log(&id).await;
    assert!(
        log.iter().any(|l| l.ends_with("|resumed with the answer")),
        "{log:?}"
    );
}

/// One command, then (held) the next round: the task stays running until it is stopped.
fn command_then_hold(results: usize, _: &Value) -> Value {
    match results {
        0 => tool_call("c0", "run_command", json!({"command": "true"})),
        _ => answer("should not get here"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_given_to_one_instance_stops_the_task_running_on_another() {
    let Some(mut cluster) = Cluster::start("").await else {
        return;
    };
    let (model, calls) = model(command_then_hold, Some(1)).await;
    let data = tempfile::tempdir().unwrap();
    let a = cluster.serve("a", &model, data.path());
    let b = cluster.serve("b", &model, data.path());
    let client = reqwest::Client::new();
    let id = create_console_task(&client, &a.base, "run until cancelled").await;
    calls.wait_past(1).await;
    assert_eq!(cluster.status(&id).await, "running");
    let runner = cluster.runner(&id).await;
    let other = if runner == "a" { &b } else { &a };

    let cancelled = client
        .post(format!("{}/v1/tasks/{id}/cancel", other.base))
        .send()
        .await
        .unwrap();
    assert!(
        cancelled.status().is_success(),
        "{}",
        cancelled.text().await.unwrap()
    );
    cluster.wait_status(&id, "cancelled").await;
    let log = cluster.log(&id).await;
    assert!(
        log.last().unwrap().ends_with("|cancelled while running"),
        "the instance running it stopped it: {log:?}"
    );
    assert_eq!(calls.count(), 2, "no model call after the cancel");
}

/// A recurring task's every run answers at once.
fn answer_at_once(_: usize, _: &Value) -> Value {
    answer("tick")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_task_runs_once_per_fire_time_with_two_instances_armed() {
    let Some(mut cluster) = Cluster::start("").await else {
        return;
    };
    let (model, _) = model(answer_at_once, None).await;
    let data = tempfile::tempdir().unwrap();
    let a = cluster.serve("a", &model, data.path());
    let _b = cluster.serve("b", &model, data.path());
    let client = reqwest::Client::new();
    let id = create_with(
        &client,
        &a.base,
        json!({"intent": "tick every minute", "cron_expr": "* * * * *"}),
    )
    .await;
    // Two fire times: each ends with the task scheduled again for the next minute.
    for fire in 1..=2 {
        let ran = tokio::time::timeout(Duration::from_secs(150), async {
            loop {
                let log = cluster.log(&id).await;
                let runs = log.iter().filter(|l| l.ends_with("|dispatched")).count();
                if runs >= fire && log.last().unwrap().starts_with("scheduled|") {
                    return;
                }
                cluster.listener.recv().await.unwrap();
            }
        })
        .await;
        assert!(ran.is_ok(), "the cron task did not run {fire} time(s)");
    }
    let runs: Vec<String> = sqlx::query_scalar(
        "SELECT substr(at, 1, 16) FROM task_status_log WHERE task_id = $1 \
         AND reason = 'dispatched' ORDER BY seq",
    )
    .bind(id.replace('-', ""))
    .fetch_all(&cluster.pool)
    .await
    .unwrap();
    assert_eq!(runs.len(), 2, "one run per fire time: {runs:?}");
    assert_ne!(runs[0], runs[1], "two different minutes: {runs:?}");
    assert_eq!(cluster.status(&id).await, "scheduled");
    let _ = &cluster.url;
}

/// One harmless command, then the answer: two model rounds, so runs last long enough to meet.
fn command_then_answer(results: usize, _: &Value) -> Value {
    match results {
        0 => tool_call("c0", "run_command", json!({"command": "echo working"})),
        _ => answer("done"),
    }
}

impl Cluster {
    /// Records, in the table `test_running`, every transaction that moved tasks into or out of
    /// `running`: its id, its net change and the clock when its last such row was written. A
    /// claim under the cap writes its row after taking the claim lock, so a claim that counted
    /// an end is recorded after that end; the running total in that order is how many tasks
    /// ran at once. Needs the tables (an instance has migrated them).
    async fn record_running(&self) {
        for statement in [
            "CREATE TABLE test_running (tx bigint, at timestamptz, delta int)",
            "CREATE FUNCTION test_running_change() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF (NEW.status = 'running') IS DISTINCT FROM \
             (TG_OP = 'UPDATE' AND OLD.status = 'running') THEN \
             INSERT INTO test_running VALUES (txid_current(), clock_timestamp(), \
             CASE WHEN NEW.status = 'running' THEN 1 ELSE -1 END); END IF; \
             RETURN NULL; END $$",
            "CREATE TRIGGER test_running_change AFTER INSERT OR UPDATE ON tasks \
             FOR EACH ROW EXECUTE FUNCTION test_running_change()",
        ] {
            sqlx::query(statement).execute(&self.pool).await.unwrap();
        }
    }

    /// The most tasks running at once, from `test_running`.
    async fn most_running_at_once(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT COALESCE(max(running), 0)::bigint FROM (SELECT sum(net) OVER \
             (ORDER BY at, tx) AS running FROM (SELECT tx, max(at) AS at, sum(delta) AS net \
             FROM test_running GROUP BY tx) changes) totals",
        )
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    /// Waits until no task is left unfinished: counts them, then again after each change.
    async fn wait_all_finished(&mut self) {
        let finished = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let unfinished: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM tasks \
                     WHERE status NOT IN ('completed', 'failed', 'cancelled')",
                )
                .fetch_one(&self.pool)
                .await
                .unwrap();
                if unfinished == 0 {
                    return;
                }
                self.listener.recv().await.unwrap();
            }
        })
        .await;
        if finished.is_err() {
            let unfinished: Vec<String> = sqlx::query_scalar(
                "SELECT t.id || ' ' || t.status || ' ' || coalesce(t.lease_owner, '-') || ': ' \
                 || string_agg(l.status || '|' || l.actor || '|' || l.reason, ', ' \
                 ORDER BY l.seq) FROM tasks t JOIN task_status_log l ON l.task_id = t.id \
                 WHERE t.status NOT IN ('completed', 'failed', 'cancelled') \
                 GROUP BY t.id, t.status, t.lease_owner",
            )
            .fetch_all(&self.pool)
            .await
            .unwrap();
            panic!("some tasks never finished: {unfinished:#?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_wide_cap_of_one_lets_one_task_run_at_a_time_across_two_instances_and_all_complete()
 {
    let capped = "[task]\ncluster_max_running = 1\n[send]\nmax_retries = 0\n";
    let Some(mut cluster) = Cluster::start(capped).await else {
        return;
    };
    let (model, _) = model(command_then_answer, None).await;
    let data = tempfile::tempdir().unwrap();
    let a = cluster.serve("a", &model, data.path());
    let b = cluster.serve("b", &model, data.path());
    cluster.record_running().await;
    let client = reqwest::Client::new();
    // Through both instances at once, with 4 slots each: pending tasks queued everywhere, and
    // delayed ones that fall due together on both instances.
    let creations = (0..8).map(|n| {
        let base = if n % 2 == 0 { &a.base } else { &b.base };
        let mut fields = json!({"intent": format!("capped task {n}")});
        if n >= 6 {
            fields["delay_seconds"] = json!(1);
        }
        create_with(&client, base, fields)
    });
    let ids = futures::future::join_all(creations).await;
    cluster.wait_all_finished().await;
    for id in &ids {
        assert_eq!(
            cluster.status(id).await,
            "completed",
            "{:?}",
            cluster.log(id).await
        );
    }
    let runners: std::collections::HashSet<String> =
        futures::future::join_all(ids.iter().map(|id| cluster.runner(id)))
            .await
            .into_iter()
            .collect();
    assert_eq!(
        cluster.most_running_at_once().await,
        1,
        "tasks run by {runners:?}"
    );
    // The replies ran too, under the same cap; the test's console chat has no channel, so
    // each failed its one send attempt rather than vanishing.
    let replies: Vec<String> = sqlx::query_scalar(
        "SELECT status || ' ' || (record::jsonb #>> '{metadata,error}') FROM tasks \
         WHERE record::jsonb #>> '{metadata,is_reply}' = 'true'",
    )
    .fetch_all(&cluster.pool)
    .await
    .unwrap();
    assert_eq!(replies.len(), ids.len(), "{replies:?}");
    assert!(
        replies
            .iter()
            .all(|reply| reply.starts_with("failed could not send to stream console:local")),
        "{replies:?}"
    );
}

/// Unix time in nanoseconds (the clock the side-effect lines are stamped with).
fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// The crash suites' model (one side-effect line per round), on a server of its own.
async fn crash_model(side_effects: &std::path::Path) -> MockServer {
    let model = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(crash_kit::CrashModel {
            side_effects: side_effects.display().to_string(),
            calls: Arc::default(),
            called: Arc::default(),
            jitter: std::sync::atomic::AtomicU64::new(7),
        })
        .mount(&model)
        .await;
    model
}

/// What an instance answers while its database is down: `/v1/health` says the store is out
/// (503), a create is refused with 503 and says what failed and what to do, and the log says
/// the leases could not be renewed.
async fn check_outage_reported(client: &reqwest::Client, instance: &Served) {
    let health = client
        .get(format!("{}/v1/health", instance.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    let health: Value = health.json().await.unwrap();
    assert_eq!(health["store"]["ok"], false, "{health}");
    let healthz = client
        .get(format!("{}/healthz", instance.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        healthz.status(),
        200,
        "still alive: a supervisor must not restart it"
    );
    let refused = client
        .post(format!("{}/v1/tasks", instance.base))
        .json(&json!({"intent": "made while the database is down",
                      "stream_id": "console:local", "platform": "console"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let refused: Value = refused.json().await.unwrap();
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("the database could not be reached")
            && error.contains("check that the database server named by [storage] url"),
        "{error}"
    );
    Served::wait_log(instance, "could not renew this instance's task leases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_ride_out_ten_seconds_without_their_database_and_then_finish_every_task() {
    let extra = "[task]\nmax_concurrent_tasks = 8\n[send]\nmax_retries = 0\n";
    let Some(mut cluster) = Cluster::start(extra).await else {
        return;
    };
    // The throwaway cluster commits asynchronously (fast tests); a commit must survive the
    // stop here, as on a production server.
    let database = pg_cluster::PgCluster::database_name(&cluster.url).to_owned();
    cluster.cluster.psql_as_superuser(
        "postgres",
        &format!("ALTER DATABASE {database} SET synchronous_commit = on"),
    );
    let data = tempfile::tempdir().unwrap();
    let side_effects = data.path().join("side_effects");
    let model = crash_model(&side_effects).await;
    let mut a = cluster.serve_with("a", &model, data.path(), &[("MAI_CRASH_LIFE", "0")]);
    let mut b = cluster.serve_with("b", &model, data.path(), &[("MAI_CRASH_LIFE", "1")]);
    cluster.announce_history().await;
    let client = reqwest::Client::new();
    let body = |n: usize| {
        json!({"intent": format!("crash-task o{n} rounds=3 ask=0"),
               "stream_id": "console:local", "platform": "console"})
    };
    let mut ids = Vec::new();
    for n in 0..12 {
        let base = if n % 2 == 0 { &a.base } else { &b.base };
        ids.push(crash_kit::create(&client, base, &body(n)).await.unwrap());
    }
    // Mid-load: some rounds checkpointed, others in flight.
    let loaded = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let results: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM task_history WHERE payload::jsonb ->> 'role' = 'tool'",
            )
            .fetch_one(&cluster.pool)
            .await
            .unwrap();
            if results >= 8 {
                return;
            }
            cluster.listener.recv().await.unwrap();
        }
    })
    .await;
    assert!(loaded.is_ok(), "the tasks never got going");

    let down = tokio::time::Instant::now();
    cluster.cluster.stop_now();
    tokio::join!(
        check_outage_reported(&client, &a),
        check_outage_reported(&client, &b)
    );
    // The fault lasts 10 s (however long the checks above took within it).
    tokio::time::sleep_until(down + Duration::from_secs(10)).await;
    cluster.cluster.start_again();
    let up_ns = now_ns();
    cluster.reconnect().await;

    // Serving again: a create passes, and every task (that one too) completes.
    ids.push(
        crash_kit::create(&client, &b.base, &body(12))
            .await
            .unwrap(),
    );
    cluster.wait_all_finished().await;
    for (n, id) in ids.iter().enumerate() {
        assert_eq!(cluster.status(id).await, "completed", "task o{n}");
    }
    for instance in [&mut a, &mut b] {
        assert!(instance.child.try_wait().unwrap().is_none(), "stayed up");
        let health = client
            .get(format!("{}/v1/health", instance.base))
            .send()
            .await
            .unwrap();
        let health: Value = health.json().await.unwrap();
        assert_eq!(health["store"]["ok"], true, "{health}");
    }
    // Each round's result is checkpointed once; any other run of it started before the
    // database came back and before the counted run: it was lost with the outage, never
    // run beside a live run of the same call.
    let executed = crash_kit::runs_by_key(&side_effects);
    let mut lost = 0;
    for (n, id) in ids.iter().enumerate() {
        let history = crash_kit::get(&client, format!("{}/v1/tasks/{id}/history", a.base)).await;
        for round in 0..3 {
            let key = format!("o{n}-r{round}");
            let counted = crash_kit::checkpointed_starts(&history, &key);
            assert_eq!(counted.len(), 1, "{key}: {counted:?}");
            let runs = &executed[&key];
            assert_eq!(runs.iter().filter(|r| r.at_ns == counted[0]).count(), 1);
            for run in runs.iter().filter(|r| r.at_ns != counted[0]) {
                assert!(
                    run.at_ns < up_ns && run.at_ns < counted[0],
                    "{key} ran again beside its counted run: {runs:?}"
                );
                lost += 1;
            }
        }
    }
    println!("database outage: 13 tasks completed, {lost} tool run(s) lost with it and redone");
}

/// A OneBot v11 implementation's forward WebSocket that several instances connect to, as they
/// would to one NapCat: every event goes to every connection; every action is answered `ok` and
/// collected.
struct SharedOneBot {
    url: String,
    events: tokio::sync::broadcast::Sender<Value>,
    actions: tokio::sync::mpsc::UnboundedReceiver<Value>,
    connected: tokio::sync::mpsc::UnboundedReceiver<()>,
}

async fn shared_onebot() -> SharedOneBot {
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let (events, _) = tokio::sync::broadcast::channel::<Value>(16);
    let (seen, actions) = tokio::sync::mpsc::unbounded_channel();
    let (joined, connected) = tokio::sync::mpsc::unbounded_channel();
    let sender = events.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let mut outgoing = sender.subscribe();
            let (seen, joined) = (seen.clone(), joined.clone());
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
                joined.send(()).unwrap();
                loop {
                    tokio::select! {
                        event = outgoing.recv() => {
                            let Ok(event) = event else { break };
                            ws.send(Message::text(event.to_string())).await.unwrap();
                        }
                        frame = ws.next() => {
                            let Some(Ok(Message::Text(text))) = frame else { break };
                            let action: Value = serde_json::from_str(&text).unwrap();
                            let answer = json!({"status": "ok", "retcode": 0,
                                "data": {"message_id": 1}, "echo": action["echo"]});
                            ws.send(Message::text(answer.to_string())).await.unwrap();
                            let _ = seen.send(action);
                        }
                    }
                }
            });
        }
    });
    SharedOneBot {
        url,
        events,
        actions,
        connected,
    }
}

impl SharedOneBot {
    /// A group message from user 10001 in group 20002 with the platform id `message_id`, sent
    /// now (an old one would fall to the retention job an instance runs as it starts).
    fn group_message(&self, message_id: i64, text: &str) {
        self.events
            .send(json!({
                "time": chrono::Utc::now().timestamp(), "self_id": 999, "post_type": "message",
                "message_type": "group", "sub_type": "normal", "message_id": message_id,
                "group_id": 20002, "user_id": 10001, "font": 0,
                "message": [{"type": "text", "data": {"text": text}}], "raw_message": text,
                "sender": {"user_id": 10001, "nickname": "Alice", "card": ""}
            }))
            .unwrap();
    }

    /// The next `send_msg` the instances made (bounded: a hang fails).
    async fn next_send(&mut self) -> Value {
        let action = tokio::time::timeout(Duration::from_secs(60), self.actions.recv())
            .await
            .expect("no instance sent anything to OneBot")
            .unwrap();
        assert_eq!(action["action"], "send_msg", "{action}");
        action
    }
}

/// What an instance logs when it drops a message another instance took in.
const SKIPPED: &str = "a message another instance took in already is skipped";

/// Waits until one of `instances` logged `SKIPPED` for platform message `id`; returns its index.
async fn skipped_by(instances: &[&Served], id: &str) -> usize {
    let needle = format!("message_id={id}");
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            for (index, served) in instances.iter().enumerate() {
                let log = served.log.lock().unwrap();
                if log
                    .iter()
                    .any(|l| l.contains(SKIPPED) && l.contains(&needle))
                {
                    return index;
                }
            }
            tokio::select! {
                () = instances[0].line_added.notified() => {}
                () = instances[1].line_added.notified() => {}
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        let logs: Vec<Vec<String>> = instances
            .iter()
            .map(|served| served.log.lock().unwrap().clone())
            .collect();
        panic!("no instance skipped message {id}; their logs: {logs:#?}")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_two_instances_receive_from_one_onebot_is_processed_by_one_of_them() {
    let mut onebot = shared_onebot().await;
    let extra = format!(
        "[channels.onebot]\nenabled = true\nurl = \"{}\"\n",
        onebot.url
    );
    let Some(cluster) = Cluster::start(&extra).await else {
        return;
    };
    let (model, _) = model(answer_at_once, None).await;
    let data = tempfile::tempdir().unwrap();
    let a = cluster.serve("a", &model, data.path());
    let b = cluster.serve("b", &model, data.path());
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(60), onebot.connected.recv())
            .await
            .expect("both instances connect to OneBot");
    }

    for id in [7, 8] {
        onebot.group_message(id, "/mt help");
        let reply = onebot.next_send().await;
        assert_eq!(reply["params"]["group_id"], 20002, "{reply}");
        let skipper = skipped_by(&[&a, &b], &id.to_string()).await;
        let other = [&a, &b][1 - skipper].log.lock().unwrap().clone();
        assert!(
            !other
                .iter()
                .any(|l| l.contains(SKIPPED) && l.contains(&format!("message_id={id}"))),
            "both instances skipped message {id}, so neither processed it: {other:?}"
        );
    }
    assert!(
        onebot.actions.try_recv().is_err(),
        "one reply per message, not one per instance"
    );
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM host_messages WHERE text = '/mt help' AND NOT is_bot",
    )
    .fetch_one(&cluster.pool)
    .await
    .unwrap();
    assert_eq!(stored, 2, "each message stored once");
    let seen: Vec<String> = sqlx::query_scalar(
        "SELECT platform || ':' || platform_message_id FROM host_inbound_seen ORDER BY 1",
    )
    .fetch_all(&cluster.pool)
    .await
    .unwrap();
    assert_eq!(seen, ["qq:7", "qq:8"]);
}

/// The next `changed` event of task `id` on `stream` (bounded), skipping the others.
async fn next_change(stream: &mut sse::SseReader, id: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (name, data) = stream.next().await.expect("the event stream goes on");
            if name == "changed" && data["task_id"] == id {
                return data;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no `changed` event of task {id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_and_paused_through_one_instance_shows_live_on_the_others_event_stream() {
    let Some(cluster) = Cluster::start("").await else {
        return;
    };
    let (model, _) = model(answer_at_once, None).await;
    let data = tempfile::tempdir().unwrap();
    let a = cluster.serve("a", &model, data.path());
    let b = cluster.serve("b", &model, data.path());
    let client = reqwest::Client::new();
    let mut on_a = sse::SseReader::new(events(&client, &a.base).await);
    let id = create_with(
        &client,
        &b.base,
        json!({"intent": "later", "delay_seconds": 3600}),
    )
    .await;
    let created = next_change(&mut on_a, &id).await;
    assert_eq!(created["status"], "scheduled", "{created}");
    let paused = client
        .post(format!("{}/v1/tasks/{id}/pause", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status(), 200);
    let change = next_change(&mut on_a, &id).await;
    assert_eq!(change["status"], "paused", "{change}");
}

/// A stand-in for MaiBot's plugin on a loopback WebSocket, speaking the bridge protocol
/// (docs/bridge-protocol.md): hello, then answers to mai-agent's requests. It remembers the part
/// ids it sent across its connections, as the plugin does, and drops a part sent already.
struct FakePlugin {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    /// `(part_id, text)` of every part that reached the chat, in order.
    chat: Vec<(String, String)>,
    /// The part id of every `send_text` request received, duplicates included.
    send_requests: Vec<String>,
}

impl FakePlugin {
    /// Connects to `served`'s bridge.
    async fn connect(served: &Served) -> FakePlugin {
        let mut plugin = FakePlugin {
            socket: FakePlugin::open(served).await,
            chat: Vec::new(),
            send_requests: Vec::new(),
        };
        plugin.hello().await;
        plugin
    }

    /// Connects again, to `served` (what the plugin does when its bridge closed); it keeps
    /// what it sent.
    async fn reconnect(&mut self, served: &Served) {
        self.socket = FakePlugin::open(served).await;
        self.hello().await;
    }

    async fn open(
        served: &Served,
    ) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>
    {
        let url = format!("{}/v1/bridge", served.base.replace("http://", "ws://"));
        tokio_tungstenite::connect_async(url).await.unwrap().0
    }

    async fn hello(&mut self) {
        use tokio_tungstenite::tungstenite::Message;
        let hello = json!({"id": "hello", "method": "hello", "params": {"plugin_version": "test"}});
        self.socket
            .send(Message::text(hello.to_string()))
            .await
            .unwrap();
        let answer = self.next_frame().await;
        assert_eq!(answer["id"], "hello", "{answer}");
    }

    async fn next_frame(&mut self) -> Value {
        use tokio_tungstenite::tungstenite::Message;
        let frame = tokio::time::timeout(Duration::from_secs(90), async {
            loop {
                match self
                    .socket
                    .next()
                    .await
                    .expect("the bridge stays open")
                    .unwrap()
                {
                    Message::Text(text) => return text,
                    _ => continue,
                }
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "mai-agent sent nothing more over the bridge (parts asked so far: {:?})",
                self.send_requests
            )
        });
        serde_json::from_str(&frame).unwrap()
    }

    /// Answers requests as the plugin would until one that `stop` picks, which is returned
    /// unanswered.
    async fn serve_until(&mut self, stop: impl Fn(&Value) -> bool) -> Value {
        loop {
            let request = self.next_frame().await;
            if request["method"] == "send_text" {
                let part = request["params"]["part_id"].as_str().unwrap().to_owned();
                self.send_requests.push(part);
            }
            if stop(&request) {
                return request;
            }
            self.answer(&request).await;
        }
    }

    /// The plugin's answer: a part is sent unless its id was; a chat's history is one line;
    /// anything else is a capability this plugin lacks.
    async fn answer(&mut self, request: &Value) {
        use tokio_tungstenite::tungstenite::Message;
        let params = &request["params"];
        let outcome = match request["method"].as_str().unwrap() {
            "send_text" => {
                let part = params["part_id"].as_str().unwrap().to_owned();
                if self.chat.iter().any(|(sent, _)| *sent == part) {
                    json!({"result": {"sent": true, "duplicate": true}})
                } else {
                    let text = params["text"].as_str().unwrap().to_owned();
                    self.chat.push((part, text));
                    json!({"result": {"sent": true}})
                }
            }
            "recent_messages" => json!({"result": [
                {"sender": "Ann", "text": "the sky is teal today", "at": "2026-01-02T03:04:05Z"}
            ]}),
            "ping" => json!({"result": "pong"}),
            other => json!({"error": {"code": "unsupported", "message": format!("no {other}")}}),
        };
        let mut frame = outcome;
        frame["id"] = request["id"].clone();
        self.socket
            .send(Message::text(frame.to_string()))
            .await
            .unwrap();
    }

    /// The parts the chat received whose text contains `text`.
    fn received(&self, text: &str) -> Vec<&(String, String)> {
        self.chat.iter().filter(|(_, t)| t.contains(text)).collect()
    }
}

/// A `send_text` request whose text contains `text`.
fn send_of(text: &'static str) -> impl Fn(&Value) -> bool {
    move |request| {
        request["method"] == "send_text"
            && request["params"]["text"]
                .as_str()
                .is_some_and(|t| t.contains(text))
    }
}

/// Reads the chat's history, asks, then answers with both.
fn read_ask_then_answer(results: usize, body: &Value) -> Value {
    match results {
        0 => tool_call("h0", "fetch_history", json!({"limit": 5})),
        1 => tool_call("q0", "ask_user", json!({"question": "which colour?"})),
        _ => answer(&format!("you said {}", last_tool_result(body))),
    }
}

/// Two MaiBot instances on one database: `a` (one task slot, kept busy by a task whose model
/// call never returns, so it runs nothing else) and `b`, which runs every task made after;
/// the plugin's bridge is connected to `a`, and the database names `a` the holder.
struct BridgeCluster {
    cluster: Cluster,
    a: Served,
    b: Served,
    plugin: FakePlugin,
    model: MockServer,
    data: tempfile::TempDir,
}

impl BridgeCluster {
    async fn start(steps: fn(usize, &Value) -> Value) -> Option<BridgeCluster> {
        // Extends `[permission]` (the person may make tasks), then the MaiBot host.
        let extra = "users = [\"qq:1001\"]\n[host]\nkind = \"maibot\"\nrequest_timeout_secs = 3\n";
        let mut cluster = Cluster::start(extra).await?;
        cluster.listener.listen("mai_bridge").await.unwrap();
        let (model, calls) = model(steps, Some(0)).await;
        let data = tempfile::tempdir().unwrap();
        let a = serve_a(&cluster, &model, data.path());
        let client = reqwest::Client::new();
        create_console_task(&client, &a.base, "keep instance a busy").await;
        calls.wait_past(0).await;
        let b = cluster.serve("b", &model, data.path());
        let plugin = FakePlugin::connect(&a).await;
        cluster.wait_holder("a").await;
        Some(BridgeCluster {
            cluster,
            a,
            b,
            plugin,
            model,
            data,
        })
    }

    /// Instance `a` killed (SIGKILL) and started again on its data directory.
    fn restart_a(&mut self) {
        self.a.child.kill().unwrap();
        self.a.child.wait().unwrap();
        self.a = serve_a(&self.cluster, &self.model, self.data.path());
    }

    /// Creates a task in MaiBot chat `session-1` through instance `b`, for person qq:1001.
    async fn create_on_b(&self, intent: &str) -> String {
        let response = reqwest::Client::new()
            .post(format!("{}/v1/tasks", self.b.base))
            .json(
                &json!({"intent": intent, "stream_id": "session-1", "platform": "qq",
                          "user_id": "1001"}),
            )
            .send()
            .await
            .unwrap();
        let body: Value = response.json().await.unwrap();
        body["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}"))
            .to_owned()
    }
}

/// Instance `a`: one task slot.
fn serve_a(cluster: &Cluster, model: &MockServer, data: &std::path::Path) -> Served {
    let mut command = serve_command(&data.join("a"), model, Some(&cluster.config));
    command
        .env("MAI_AGENT__SERVER__INSTANCE_ID", "a")
        .env("MAI_AGENT__TASK__MAX_CONCURRENT_TASKS", "1")
        .env("MAI_AGENT_LOG", "info");
    Served::start(command)
}

impl Cluster {
    /// Waits until the database names `instance` as holding a MaiBot bridge (needs a LISTEN on
    /// `mai_bridge`, where holders announce themselves).
    async fn wait_holder(&mut self, instance: &str) {
        let held = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let holders: Vec<String> =
                    sqlx::query_scalar("SELECT instance FROM host_bridge_holders")
                        .fetch_all(&self.pool)
                        .await
                        .unwrap();
                if holders.iter().any(|h| h == instance) {
                    return;
                }
                self.listener.recv().await.unwrap();
            }
        })
        .await;
        assert!(held.is_ok(), "instance {instance} never held the bridge");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_an_instance_without_the_bridge_reads_asks_and_answers_through_the_one_holding_it()
 {
    let Some(mut on) = BridgeCluster::start(read_ask_then_answer).await else {
        return;
    };
    let _dump = DumpOnPanic(vec![on.a.log.clone(), on.b.log.clone()]);
    // b has no bridge of its own but reaches a's: up, not degraded.
    let health = reqwest::get(format!("{}/v1/health", on.b.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let health: Value = health.json().await.unwrap();
    assert_eq!(health["bridge"]["state"], "elsewhere", "{health}");
    assert_eq!(health["bridge"]["via"], "a", "{health}");
    let id = on.create_on_b("read the chat then ask me a colour").await;
    // The history read and the question reach MaiBot through a's bridge.
    let question = on.plugin.serve_until(send_of("which colour")).await;
    on.plugin.answer(&question).await;
    assert_eq!(on.cluster.runner(&id).await, "b");
    let read: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM task_history WHERE task_id = $1 \
         AND payload LIKE '%the sky is teal today%'",
    )
    .bind(id.replace('-', ""))
    .fetch_one(&on.cluster.pool)
    .await
    .unwrap();
    assert!(
        read > 0,
        "the chat's history, read through a, reached b's task"
    );

    // The person answers in the chat at once (b's run may still be ending) and MaiBot hands
    // the message to a, which records the answer; a has no free slot: b takes the task up.
    let answered: Value = reqwest::Client::new()
        .post(format!("{}/v1/messages", on.a.base))
        .json(
            &json!({"platform": "qq", "stream_id": "session-1", "user_id": "1001",
                      "sender_name": "Ann", "text": "teal", "message_id": "m1"}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answered["outcome"], "answered", "{answered}");
    let reply = on.plugin.serve_until(send_of("you said")).await;
    on.plugin.answer(&reply).await;
    on.cluster.wait_status(&id, "completed").await;
    assert_eq!(on.plugin.received("which colour").len(), 1);
    assert_eq!(on.plugin.received("you said").len(), 1);
    assert!(on.plugin.received("you said")[0].1.contains("teal"));
    let mut requested = on.plugin.send_requests.clone();
    requested.sort();
    requested.dedup();
    assert_eq!(
        requested.len(),
        on.plugin.send_requests.len(),
        "each part was asked of MaiBot once: {:?}",
        on.plugin.send_requests
    );
}

/// A task on `b` sends a part through `a`; MaiBot sends it, but `a` is killed before the answer
/// gets back. The plugin reconnects — to `b`, or to `a` started again — and is asked the part
/// again with the same id, which it drops: the chat has it once.
async fn killed_mid_send(reconnect_to_b: bool) {
    let Some(mut on) = BridgeCluster::start(answer_at_once).await else {
        return;
    };
    let _dump = DumpOnPanic(vec![on.a.log.clone(), on.b.log.clone()]);
    let id = on.create_on_b("say something").await;
    let in_chat = |r: &Value| r["method"] == "send_text" && r["params"]["stream_id"] == "session-1";
    let send = on.plugin.serve_until(in_chat).await;
    let part = send["params"]["part_id"].as_str().unwrap().to_owned();
    let text = send["params"]["text"].as_str().unwrap().to_owned();
    on.plugin.chat.push((part.clone(), text));
    if reconnect_to_b {
        on.a.child.kill().unwrap();
        on.a.child.wait().unwrap();
        on.plugin.reconnect(&on.b).await;
    } else {
        on.restart_a();
        on.plugin.reconnect(&on.a).await;
    }
    // (The instances also take up a's own task and answer it in a's console chat: skipped.)
    let again = on.plugin.serve_until(in_chat).await;
    assert_eq!(again["params"]["part_id"], part.as_str());
    on.plugin.answer(&again).await;
    on.cluster.wait_status(&id, "completed").await;
    let ours: Vec<_> = on.plugin.chat.iter().filter(|(p, _)| *p == part).collect();
    assert_eq!(
        ours.len(),
        1,
        "the chat got the part once: {:?}",
        on.plugin.chat
    );
    let asked = on
        .plugin
        .send_requests
        .iter()
        .filter(|p| **p == part)
        .count();
    assert_eq!(
        asked, 2,
        "asked through a, then again through the next bridge"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_whose_bridge_instance_was_killed_mid_send_reaches_the_chat_once_through_a_bridge_on_the_task_s_instance()
 {
    killed_mid_send(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_whose_bridge_instance_was_killed_mid_send_reaches_the_chat_once_through_that_instance_restarted()
 {
    killed_mid_send(false).await;
}
