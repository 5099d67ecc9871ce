//! Checkpoints overlap the next model call (see docs/design.md, "The agent loop and
//! checkpoints"): a round's last tool result is written while the model is asked for the next
//! round, and that write is durable before any tool of the next round runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::*;
use mai_core::config::LiveConfig;
use mai_core::model::{ChatRequest, ChatResponse, MessageRole, ToolCall};
use mai_core::role::Role;
use mai_core::store::{
    CountQuery, HistoryEntry, NewHistoryEntry, Resolved, SaveOutcome, StoreError, TaskCounts,
    TaskFilter, TaskStore, TaskWrite,
};
use mai_core::task::{TaskId, TaskRecord, TaskStatus};
use mai_core::tool::{
    ToolContext, ToolDefinition, ToolError, ToolHandler, ToolRegistry, Visibility,
};
use mai_engine::CreateTask;
use mai_engine::Prompts;
use mai_engine::{Engine, EngineDeps};
use mai_store::SqliteStore;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

/// A store whose first checkpoint starts, then waits until the test opens its gate.
struct GatedStore {
    inner: SqliteStore,
    /// Whether the next checkpoint is the gated one.
    gate_next: AtomicBool,
    gate: Arc<Semaphore>,
    /// The gated checkpoint has started (is waiting at the gate or past it).
    started: Arc<AtomicBool>,
    /// The gated checkpoint is written.
    done: Arc<AtomicBool>,
}

#[async_trait]
impl TaskStore for GatedStore {
    async fn insert(&self, task: &TaskRecord) -> Result<(), StoreError> {
        self.inner.insert(task).await
    }
    async fn save(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
    ) -> Result<SaveOutcome, StoreError> {
        self.inner.save(task, expected).await
    }
    async fn checkpoint(
        &self,
        task: &TaskRecord,
        expected: Option<TaskStatus>,
        history: &[NewHistoryEntry],
    ) -> Result<SaveOutcome, StoreError> {
        if !self.gate_next.swap(false, Ordering::SeqCst) {
            return self.inner.checkpoint(task, expected, history).await;
        }
        self.started.store(true, Ordering::SeqCst);
        let _permit = self.gate.acquire().await.unwrap();
        let outcome = self.inner.checkpoint(task, expected, history).await;
        self.done.store(true, Ordering::SeqCst);
        outcome
    }
    async fn write(&self, writes: &[TaskWrite<'_>]) -> Result<SaveOutcome, StoreError> {
        self.inner.write(writes).await
    }
    async fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        self.inner.get(id).await
    }
    async fn resolve(&self, reference: &str) -> Result<Resolved, StoreError> {
        self.inner.resolve(reference).await
    }
    async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner.list(filter).await
    }
    async fn counts(&self, query: &CountQuery<'_>) -> Result<TaskCounts, StoreError> {
        self.inner.counts(query).await
    }
    async fn count_by_status(
        &self,
        filter: &TaskFilter,
    ) -> Result<Vec<(mai_core::task::TaskStatus, u64)>, StoreError> {
        self.inner.count_by_status(filter).await
    }
    async fn usage(
        &self,
        query: &mai_core::usage::UsageQuery,
    ) -> Result<Vec<mai_core::usage::UsageTotals>, StoreError> {
        self.inner.usage(query).await
    }
    async fn list_active(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner.list_active().await
    }
    async fn history(&self, id: TaskId, from_seq: u64) -> Result<Vec<HistoryEntry>, StoreError> {
        self.inner.history(id, from_seq).await
    }
    async fn append_history(
        &self,
        id: TaskId,
        entries: &[NewHistoryEntry],
    ) -> Result<(), StoreError> {
        self.inner.append_history(id, entries).await
    }
}

/// A tool that records, for each run, whether the gated checkpoint was written by then.
struct Probe {
    done: Arc<AtomicBool>,
    runs: Arc<Mutex<Vec<bool>>>,
}

#[async_trait]
impl ToolHandler for Probe {
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        self.runs
            .lock()
            .unwrap()
            .push(self.done.load(Ordering::SeqCst));
        Ok(json!({"success": true}))
    }
}

fn tool_results(req: &ChatRequest) -> usize {
    req.messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .count()
}

fn probe_call(id: &str) -> ChatResponse {
    ChatResponse::tool_calls("", vec![ToolCall::new(id, "probe", json!({}))])
}

#[tokio::test]
async fn the_next_model_call_starts_before_the_checkpoint_lands_and_no_tool_runs_until_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(Semaphore::new(0));
    let store = Arc::new(GatedStore {
        inner: SqliteStore::open(&dir.path().join("tasks.db"))
            .await
            .unwrap(),
        gate_next: AtomicBool::new(true),
        gate: gate.clone(),
        started: started.clone(),
        done: done.clone(),
    });
    let runs = Arc::new(Mutex::new(Vec::new()));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(
        ToolDefinition::new(
            "probe",
            "Probe.",
            json!({"type": "object", "properties": {}}),
            Visibility::Essential,
            Role::User,
            Arc::new(Probe {
                done: done.clone(),
                runs: runs.clone(),
            }),
        )
        .unwrap(),
    );
    // Round 2's model call reports what it saw of the round-1 checkpoint: (started, done).
    let (asked_tx, mut asked) = mpsc::unbounded_channel::<(bool, bool)>();
    let (seen_started, seen_done) = (started.clone(), done.clone());
    let model = RuleModel::new(move |req| {
        Ok(match tool_results(req) {
            0 => probe_call("p1"),
            1 => {
                let _ = asked_tx.send((
                    seen_started.load(Ordering::SeqCst),
                    seen_done.load(Ordering::SeqCst),
                ));
                probe_call("p2")
            }
            _ => ChatResponse::text("probed twice"),
        })
    });
    let engine = Engine::new(EngineDeps {
        store,
        model,
        host: Arc::new(RecordingHost::default()),
        registry,
        config: Arc::new(LiveConfig::new(test_config()).unwrap()),
        prompts: Arc::new(Prompts::embedded()),
        clock: Arc::new(mai_core::clock::SystemClock),
        files_root: None,
    })
    .await
    .unwrap();
    let mut events = engine.subscribe();
    engine.start().await.unwrap();
    let task = engine
        .create(
            &caller("user", Role::User, "s1"),
            CreateTask::agent("probe twice"),
        )
        .await
        .unwrap();

    // The model is asked for round 2 while round 1's checkpoint is still held at the gate.
    let (checkpoint_started, checkpoint_done) =
        tokio::time::timeout(std::time::Duration::from_secs(20), asked.recv())
            .await
            .expect("the model was not asked for round 2 while the checkpoint was held")
            .unwrap();
    assert!(
        checkpoint_started,
        "the checkpoint starts with the model call"
    );
    assert!(!checkpoint_done, "the model call does not wait for it");
    assert!(!done.load(Ordering::SeqCst));
    assert_eq!(
        runs.lock().unwrap().len(),
        1,
        "round 2's tool waits for round 1's checkpoint"
    );

    gate.add_permits(1);
    wait_for(&mut events, "completed", |e| {
        matches!(e, mai_engine::TaskEvent::Status { task_id, status, .. }
            if *task_id == task.id && *status == TaskStatus::Completed)
    })
    .await;
    assert_eq!(
        *runs.lock().unwrap(),
        [false, true],
        "round 2's tool ran only once round 1's result was durable"
    );
    let done_task = record(&engine, task.id).await;
    assert_eq!(done_task.metadata.answer.as_deref(), Some("probed twice"));
    // Each result checkpointed once, in order.
    let roles = message_roles(&engine, task.id).await;
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
}
