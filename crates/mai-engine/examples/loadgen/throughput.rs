//! Workload (b), in the original's shape: an admin creates 2 warm-up agent tasks and waits for
//! them and their replies; then creates 200 agent tasks one after another (each create awaits
//! its title from the model), each 5 echo-tool rounds then an answer whose reply the model
//! polishes, 4 concurrent tasks; the clock runs from the first create to the 200th agent
//! completion. Owns its engine and its figure; must not share state with other workloads.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mai_core::config::Config;
use mai_core::ids::{PersonId, StreamId};
use mai_core::model::ChatModel;
use mai_core::role::Role;
use mai_core::task::TaskStatus;
use mai_engine::Engine;
use mai_engine::{Caller, CreateTask};
use mai_llm::{LlmConfig, OpenAiClient};

use crate::echo::{self, InstantEcho};
use crate::fake_openai::{self, Served};
use crate::recorder::Recorder;
use crate::support::{self, NullHost};
use crate::{Options, build, print_breakdown, reset_breakdown};

/// Warm-up tasks before the clock starts, as the original's benchmark has them.
const WARM_UP: usize = 2;
/// Tasks running at once.
const CONCURRENT: u32 = 4;

/// Where the model calls are counted: agent calls, and the others (titles, polish).
enum Calls {
    Http(Arc<Served>),
    Instant(Arc<InstantEcho>),
}

impl Calls {
    fn now(&self) -> (usize, usize) {
        match self {
            Calls::Http(served) => (
                served.agent.load(Ordering::Relaxed),
                served.other.load(Ordering::Relaxed),
            ),
            Calls::Instant(model) => (
                model.agent_calls.load(Ordering::Relaxed),
                model.other_calls.load(Ordering::Relaxed),
            ),
        }
    }
}

/// The model (b) runs against: `OpenAiClient` to the fake server, or the instant one.
async fn model(options: &Options) -> (Arc<dyn ChatModel>, Calls, &'static str) {
    if options.instant_model {
        let model = Arc::new(InstantEcho::default());
        return (
            model.clone(),
            Calls::Instant(model),
            "in-process instant model",
        );
    }
    let (addr, served) = fake_openai::start().await;
    let client = OpenAiClient::new(LlmConfig {
        base_url: format!("http://{addr}/v1"),
        ..LlmConfig::default()
    })
    .unwrap();
    let label = "OpenAiClient → hyper on loopback";
    (Arc::new(client), Calls::Http(served), label)
}

/// The benchmark person, configured as admin, in their private chat; polish on.
fn config_and_caller() -> (Config, Caller) {
    let mut config = support::bench_config(30);
    config.task.max_concurrent_tasks = CONCURRENT;
    config.polish.enabled = true;
    let person = PersonId::new("qq", support::USER).unwrap();
    config.permission.admins = vec![format!("qq:{}", support::USER)];
    let stream = StreamId::new(format!("qq:{}", support::USER)).unwrap();
    (config, Caller::person(person, Role::Admin, stream, None))
}

/// An agent task without a title, so the engine asks the model for one.
fn request(i: i64) -> CreateTask {
    CreateTask::agent(format!("benchmark task {i}"))
}

/// When the measured tasks were all created, when the last completed and when the last reply
/// was sent, from the first create.
struct Measured {
    created: Duration,
    completed: Duration,
    delivered: Duration,
}

/// Runs (b) with `tasks` measured tasks and prints its figure.
pub async fn run(options: &Options, tasks: usize) {
    let (model, calls, label) = model(options).await;
    let (config, caller) = config_and_caller();
    let dir = tempfile::tempdir().unwrap();
    let engine = build(options, &dir, config, model, Arc::new(NullHost::default())).await;
    engine.registry().register(echo::tool());
    let recorder = Recorder::start(&engine);

    warm_up(&engine, &recorder, &caller).await;
    reset_breakdown(options);
    let before = calls.now();
    let measured = measure(&engine, &recorder, &caller, tasks).await;
    let after = calls.now();
    let per_s = |d: Duration| tasks as f64 / d.as_secs_f64();
    println!(
        "(b) http: {tasks} agent tasks × ({} echo-tool rounds + answer) after {WARM_UP} \
         warm-ups, admin, titles and reply polish by the model, via {label}, on {}, \
         {CONCURRENT} concurrent: {:.0} tasks/s to the last completion ({:.1} ms; all created after {:.1} \
         ms); {:.0} tasks/s incl. reply delivery; model calls: {} agent, {} title or polish \
         (target ≥ 1000 tasks/s over HTTP)",
        echo::ROUNDS,
        options.store_label(),
        per_s(measured.completed),
        measured.completed.as_secs_f64() * 1e3,
        measured.created.as_secs_f64() * 1e3,
        per_s(measured.delivered),
        after.0 - before.0,
        after.1 - before.1,
    );
    print_breakdown(options, "(b)", tasks as f64, "task");
    engine.stop().await;
}

/// The original's warm-up: `WARM_UP` tasks created, then awaited with their replies. Checks
/// that the tasks run as admin.
async fn warm_up(engine: &Engine, recorder: &Recorder, caller: &Caller) {
    let mut ids = Vec::with_capacity(WARM_UP);
    for i in 0..WARM_UP {
        let task = engine.create(caller, request(-1 - i as i64)).await.unwrap();
        assert_eq!(engine.task_role(&task), Role::Admin, "(b) runs as admin");
        ids.push(task.id);
    }
    recorder
        .wait_until("the warm-up tasks and their replies", |seen| {
            seen.sent >= WARM_UP
                && ids
                    .iter()
                    .all(|id| seen.status.contains_key(&(*id, TaskStatus::Completed)))
        })
        .await;
}

/// Creates `tasks` tasks one after another and waits for their completions and replies.
async fn measure(engine: &Engine, recorder: &Recorder, caller: &Caller, tasks: usize) -> Measured {
    let sent_before = recorder.seen.lock().unwrap().sent;
    let started = Instant::now();
    // The creating loop is a task on the runtime, as an HTTP handler or a chat door is (on the
    // main thread's `block_on` every await woke a thread outside the runtime).
    let creator = {
        let (engine, caller) = (engine.clone(), caller.clone());
        tokio::spawn(async move {
            let mut ids = Vec::with_capacity(tasks);
            for i in 0..tasks {
                ids.push(engine.create(&caller, request(i as i64)).await.unwrap().id);
            }
            (ids, started.elapsed())
        })
    };
    let (ids, created) = creator.await.unwrap();
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
        .wait_until("every reply sent", |seen| seen.sent >= sent_before + tasks)
        .await;
    let last_sent = recorder.seen.lock().unwrap().last_sent.unwrap();
    Measured {
        created,
        completed: last_completed - started,
        delivered: last_sent - started,
    }
}
