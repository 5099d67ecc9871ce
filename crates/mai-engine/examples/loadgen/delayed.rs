//! Workload (d): delayed task latency, due time → running. Owns its engine and its figure; must
//! not share state with others.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mai_core::task::{TaskLevel, TaskStatus, Trigger};

use crate::recorder::Recorder;
use crate::support::{self, InstantModel, NullHost, Script};
use crate::{Options, agent_task, build, print_breakdown};

/// Runs (d) with `tasks` delayed tasks created 0–`max_gap_ms` ms apart and prints its figure.
pub async fn run(options: &Options, tasks: usize, max_gap_ms: u64) {
    let dir = tempfile::tempdir().unwrap();
    let engine = build(
        options,
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
        tokio::time::sleep(creation_gap(i, max_gap_ms)).await;
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
    print_breakdown(options, "(d)", tasks as f64, "task");
    engine.stop().await;
}

/// The pause after the `i`-th creation of (d): spread over 0..=`max_gap_ms`, the same sequence
/// every run, so due times do not arrive in lockstep.
pub fn creation_gap(i: usize, max_gap_ms: u64) -> Duration {
    Duration::from_millis((i as u64 * 7919) % (max_gap_ms + 1))
}
