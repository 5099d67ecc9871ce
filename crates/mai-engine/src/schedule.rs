//! The scheduling state: which tasks are queued, which run (and how to stop them), which are
//! due later, which wait for an answer (and until when), which have instructions their loop
//! has not read, and which were created here and have not run yet (so have no history). One
//! type, its fields private: every change that must move two of these together (a question
//! registered with its timeout; a finished run's control dropped with its slot) is one method
//! here, so no caller can leave them out of step.
//!
//! Must not: touch the store, the model or the host. Owners of those decide *what* happens;
//! this type only remembers *who is where*.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use mai_core::clock::Clock;
use mai_core::ids::{PersonId, StreamId};
use mai_core::task::{TaskId, TaskRecord};

use crate::run::{RunControl, StopReason, lock};
use crate::scheduler::{ReadyQueue, Timers};

/// At most this many fresh tasks are remembered (see [`Schedule::mark_fresh`]).
const FRESH_KEPT: usize = 4096;

/// The engine's scheduling state (see the module comment).
pub(crate) struct Schedule {
    queue: ReadyQueue,
    running: Mutex<HashMap<TaskId, RunControl>>,
    /// Scheduled tasks, fired when due.
    due: Arc<Timers>,
    /// Questions, fired when their answer is overdue.
    questions: Arc<Timers>,
    waiting: Mutex<WaitingIndex>,
    /// Tasks with injected instructions not yet read by their loop.
    injected: Mutex<HashSet<TaskId>>,
    /// Agent tasks created here that have not run: their history is empty unless instructions
    /// were injected (see [`Schedule::take_fresh`]).
    fresh: Mutex<HashSet<TaskId>>,
    /// Tasks a claim found the cluster full for, waiting for a running task to end anywhere.
    parked: Mutex<Parked>,
}

/// Tasks refused a claim by the cluster-wide cap (`[task] cluster_max_running`), with their
/// priorities, and how many times a running task was heard to end: a refusal that raced an end
/// (counted before the claim, seen changed after) is queued again at once, not parked.
#[derive(Debug, Default)]
struct Parked {
    tasks: HashMap<TaskId, i32>,
    ends: u64,
}

/// How busy the engine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LoadFigures {
    pub running: usize,
    pub queued: usize,
    pub scheduled: usize,
    pub waiting: usize,
}

impl Schedule {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Schedule {
            queue: ReadyQueue::default(),
            running: Mutex::new(HashMap::new()),
            due: Arc::new(Timers::new(clock.clone())),
            questions: Arc::new(Timers::new(clock)),
            waiting: Mutex::new(WaitingIndex::default()),
            injected: Mutex::new(HashSet::new()),
            fresh: Mutex::new(HashSet::new()),
            parked: Mutex::new(Parked::default()),
        }
    }

    /// Starts the two timer loops until `stop`: `on_due` for scheduled tasks, `on_timeout` for
    /// unanswered questions.
    pub(crate) fn start_timers<D, DF, Q, QF>(
        &self,
        stop: CancellationToken,
        on_due: D,
        on_timeout: Q,
    ) where
        D: Fn(TaskId) -> DF + Clone + Send + 'static,
        DF: Future<Output = ()> + Send + 'static,
        Q: Fn(TaskId) -> QF + Send + 'static,
        QF: Future<Output = ()> + Send + 'static,
    {
        // Due tasks on a thread of their own: the runtime's timers would start them 1–2 ms late.
        let due = self.due.clone();
        if let Err(error) =
            due.clone()
                .run_on_thread("mai-due-timers", stop.clone(), on_due.clone())
        {
            tracing::warn!(%error, "no thread for the due timers; they fire on the runtime's timers");
            tokio::spawn(due.run(stop.clone(), on_due));
        }
        tokio::spawn(self.questions.clone().run(stop, on_timeout));
    }

    /// Tells the timers the clock jumped.
    pub(crate) fn clock_changed(&self) {
        self.due.wake();
        self.questions.wake();
    }

    pub(crate) fn figures(&self) -> LoadFigures {
        LoadFigures {
            running: self.queue.active_count(),
            queued: self.queue.queued_count() + lock(&self.parked).tasks.len(),
            scheduled: self.due.len(),
            waiting: lock(&self.waiting).len(),
        }
    }

    // The ready queue and its slots.

    /// Queues `id` (see [`ReadyQueue::push`]).
    pub(crate) fn queue(&self, id: TaskId, priority: i32) {
        self.queue.push(id, priority);
    }

    /// Takes as many queued tasks as free slots allow, each with its slot reserved.
    pub(crate) fn take_dispatchable(&self, max_active: usize) -> Vec<TaskId> {
        self.queue.take_dispatchable(max_active)
    }

    /// Reserves a slot for a due task claimed at once (see [`ReadyQueue::try_reserve`]).
    pub(crate) fn try_reserve(&self, id: TaskId, max_active: usize) -> bool {
        self.queue.try_reserve(id, max_active)
    }

    // Tasks waiting for a slot of the cluster.

    /// How many times a running task was heard to end so far (read before a capped claim).
    pub(crate) fn cluster_ends(&self) -> u64 {
        lock(&self.parked).ends
    }

    /// Parks `id`, whose claim found the cluster full, until a running task ends; queued at
    /// once instead if one ended since `ends` was read (the claim may have counted it).
    pub(crate) fn park(&self, id: TaskId, priority: i32, ends: u64) {
        let mut parked = lock(&self.parked);
        if parked.ends == ends {
            parked.tasks.insert(id, priority);
            return;
        }
        drop(parked);
        self.queue(id, priority);
    }

    /// A running task ended somewhere (or the cap changed, or notices were lost): every parked
    /// task is queued again to try its claim.
    pub(crate) fn cluster_slot_freed(&self) {
        let mut parked = lock(&self.parked);
        parked.ends += 1;
        let tasks = std::mem::take(&mut parked.tasks);
        drop(parked);
        for (id, priority) in tasks {
            self.queue(id, priority);
        }
    }

    // Running tasks.

    /// Registers the control of a run starting for `id` (a stop from now on finds it).
    pub(crate) fn run_started(&self, id: TaskId, control: RunControl) {
        lock(&self.running).insert(id, control);
    }

    /// Drops the control of a run that ran in another task's slot (an inline reply).
    pub(crate) fn run_ended(&self, id: TaskId) {
        lock(&self.running).remove(&id);
    }

    /// A dispatched run is over: its control goes and its slot is freed (re-queueing the task
    /// if it was pushed while it ran).
    pub(crate) fn slot_freed(&self, id: TaskId) {
        lock(&self.running).remove(&id);
        lock(&self.fresh).remove(&id);
        self.queue.finish(id);
    }

    /// The control of `id`'s run, if it runs here.
    pub(crate) fn control(&self, id: TaskId) -> Option<RunControl> {
        lock(&self.running).get(&id).cloned()
    }

    /// Asks every running task to stop for `reason`.
    pub(crate) fn stop_all(&self, reason: &StopReason) {
        let controls: Vec<RunControl> = lock(&self.running).values().cloned().collect();
        for control in controls {
            control.stop(reason.clone());
        }
    }

    // Timers of scheduled tasks.

    pub(crate) fn arm_due(&self, id: TaskId, at: DateTime<Utc>) {
        self.due.arm(id, at);
    }

    /// `id` leaves every place it could start from (queue, due timer, question): it was
    /// cancelled or paused.
    pub(crate) fn withdraw(&self, id: TaskId) {
        self.due.disarm(id);
        self.queue.remove(id);
        lock(&self.parked).tasks.remove(&id);
        self.forget_question(id);
    }

    /// `id` no longer waits and is not queued (a stop applied to a waiting task).
    pub(crate) fn withdraw_waiting(&self, id: TaskId) {
        self.forget_question(id);
        self.queue.remove(id);
    }

    /// Removes `id` from the queue (a reply withdrawn before it ran).
    pub(crate) fn unqueue(&self, id: TaskId) {
        self.queue.remove(id);
    }

    // Questions.

    /// Makes `task` answerable by its requester's next message, and arms its timeout at
    /// `deadline`. Idempotent.
    pub(crate) fn await_answer(&self, task: &TaskRecord, deadline: DateTime<Utc>) {
        lock(&self.waiting).register(task);
        self.questions.arm(task.id, deadline);
    }

    /// Drops a task's question (index entry and timeout); returns whether it was registered.
    pub(crate) fn forget_question(&self, id: TaskId) -> bool {
        self.questions.disarm(id);
        lock(&self.waiting).remove(id)
    }

    /// Takes the oldest task waiting for `person` in `stream`, its timeout disarmed.
    pub(crate) fn take_answerable(&self, person: &PersonId, stream: &StreamId) -> Option<TaskId> {
        let id = lock(&self.waiting).take_oldest(person, stream)?;
        self.questions.disarm(id);
        Some(id)
    }

    /// Puts back a task taken by [`Schedule::take_answerable`] whose answer could not be
    /// recorded, so the next message can answer it.
    pub(crate) fn put_back_answerable(&self, id: TaskId, person: PersonId, stream: StreamId) {
        lock(&self.waiting).register_for(id, person, stream);
    }

    /// A question's timeout fired: whether it still waited (then the caller owns the wake).
    pub(crate) fn question_expired(&self, id: TaskId) -> bool {
        lock(&self.waiting).remove(id)
    }

    // Injected instructions.

    pub(crate) fn mark_injected(&self, id: TaskId) {
        lock(&self.injected).insert(id);
    }

    /// Whether `id` had unread instructions (they are read now).
    pub(crate) fn take_injected(&self, id: TaskId) -> bool {
        lock(&self.injected).remove(&id)
    }

    // Fresh tasks.

    /// Notes that agent task `id` was just created here, with no history. Forgetting one
    /// costs only a read of its (empty) history, so the set is emptied rather than let grow
    /// with tasks that never run.
    pub(crate) fn mark_fresh(&self, id: TaskId) {
        let mut fresh = lock(&self.fresh);
        if fresh.len() >= FRESH_KEPT {
            fresh.clear();
        }
        fresh.insert(id);
    }

    /// Whether `id` was created here and has not run since (forgotten now).
    pub(crate) fn take_fresh(&self, id: TaskId) -> bool {
        lock(&self.fresh).remove(&id)
    }
}

/// Tasks waiting for their requester's answer, per (requester, stream), oldest first. A task
/// that acts for nobody is not here: only the planner, its requester or an admin can answer it.
#[derive(Debug, Default)]
struct WaitingIndex {
    by_chat: HashMap<(PersonId, StreamId), VecDeque<TaskId>>,
    chat_of: HashMap<TaskId, (PersonId, StreamId)>,
}

impl WaitingIndex {
    /// Makes `task` answerable by its requester's next message in its stream.
    fn register(&mut self, task: &TaskRecord) {
        let Some(person) = task.requester() else {
            return;
        };
        self.register_for(task.id, person.clone(), task.stream_id.clone());
    }

    fn register_for(&mut self, id: TaskId, person: PersonId, stream: StreamId) {
        if self.chat_of.contains_key(&id) {
            return;
        }
        self.by_chat
            .entry((person.clone(), stream.clone()))
            .or_default()
            .push_back(id);
        self.chat_of.insert(id, (person, stream));
    }

    /// Takes the oldest task waiting in this chat: exactly one reply wakes exactly one task.
    fn take_oldest(&mut self, person: &PersonId, stream: &StreamId) -> Option<TaskId> {
        let key = (person.clone(), stream.clone());
        let queue = self.by_chat.get_mut(&key)?;
        let id = queue.pop_front();
        if queue.is_empty() {
            self.by_chat.remove(&key);
        }
        if let Some(id) = id {
            self.chat_of.remove(&id);
        }
        id
    }

    /// Removes `id`; returns whether it was waiting (the caller that removes it owns the wake).
    fn remove(&mut self, id: TaskId) -> bool {
        let Some(key) = self.chat_of.remove(&id) else {
            return false;
        };
        if let Some(queue) = self.by_chat.get_mut(&key) {
            queue.retain(|t| *t != id);
            if queue.is_empty() {
                self.by_chat.remove(&key);
            }
        }
        true
    }

    fn len(&self) -> usize {
        self.chat_of.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use mai_core::clock::SystemClock;

    #[test]
    fn a_forgotten_question_leaves_neither_its_index_entry_nor_its_timer() {
        let schedule = Schedule::new(Arc::new(SystemClock));
        let id = TaskId(uuid::Uuid::now_v7());
        let person = PersonId::new("qq", "1").unwrap();
        let stream = StreamId::new("s").unwrap();
        schedule.put_back_answerable(id, person.clone(), stream.clone());
        schedule.questions.arm(id, Utc::now());
        assert_eq!(schedule.figures().waiting, 1);
        assert!(schedule.forget_question(id));
        assert_eq!(schedule.figures().waiting, 0);
        assert!(!schedule.questions.disarm(id));
        assert_eq!(schedule.take_answerable(&person, &stream), None);
    }

    #[test]
    fn a_freed_slot_drops_the_runs_control_too() {
        let schedule = Schedule::new(Arc::new(SystemClock));
        let id = TaskId(uuid::Uuid::now_v7());
        assert!(schedule.try_reserve(id, 1));
        schedule.run_started(id, RunControl::default());
        assert!(schedule.control(id).is_some());
        schedule.slot_freed(id);
        assert!(schedule.control(id).is_none());
        assert_eq!(schedule.figures().running, 0);
    }
}
