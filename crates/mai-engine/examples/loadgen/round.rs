//! Workload (a): runtime overhead per agent round, one task at a time, an in-process instant
//! model and a no-op tool. Owns its engine and its figure; must not share state with others.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mai_core::task::TaskStatus;

use crate::support::{self, InstantModel, NullHost, Script};
use crate::{Options, agent_task, build, print_breakdown, reset_breakdown};

/// Tool rounds per task in workload (a).
const ROUNDS: usize = 50;

/// Runs (a) with `tasks` tasks after one warm-up and prints its figure.
pub async fn run(options: &Options, tasks: usize) {
    let dir = tempfile::tempdir().unwrap();
    let engine = build(
        options,
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
    reset_breakdown(options);
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
        "(a) round: {tasks} tasks × {ROUNDS} no-op tool rounds (+ answer), {}: \
         {:.3} ms/round mean, {:.3} ms/round median task (target ≤ 0.1 ms; original 5.06 ms)",
        options.store_label(),
        per_round(total / tasks as u32),
        per_round(per_task[per_task.len() / 2]),
    );
    print_breakdown(options, "(a)", (tasks * ROUNDS) as f64, "round");
    engine.stop().await;
}
