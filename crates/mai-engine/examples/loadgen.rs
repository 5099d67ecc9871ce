//! Load generator for the engine workloads of BENCHMARKS.md. Prints one figure per workload.
//!
//! Run: `cargo run --release -p mai-engine --example loadgen -- <workload>` where workload is
//! - `round`    (a) runtime overhead per agent round: in-process instant model, no-op tool
//! - `http`     (b) 200 agent tasks × (5 tool rounds + answer) through `OpenAiClient` against a
//!   fake OpenAI-compatible server (hyper) on loopback, 4 concurrent tasks: tasks/s
//! - `waiting`  (c) resident memory per task suspended in `ask_user` (10,000 tasks)
//! - `delayed`  (d) due time → `running` latency of 500 delayed tasks, p50/p99; optional
//!   `[count] [max gap ms]` (default 500 20): creation gaps, so the rate due tasks arrive at
//! - `all`      every one of them, in that order
//!
//! Every workload uses its own SQLite file in a temp dir; polish is off, titles are given.
//! `--instant-model` (with `http`) swaps the HTTP model for the in-process instant one: the
//! figure then is the engine and store alone, the ceiling (b) could reach with free model calls.
//! `--sync-full` opens every database with `synchronous = FULL` (a disk sync per commit).
//! `--breakdown` (after the workload) wraps the store and the model in timing wrappers and
//! prints where the wall time went: calls, mean and total per store operation and model call.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a load generator panics on failure

#[path = "../benches/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use mai_core::model::ChatModel;
use mai_core::task::{TaskId, TaskLevel, TaskStatus, Trigger};
use mai_engine::engine::Engine;
use mai_engine::events::TaskEvent;
use mai_engine::manager::CreateTask;
use mai_llm::{LlmConfig, OpenAiClient};
use serde_json::json;
use tokio::sync::{Notify, broadcast};

use mai_store::{SqliteOptions, SqliteStore, Synchronous};
use support::{InstantModel, NullHost, Script, TimedModel, TimedStore, Timings};

/// The allocator the `mai-agent` binary ships with, so figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--breakdown") {
        args.remove(at);
        let _ = TIMINGS.set(Arc::new(Timings::default()));
    }
    if let Some(at) = args.iter().position(|a| a == "--instant-model") {
        args.remove(at);
        let _ = INSTANT_MODEL.set(());
    }
    if let Some(at) = args.iter().position(|a| a == "--sync-full") {
        args.remove(at);
        let _ = SYNC_FULL.set(());
    }
    let workload = args.first().map_or("all", String::as_str);
    let count = args.get(1).map(|n| n.parse::<usize>().expect("a count"));
    println!(
        "machine: {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    match workload {
        "round" => round(count.unwrap_or(40)).await,
        "http" => http(count.unwrap_or(200)).await,
        "waiting" => waiting(count.unwrap_or(10_000)).await,
        "delayed" => {
            let max_gap_ms = args.get(2).map_or(20, |n| n.parse().expect("a gap in ms"));
            delayed(count.unwrap_or(500), max_gap_ms).await;
        }
        "all" => {
            round(40).await;
            http(200).await;
            delayed(500, 20).await;
            waiting(10_000).await;
        }
        other => {
            eprintln!("unknown workload {other:?}: use round, http, waiting, delayed or all");
            std::process::exit(2);
        }
    }
}

/// Set by `--instant-model`: workload (b) runs against the in-process instant model instead of
/// HTTP, which leaves the engine and the store (the ceiling without model calls).
static INSTANT_MODEL: OnceLock<()> = OnceLock::new();

/// Set by `--breakdown`: every engine's store and model are timed into it.
static TIMINGS: OnceLock<Arc<Timings>> = OnceLock::new();

/// Set by `--sync-full`: the database syncs every commit to disk (`[storage] synchronous =
/// "full"`), as the original does.
static SYNC_FULL: OnceLock<()> = OnceLock::new();

/// A started engine over a SQLite file in `dir`, timed when `--breakdown` was given.
async fn build(
    dir: &tempfile::TempDir,
    config: mai_core::config::Config,
    model: Arc<dyn ChatModel>,
    host: Arc<NullHost>,
) -> Arc<Engine> {
    let options = SqliteOptions {
        synchronous: if SYNC_FULL.get().is_some() {
            Synchronous::Full
        } else {
            Synchronous::Normal
        },
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(dir.path().join("tasks.db"), &options)
        .await
        .unwrap();
    match TIMINGS.get() {
        None => support::engine_over(Arc::new(store), config, model, host).await,
        Some(timings) => {
            let store = TimedStore {
                inner: Arc::new(store),
                timings: timings.clone(),
            };
            let model = TimedModel {
                inner: model,
                timings: timings.clone(),
            };
            support::engine_over(Arc::new(store), config, Arc::new(model), host).await
        }
    }
}

/// Prints the timings collected since the last call (with `--breakdown`), per `unit`s.
fn print_breakdown(label: &str, units: f64, unit: &str) {
    let Some(timings) = TIMINGS.get() else { return };
    println!(
        "    breakdown of {label} (wall time inside each call; calls overlap when tasks run concurrently):"
    );
    for (what, calls, total) in timings.snapshot() {
        println!(
            "    {what:<22} {calls:>7} calls  {:>8.1} µs mean  {:>8.1} µs per {unit}",
            total.as_secs_f64() * 1e6 / calls as f64,
            total.as_secs_f64() * 1e6 / units,
        );
    }
    timings.reset();
}

fn agent_task(title: &str) -> CreateTask {
    let mut request = CreateTask::agent("check the disk usage of every volume and report");
    request.title = Some(title.to_owned());
    request
}

// ---------------------------------------------------------------------------------------------
// (a) runtime overhead per agent round

/// Tool rounds per task in workload (a).
const ROUNDS: usize = 50;

async fn round(tasks: usize) {
    let dir = tempfile::tempdir().unwrap();
    let engine = build(
        &dir,
        support::bench_config(ROUNDS as u32 + 10),
        InstantModel::new(Script::ToolRounds(ROUNDS)),
        Arc::new(NullHost::default()),
    )
    .await;
    let caller = support::caller("qq:group:1");
    let mut events = engine.subscribe();
    // One warm-up task: statement caches, the first pages of the file.
    let task = engine.create(&caller, agent_task("warm-up")).await.unwrap();
    support::wait_status(&engine, &mut events, task.id, TaskStatus::Completed).await;

    let mut per_task = Vec::with_capacity(tasks);
    if let Some(timings) = TIMINGS.get() {
        timings.reset();
    }
    let started = Instant::now();
    for i in 0..tasks {
        let begun = Instant::now();
        let task = engine
            .create(&caller, agent_task(&format!("disk {i}")))
            .await
            .unwrap();
        support::wait_status(&engine, &mut events, task.id, TaskStatus::Completed).await;
        per_task.push(begun.elapsed());
    }
    let total = started.elapsed();
    per_task.sort();
    let per_round = |d: Duration| d.as_secs_f64() * 1e3 / ROUNDS as f64;
    println!(
        "(a) round: {tasks} tasks × {ROUNDS} no-op tool rounds (+ answer), SQLite file: \
         {:.3} ms/round mean, {:.3} ms/round median task (target ≤ 0.2 ms; original 5.06 ms)",
        per_round(total / tasks as u32),
        per_round(per_task[per_task.len() / 2]),
    );
    print_breakdown("(a)", (tasks * ROUNDS) as f64, "round");
    engine.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Event recorder: the first time each (task, status) was seen, and every send.

#[derive(Default)]
struct Seen {
    status: HashMap<(TaskId, TaskStatus), (Instant, DateTime<Utc>)>,
    sent: usize,
    last_sent: Option<Instant>,
}

struct Recorder {
    seen: Mutex<Seen>,
    changed: Notify,
    lagged: AtomicU64,
}

impl Recorder {
    /// Starts recording `engine`'s events (subscribed before this returns).
    fn start(engine: &Engine) -> Arc<Recorder> {
        let recorder = Arc::new(Recorder {
            seen: Mutex::new(Seen::default()),
            changed: Notify::new(),
            lagged: AtomicU64::new(0),
        });
        let mut events = engine.subscribe();
        let me = recorder.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(TaskEvent::Status {
                        task_id, status, ..
                    }) => {
                        let at = (Instant::now(), Utc::now());
                        me.seen
                            .lock()
                            .unwrap()
                            .status
                            .entry((task_id, status))
                            .or_insert(at);
                        me.changed.notify_waiters();
                    }
                    Ok(TaskEvent::Sent { .. }) => {
                        let mut seen = me.seen.lock().unwrap();
                        seen.sent += 1;
                        seen.last_sent = Some(Instant::now());
                        drop(seen);
                        me.changed.notify_waiters();
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        me.lagged.fetch_add(n, Ordering::Relaxed);
                        me.changed.notify_waiters();
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        recorder
    }

    /// Waits (bounded) until `done` holds for what was seen.
    async fn wait_until(&self, what: &str, done: impl Fn(&Seen) -> bool) {
        tokio::time::timeout(Duration::from_secs(300), async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if done(&self.seen.lock().unwrap()) {
                    return;
                }
                if self.lagged.load(Ordering::Relaxed) > 0 {
                    panic!("the event recorder lagged; figures would be wrong ({what})");
                }
                changed.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }
}

// ---------------------------------------------------------------------------------------------
// (b) throughput against a fake OpenAI-compatible server over HTTP

/// Tool rounds per task in workload (b).
const HTTP_ROUNDS: usize = 5;

/// A Chat Completions server on loopback: calls the no-op tool until the request holds
/// `HTTP_ROUNDS` tool results, then answers. Returns its address and a request counter.
async fn fake_openai() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            let counter = counter.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    counter.fetch_add(1, Ordering::Relaxed);
                    completion(request)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, requests)
}

async fn completion(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    // Only what the answer needs: the model name and how many tool results the conversation
    // holds (a fake model should cost the benchmark little CPU of its own).
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        model: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        messages: Vec<Message<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        role: std::borrow::Cow<'a, str>,
    }
    let request: Option<Request> = serde_json::from_slice(&body).ok();
    let done = request.as_ref().map_or(0, |request| {
        request.messages.iter().filter(|m| m.role == "tool").count()
    });
    let model = request.as_ref().map_or("", |request| &request.model);
    let (message, finish) = if done < HTTP_ROUNDS {
        (
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_{done}"), "type": "function",
                "function": {"name": "noop", "arguments": "{}"}}]}),
            "tool_calls",
        )
    } else {
        (
            json!({"role": "assistant", "content": "done: all volumes are below 80%"}),
            "stop",
        )
    };
    let answer = json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    });
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&answer).unwrap())))
        .unwrap())
}

async fn http(tasks: usize) {
    let (addr, requests) = fake_openai().await;
    let model: Arc<dyn ChatModel> = if INSTANT_MODEL.get().is_some() {
        InstantModel::new(Script::ToolRounds(HTTP_ROUNDS))
    } else {
        Arc::new(
            OpenAiClient::new(LlmConfig {
                base_url: format!("http://{addr}/v1"),
                ..LlmConfig::default()
            })
            .unwrap(),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = support::bench_config(30);
    config.task.max_concurrent_tasks = 4;
    let host = Arc::new(NullHost::default());
    let engine = build(&dir, config, model, host).await;
    let recorder = Recorder::start(&engine);
    let callers: Vec<_> = (0..10)
        .map(|i| support::caller(&format!("qq:group:{i}")))
        .collect();

    let started = Instant::now();
    let mut ids = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let task = engine
            .create(
                &callers[i % callers.len()],
                agent_task(&format!("disk {i}")),
            )
            .await
            .unwrap();
        ids.push(task.id);
    }
    let created = started.elapsed();
    recorder
        .wait_until("every task completed", |seen| {
            ids.iter()
                .all(|id| seen.status.contains_key(&(*id, TaskStatus::Completed)))
        })
        .await;
    let last_completed = {
        let seen = recorder.seen.lock().unwrap();
        ids.iter()
            .map(|id| seen.status[&(*id, TaskStatus::Completed)].0)
            .max()
            .unwrap()
    };
    recorder
        .wait_until("every reply sent", |seen| seen.sent >= tasks)
        .await;
    let last_sent = recorder.seen.lock().unwrap().last_sent.unwrap();
    let completed = last_completed - started;
    let delivered = last_sent - started;
    println!(
        "(b) http: {tasks} agent tasks × ({HTTP_ROUNDS} tool rounds + answer) via OpenAiClient → \
         hyper on loopback, 4 concurrent: {:.0} tasks/s to the last completion ({:.1} ms; all \
         created after {:.1} ms); {:.0} tasks/s incl. reply delivery; {} model requests \
         (target ≥ 1000 tasks/s; original 40)",
        tasks as f64 / completed.as_secs_f64(),
        completed.as_secs_f64() * 1e3,
        created.as_secs_f64() * 1e3,
        tasks as f64 / delivered.as_secs_f64(),
        requests.load(Ordering::Relaxed),
    );
    print_breakdown("(b)", tasks as f64, "task");
    engine.stop().await;
}

// ---------------------------------------------------------------------------------------------
// (c) resident memory per task waiting in ask_user

async fn waiting(tasks: usize) {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(NullHost::default());
    let engine = build(
        &dir,
        support::bench_config(30),
        InstantModel::new(Script::AskFirst),
        host.clone(),
    )
    .await;
    // No event subscriber: the event ring would otherwise keep the last 4096 events alive.
    let callers: Vec<_> = (0..100)
        .map(|i| support::caller(&format!("qq:group:{i}")))
        .collect();
    let mut total = 0;
    let mut batch = async |n: usize| {
        for i in 0..n {
            // The returned record is dropped at once: the engine alone keeps what it needs.
            engine
                .create(&callers[i % callers.len()], agent_task("which volume?"))
                .await
                .unwrap();
        }
        total += n;
        // Memory is measured, so polling the counters is fine here (no event ring).
        loop {
            let load = engine.load_figures();
            if load.waiting == total && load.running == 0 && load.queued == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        support::rss_kib()
    };
    // Warm-up: runtime, pool connections, statement caches, first pages.
    let warm = 500;
    let base = batch(warm).await;
    let started = Instant::now();
    let first = batch(tasks).await;
    let elapsed = started.elapsed();
    let second = batch(tasks).await;
    let load = engine.load_figures();
    let per_task = |from: u64, to: u64| (to.saturating_sub(from)) as f64 * 1024.0 / tasks as f64;
    println!(
        "(c) waiting: RSS {base} KiB with {warm} waiting (warm-up), {first} KiB after {tasks} more \
         ({:.0} B/task), {second} KiB after another {tasks} ({:.0} B/task marginal, bounded \
         SQLite page caches already full); {} waiting, {} questions sent, {} question timers \
         armed-or-pending, created+suspended at {:.0} tasks/s (target ≤ 1024 B/task; original \
         24.3 KiB)",
        per_task(base, first),
        per_task(first, second),
        load.waiting,
        host.sent.load(Ordering::Relaxed),
        load.waiting,
        tasks as f64 / elapsed.as_secs_f64(),
    );
    engine.stop().await;
}

// ---------------------------------------------------------------------------------------------
// (d) delayed task latency: due time → running

async fn delayed(tasks: usize, max_gap_ms: u64) {
    let dir = tempfile::tempdir().unwrap();
    let engine = build(
        &dir,
        support::bench_config(30),
        InstantModel::new(Script::ToolRounds(0)),
        Arc::new(NullHost::default()),
    )
    .await;
    let recorder = Recorder::start(&engine);
    let caller = support::caller("qq:group:1");
    // Delays have whole-second resolution, so tasks are created 0–`max_gap_ms` ms apart (a
    // fixed pseudo-random sequence) with a 1 s delay: due times are spread over the run and
    // firing overlaps creating.
    let mut due = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let mut request = agent_task(&format!("later {i}"));
        request.trigger = Trigger::Delay { seconds: 1 };
        if i % 2 == 0 {
            request.level = TaskLevel::Instant;
            request.intent = format!("reminder {i}: stand up and stretch");
        }
        let task = engine.create(&caller, request).await.unwrap();
        due.push((task.id, task.scheduled_at.unwrap()));
        let gap = (i as u64 * 7919) % (max_gap_ms + 1);
        tokio::time::sleep(Duration::from_millis(gap)).await;
    }
    recorder
        .wait_until("every delayed task running", |seen| {
            due.iter()
                .all(|(id, _)| seen.status.contains_key(&(*id, TaskStatus::Running)))
        })
        .await;
    // Milliseconds from the due time to the `pending` event (the timer fired and the task was
    // queued) and to the `running` event (dispatched and claimed).
    let (mut to_pending, mut latencies): (Vec<f64>, Vec<f64>) = {
        let seen = recorder.seen.lock().unwrap();
        let ms = |from: DateTime<Utc>, to: DateTime<Utc>| {
            (to - from).num_microseconds().unwrap() as f64 / 1e3
        };
        due.iter()
            .map(|(id, at)| {
                let pending = seen.status[&(*id, TaskStatus::Pending)].1;
                let running = seen.status[&(*id, TaskStatus::Running)].1;
                (ms(*at, pending), ms(*at, running))
            })
            .unzip()
    };
    to_pending.sort_by(f64::total_cmp);
    latencies.sort_by(f64::total_cmp);
    let percentile = |sorted: &[f64], p: f64| {
        sorted[((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1)]
    };
    let pct = |p: f64| percentile(&latencies, p);
    println!(
        "(d) delayed: {tasks} delayed tasks (half instant, half agent) created 0–{max_gap_ms} ms \
         apart, due → running event: \
         p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms, min {:.2} ms (target p99 ≤ 5 ms; \
         original polls once a second)",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        latencies[latencies.len() - 1],
        latencies[0],
    );
    println!(
        "    of which due → pending (timer fired, task queued): p50 {:.2} ms, p99 {:.2} ms",
        percentile(&to_pending, 0.50),
        percentile(&to_pending, 0.99),
    );
    print_breakdown("(d)", tasks as f64, "task");
    engine.stop().await;
}
