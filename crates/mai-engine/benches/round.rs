//! Runtime overhead per agent round (workload (a) of BENCHMARKS.md): one agent task whose
//! in-process model calls a no-op tool for `ROUNDS` rounds and then answers, checkpointed on a
//! SQLite file. Reported time is per round (total task time / rounds), from `create` to the
//! task's `completed` status event. Target: ≤ 0.2 ms per round.
//!
//! Run: `cargo bench -p mai-engine --bench round`
#![allow(clippy::unwrap_used, clippy::expect_used)] // benchmark setup panics on failure

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mai_core::task::TaskStatus;
use mai_engine::CreateTask;

use support::{InstantModel, NullHost, Script};

/// Tool rounds per task; the final answer is one more model call.
const ROUNDS: usize = 50;

fn round(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = runtime.block_on(support::engine(
        &dir.path().join("tasks.db"),
        support::bench_config(ROUNDS as u32 + 10),
        InstantModel::new(Script::ToolRounds(ROUNDS)),
        std::sync::Arc::new(NullHost::default()),
    ));
    let caller = support::caller("qq:group:1");

    let mut group = c.benchmark_group("agent round");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function(
        format!("per round: {ROUNDS} no-op tool rounds + answer, SQLite file"),
        |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let engine = engine.clone();
                let caller = caller.clone();
                async move {
                    let mut events = engine.subscribe();
                    let started = Instant::now();
                    for _ in 0..iters {
                        let mut request = CreateTask::agent("check the disk usage of every volume");
                        request.title = Some("disk usage".into());
                        let task = engine.create(&caller, request).await.unwrap();
                        support::wait_status(&engine, &mut events, task.id, TaskStatus::Completed)
                            .await;
                    }
                    started.elapsed() / ROUNDS as u32
                }
            });
        },
    );
    group.finish();
    runtime.block_on(engine.stop());
}

criterion_group!(benches, round);
criterion_main!(benches);
