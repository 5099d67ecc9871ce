//! Load generator for the engine workloads of BENCHMARKS.md. Prints one figure per workload.
//!
//! Run: `cargo run --release -p mai-engine --example loadgen -- <workload>` where workload is
//! - `round`    (a) runtime overhead per agent round: in-process instant model, no-op tool
//! - `http`     (b) the original's throughput benchmark: 2 warm-up tasks, then 200 agent tasks
//!   created one after another by an admin, each 5 echo-tool rounds then an answer, 4
//!   concurrent tasks, titles and reply polish written by the model; the model is
//!   `OpenAiClient` against a fake OpenAI-compatible server (hyper) on loopback: tasks/s to the
//!   200th agent completion
//! - `waiting`  (c) resident memory per task suspended in `ask_user` (10,000 tasks)
//! - `delayed`  (d) due time → `running` latency of 500 delayed tasks, p50/p99; optional
//!   `[count] [max gap ms]` (default 500 20): creation gaps, so the rate due tasks arrive at
//! - `all`      every one of them, in that order
//!
//! Every workload uses its own SQLite file in a temp dir. (a), (c) and (d) give titles and turn
//! polish off; (b) does neither, as the original's benchmark makes both model calls.
//! `--instant-model` (with `http`) swaps the HTTP model for an in-process instant one: the
//! figure then is the engine and store alone, the ceiling (b) could reach with free model calls.
//! `--sync-full` opens every database with `synchronous = FULL` (a disk sync per commit, as the
//! original's SQLite does).
//! `--postgres` runs every workload on PostgreSQL instead: a throwaway cluster this program starts
//! (`initdb` into a temp dir, as the tests do; the server programs from
//! `testing/postgres/setup.sh`), a new database per workload, one engine on it.
//! `--breakdown` (after the workload) wraps the store and the model in timing wrappers and
//! prints where the wall time went: calls, mean and total per store operation and model call.
//! `--serve N` (with `--postgres`, for `http` and `delayed`) runs the workload across N
//! `mai-agent serve` processes on one database instead of an engine in this process (`serve`).
//!
//! This file owns the command line and what every workload shares (building an engine, printing
//! a breakdown); each workload lives in its own module and must not reach into another's.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a load generator panics on failure

#[path = "../../benches/support/mod.rs"]
mod support;
#[path = "../../../../testing/postgres.rs"]
mod throwaway_postgres;

mod delayed;
mod echo;
mod fake_openai;
mod recorder;
mod round;
mod serve;
mod throughput;
mod waiting;

use std::sync::Arc;

use mai_core::model::ChatModel;
use mai_core::store::TaskStore;
use mai_engine::CreateTask;
use mai_engine::Engine;
use mai_store::{PgStore, SqliteOptions, SqliteStore, Synchronous};
use support::{NullHost, TimedModel, TimedStore, Timings};

/// The allocator the `mai-agent` binary ships with, so figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What the command line asked for besides the workload.
#[derive(Default, Clone)]
pub struct Options {
    /// `--instant-model`: (b) runs against an in-process instant model instead of HTTP, which
    /// leaves the engine and the store (the ceiling without model calls).
    pub instant_model: bool,
    /// `--breakdown`: every engine's store and model are timed into these.
    pub timings: Option<Arc<Timings>>,
    /// `--sync-full`: every commit is synced to disk (`[storage] synchronous = "full"`).
    pub sync_full: bool,
    /// `--postgres`: the throwaway cluster every workload gets a new database on.
    pub postgres: Option<Arc<throwaway_postgres::PgCluster>>,
}

impl Options {
    /// What the workloads' stores are, for the printed figures.
    pub fn store_label(&self) -> &'static str {
        match (&self.postgres, self.sync_full) {
            (Some(_), _) => "PostgreSQL (throwaway cluster, loopback)",
            (None, true) => "SQLite file, synchronous = FULL",
            (None, false) => "SQLite file",
        }
    }
}

/// Removes `flag` and the number after it from `args`; the number, if the flag was there.
fn take_number(args: &mut Vec<String>, flag: &str) -> Option<usize> {
    let at = args.iter().position(|a| a == flag)?;
    args.remove(at);
    let value = args.remove(at);
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{flag} takes a number, got {value:?}")),
    )
}

/// Removes `flag` from `args`; whether it was there.
fn take_flag(args: &mut Vec<String>, flag: &str) -> bool {
    let at = args.iter().position(|a| a == flag);
    if let Some(at) = at {
        args.remove(at);
    }
    at.is_some()
}

#[tokio::main]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let instances = take_number(&mut args, "--serve");
    let options = Options {
        timings: take_flag(&mut args, "--breakdown").then(|| Arc::new(Timings::default())),
        instant_model: take_flag(&mut args, "--instant-model"),
        sync_full: take_flag(&mut args, "--sync-full"),
        postgres: take_flag(&mut args, "--postgres").then(|| {
            let cluster = throwaway_postgres::PgCluster::start()
                .expect("--postgres: no PostgreSQL server programs; run testing/postgres/setup.sh");
            Arc::new(cluster)
        }),
    };
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
    let max_gap_ms = args.get(2).map_or(20, |n| n.parse().expect("a gap in ms"));
    match (workload, instances) {
        ("http", Some(n)) => serve::throughput(&options, n, count.unwrap_or(200)).await,
        ("delayed", Some(n)) => {
            serve::delayed(&options, n, count.unwrap_or(500), max_gap_ms).await;
        }
        (_, Some(_)) => {
            eprintln!("--serve N runs the workloads http and delayed only");
            std::process::exit(2);
        }
        _ => run_in_process(&options, workload, count, max_gap_ms).await,
    }
}

/// The workloads on engines in this process.
async fn run_in_process(options: &Options, workload: &str, count: Option<usize>, max_gap_ms: u64) {
    let options = options.clone();
    match workload {
        "round" => round::run(&options, count.unwrap_or(40)).await,
        "http" => throughput::run(&options, count.unwrap_or(200)).await,
        "waiting" => waiting::run(&options, count.unwrap_or(10_000)).await,
        "delayed" => delayed::run(&options, count.unwrap_or(500), max_gap_ms).await,
        "all" => {
            round::run(&options, 40).await;
            throughput::run(&options, 200).await;
            delayed::run(&options, 500, 20).await;
            waiting::run(&options, 10_000).await;
        }
        other => {
            eprintln!("unknown workload {other:?}: use round, http, waiting, delayed or all");
            std::process::exit(2);
        }
    }
}

/// The store a workload runs on: a SQLite file in `dir`, or a new PostgreSQL database.
async fn store(options: &Options, dir: &tempfile::TempDir) -> Arc<dyn TaskStore> {
    if let Some(cluster) = &options.postgres {
        return Arc::new(PgStore::connect(&cluster.database()).await.unwrap());
    }
    let sqlite = SqliteOptions {
        synchronous: if options.sync_full {
            Synchronous::Full
        } else {
            Synchronous::Normal
        },
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(dir.path().join("tasks.db"), &sqlite)
        .await
        .unwrap();
    Arc::new(store)
}

/// A started engine over the workload's store, timed when `--breakdown` was given.
pub async fn build(
    options: &Options,
    dir: &tempfile::TempDir,
    config: mai_core::config::Config,
    model: Arc<dyn ChatModel>,
    host: Arc<NullHost>,
) -> Arc<Engine> {
    let store = store(options, dir).await;
    match &options.timings {
        None => support::engine_over(store, config, model, host).await,
        Some(timings) => {
            let store = TimedStore {
                inner: store,
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
pub fn print_breakdown(options: &Options, label: &str, units: f64, unit: &str) {
    let Some(timings) = &options.timings else {
        return;
    };
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

/// Forgets the timings collected so far (a warm-up's), with `--breakdown`.
pub fn reset_breakdown(options: &Options) {
    if let Some(timings) = &options.timings {
        timings.reset();
    }
}

/// An agent task with a title given, so no title call is made.
pub fn agent_task(title: &str) -> CreateTask {
    let mut request = CreateTask::agent("check the disk usage of every volume and report");
    request.title = Some(title.to_owned());
    request
}
