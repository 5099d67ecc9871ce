//! Workloads (b) and (d) across `serve` processes (`--postgres --serve N`): N `mai-agent serve`
//! processes on one database of the throwaway cluster, every one pointed at the fake
//! OpenAI-compatible server of `fake_openai`; tasks go in through the HTTP API, and what
//! happened is read back from the database (status logs; a trigger this workload adds records
//! when each claim was written). The binary is `target/<profile>/mai-agent` beside this
//! program (`cargo build --release -p mai-agent` first) or `MAI_AGENT_BIN`.
//!
//! `serve` has no echo tool: the fake model's `bench_echo` calls are answered by the registry as
//! unknown tools (an error result with name hints, no side effect) — five tool rounds per task
//! still, each checkpointed. Replies go to a console chat no channel serves, so their one send
//! fails (`[send] max_retries = 0`); the figure is to the last agent completion, as in (b).
//!
//! Owns the processes it starts (killed when it ends) and its figures; must not share state
//! with other workloads.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mai_store::sqlx;
use serde_json::{Value, json};

use crate::{Options, fake_openai};

/// Warm-up tasks before the clock starts, as in (b).
const WARM_UP: usize = 2;
/// Tasks running at once on each instance (as (b)'s one engine has).
const CONCURRENT: u32 = 4;

/// The `serve` processes of one workload, their HTTP bases, and a pool on their database.
struct Fleet {
    children: Vec<Child>,
    bases: Vec<String>,
    pool: sqlx::PgPool,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `mai-agent` binary: `MAI_AGENT_BIN`, else beside this program's directory.
fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("MAI_AGENT_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let beside = exe.parent().and_then(|examples| examples.parent()).unwrap();
    let path = beside.join("mai-agent");
    assert!(
        path.exists(),
        "--serve needs the mai-agent binary at {}: build it (cargo build --release -p mai-agent) \
         or set MAI_AGENT_BIN",
        path.display()
    );
    path
}

/// The config every instance shares (its name comes from the environment).
fn config(url: &str, model: std::net::SocketAddr, polish: bool) -> String {
    format!(
        "[storage]\nurl = \"{url}\"\n\
         [llm]\nbase_url = \"http://{model}/v1\"\napi_key = \"bench\"\n[llm.models]\nagent = \"bench-model\"\n\
         [task]\nmax_concurrent_tasks = {CONCURRENT}\n[polish]\nenabled = {polish}\n\
         [permission]\nadmins = [\"console:local\"]\n[send]\nmax_retries = 0\n\
         [limits]\nmax_active_per_requester = 1000000\nmax_active_per_stream = 1000000\n"
    )
}

/// Starts `n` instances on a new database of the cluster and waits for each one's banner.
async fn fleet(options: &Options, n: usize, model: std::net::SocketAddr, polish: bool) -> Fleet {
    let cluster = options
        .postgres
        .as_ref()
        .expect("--serve runs on PostgreSQL: add --postgres");
    let url = cluster.database();
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("mai-agent.toml");
    std::fs::write(&config_path, config(&url, model, polish)).unwrap();
    let (mut children, mut bases) = (Vec::new(), Vec::new());
    for i in 1..=n {
        let mut child = Command::new(binary())
            .arg("--data-dir")
            .arg(dir.path().join(format!("bench-{i}")))
            .arg("--config")
            .arg(&config_path)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("MAI_AGENT__SERVER__INSTANCE_ID", format!("bench-{i}"))
            .env("MAI_AGENT_LOG", "warn")
            .env_remove("MAI_AGENT_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mai-agent serve starts");
        bases.push(banner(&mut child));
        children.push(child);
    }
    Fleet {
        children,
        bases,
        pool: sqlx::PgPool::connect(&url).await.unwrap(),
        client: reqwest::Client::new(),
        _dir: dir,
    }
}

/// Reads `child`'s stderr up to its banner (its address), then keeps draining it on a thread.
fn banner(child: &mut Child) -> String {
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("serve ended before its banner")
            .unwrap();
        if let Some(rest) = line.split("serving on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    base
}

impl Fleet {
    /// Creates a task through instance `i`; its id as the database keys it.
    async fn create(&self, i: usize, body: &Value) -> String {
        let response = self
            .client
            .post(format!("{}/v1/tasks", self.bases[i % self.bases.len()]))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, 201, "{text}");
        let created: Value = serde_json::from_str(&text).unwrap();
        created["id"].as_str().unwrap().replace('-', "")
    }

    /// Waits until `count(sql)` over `ids` reaches `ids.len()`: counted again after each burst
    /// of the database's task notices.
    async fn wait_for(&self, what: &str, sql: &'static str, ids: &[String]) {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool)
            .await
            .unwrap();
        listener.listen("mai_tasks").await.unwrap();
        let reached = tokio::time::timeout(Duration::from_secs(600), async {
            loop {
                let done: i64 = sqlx::query_scalar(sql)
                    .bind(ids)
                    .fetch_one(&self.pool)
                    .await
                    .unwrap();
                if done as usize >= ids.len() {
                    return;
                }
                listener.recv().await.unwrap();
                while let Ok(Ok(_)) = tokio::time::timeout(Duration::ZERO, listener.recv()).await {}
            }
        })
        .await;
        assert!(reached.is_ok(), "{what}: not within 600 s");
    }

    async fn wait_completed(&self, ids: &[String]) {
        self.wait_for(
            "every task completed",
            "SELECT count(*) FROM tasks WHERE id = ANY($1) AND status = 'completed'",
            ids,
        )
        .await;
    }
}

/// An admin's agent task in the console chat, its title written by the model.
fn agent_body(i: usize) -> Value {
    json!({"intent": format!("benchmark task {i}"), "stream_id": "console:local",
           "platform": "console"})
}

/// (b) across `n` instances: the warm-up, then `tasks` agent tasks created one after another,
/// in turn through each instance; tasks/s from the first create to the last completion.
pub async fn throughput(options: &Options, n: usize, tasks: usize) {
    let (model, served) = fake_openai::start().await;
    let fleet = fleet(options, n, model, true).await;
    let mut warm = Vec::new();
    for i in 0..WARM_UP {
        warm.push(fleet.create(i, &agent_body(i)).await);
    }
    fleet.wait_completed(&warm).await;
    let calls = |s: &Arc<fake_openai::Served>| {
        use std::sync::atomic::Ordering::Relaxed;
        (s.agent.load(Relaxed), s.other.load(Relaxed))
    };
    let before = calls(&served);
    let started = Utc::now();
    let mut ids = Vec::with_capacity(tasks);
    for i in 0..tasks {
        ids.push(fleet.create(i, &agent_body(i)).await);
    }
    let created = Utc::now() - started;
    fleet.wait_completed(&ids).await;
    let last: String = sqlx::query_scalar(
        "SELECT max(at) FROM task_status_log WHERE task_id = ANY($1) AND status = 'completed'",
    )
    .bind(&ids)
    .fetch_one(&fleet.pool)
    .await
    .unwrap();
    let completed = last.parse::<DateTime<Utc>>().unwrap() - started;
    let after = calls(&served);
    let ms = |d: chrono::TimeDelta| d.num_microseconds().unwrap() as f64 / 1e3;
    println!(
        "(b) http across {n} serve process(es): {tasks} agent tasks × ({} tool rounds + \
         answer) after {WARM_UP} warm-ups, created in turn through each instance's HTTP API, \
         titles and reply polish by the model (OpenAiClient → hyper on loopback), on \
         PostgreSQL (throwaway cluster, loopback), {CONCURRENT} concurrent per instance: {:.0} \
         tasks/s to the last completion ({:.1} ms; all created after {:.1} ms); model calls: {} \
         agent, {} title or polish; claims by instance: {}",
        crate::echo::ROUNDS,
        tasks as f64 / (ms(completed) / 1e3),
        ms(completed),
        ms(created),
        after.0 - before.0,
        after.1 - before.1,
        claims_by_instance(&fleet, &ids).await,
    );
}

/// How many of `ids`' claims each instance made (`scheduler@bench-2`: 61, …).
async fn claims_by_instance(fleet: &Fleet, ids: &[String]) -> String {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT actor, count(*) FROM task_status_log WHERE task_id = ANY($1) \
         AND status = 'running' GROUP BY actor ORDER BY actor",
    )
    .bind(ids)
    .fetch_all(&fleet.pool)
    .await
    .unwrap();
    rows.iter()
        .map(|(actor, count)| format!("{actor} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Records, in `bench_claims`, when each task's move into `running` was written (the clock
/// inside the claiming transaction).
async fn record_claims(fleet: &Fleet) {
    for statement in [
        "CREATE TABLE bench_claims (task_id text, at timestamptz)",
        "CREATE FUNCTION bench_claim() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         INSERT INTO bench_claims VALUES (NEW.id, clock_timestamp()); RETURN NULL; END $$",
        "CREATE TRIGGER bench_claim AFTER UPDATE ON tasks FOR EACH ROW \
         WHEN (NEW.status = 'running' AND OLD.status <> 'running') \
         EXECUTE FUNCTION bench_claim()",
    ] {
        sqlx::query(statement).execute(&fleet.pool).await.unwrap();
    }
}

/// (d) across `n` instances: `tasks` tasks (half instant, half agent) delayed by 1 s, created
/// 0–`max_gap_ms` ms apart through the first instance and claimed by whichever instance wins;
/// due → claim written, p50/p99.
pub async fn delayed(options: &Options, n: usize, tasks: usize, max_gap_ms: u64) {
    let (model, _) = fake_openai::start().await;
    let fleet = fleet(options, n, model, false).await;
    record_claims(&fleet).await;
    let mut ids = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let mut body = json!({"intent": format!("later {i}"), "title": format!("later {i}"),
                              "stream_id": "console:local", "platform": "console",
                              "delay_seconds": 1});
        if i % 2 == 0 {
            body["level"] = json!("instant");
            body["intent"] = json!(format!("reminder {i}: stand up and stretch"));
        }
        ids.push(fleet.create(0, &body).await);
        tokio::time::sleep(crate::delayed::creation_gap(i, max_gap_ms)).await;
    }
    fleet
        .wait_for(
            "every delayed task claimed",
            "SELECT count(DISTINCT task_id) FROM bench_claims WHERE task_id = ANY($1)",
            &ids,
        )
        .await;
    let mut latencies: Vec<f64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM min(c.at) - (t.record::jsonb ->> 'scheduled_at')::timestamptz) \
         * 1000)::float8 FROM tasks t JOIN bench_claims c ON c.task_id = t.id \
         WHERE t.id = ANY($1) GROUP BY t.id, t.record",
    )
    .bind(&ids)
    .fetch_all(&fleet.pool)
    .await
    .unwrap();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1)];
    println!(
        "(d) delayed across {n} serve process(es): {tasks} delayed tasks (half instant, half \
         agent) created 0–{max_gap_ms} ms apart through the first instance, due → claim \
         written: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms, min {:.2} ms; claims by \
         instance: {}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        latencies[latencies.len() - 1],
        latencies[0],
        claims_by_instance(&fleet, &ids).await,
    );
}
