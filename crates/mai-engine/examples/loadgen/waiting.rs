//! Workload (c): resident memory per task waiting in `ask_user`. Owns its engine and its
//! figure; must not share state with others.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::{self, InstantModel, NullHost, Script};
use crate::{Options, agent_task, build};

/// Runs (c) with `tasks` tasks per measured batch and prints its figure.
pub async fn run(options: &Options, tasks: usize) {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(NullHost::default());
    let engine = build(
        options,
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
