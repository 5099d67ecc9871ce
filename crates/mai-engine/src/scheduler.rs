//! Scheduling primitives: the ready queue with its concurrency slots, and the timer set that
//! wakes scheduled tasks and expires unanswered questions.
//!
//! The queue is the single guard against double dispatch: a task id is either queued, active
//! (dispatched and not finished) or neither, and every move between those happens under one
//! lock, with the slot reserved before the lock is released — before any await. Timers are one
//! sleeper over an ordered set, not a polling loop: a tokio task (the runtime's timers round up
//! to the millisecond, twice: a due entry fires 1–2 ms late) or, where that matters (tasks
//! falling due), a thread of its own that sleeps to the microsecond.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use mai_core::clock::Clock;
use mai_core::task::TaskId;

use crate::run::lock;

#[derive(Debug, PartialEq, Eq)]
struct Ready {
    priority: i32,
    seq: u64,
    id: TaskId,
}

impl Ord for Ready {
    /// Higher priority first, then first come first served.
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Default)]
struct QueueState {
    heap: BinaryHeap<Ready>,
    queued: HashSet<TaskId>,
    active: HashSet<TaskId>,
    /// Active tasks queued again while running (an answer arrived while the asking run was
    /// still finishing): queued as soon as their slot is freed, never run concurrently.
    rerun: std::collections::HashMap<TaskId, i32>,
    next_seq: u64,
}

impl QueueState {
    fn enqueue(&mut self, id: TaskId, priority: i32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued.insert(id);
        self.heap.push(Ready { priority, seq, id });
    }
}

/// Tasks ready to run, and the slots of those running.
#[derive(Debug, Default)]
pub(crate) struct ReadyQueue {
    state: Mutex<QueueState>,
}

impl ReadyQueue {
    /// Queues `id` unless it is already queued. An active task is queued again only once its
    /// current run finishes. Returns whether it was queued now.
    pub(crate) fn push(&self, id: TaskId, priority: i32) -> bool {
        let mut state = lock(&self.state);
        if state.active.contains(&id) {
            state.rerun.insert(id, priority);
            return false;
        }
        if state.queued.contains(&id) {
            return false;
        }
        state.enqueue(id, priority);
        true
    }

    /// Removes `id` from the queue if it is waiting there (cancel before dispatch).
    pub(crate) fn remove(&self, id: TaskId) -> bool {
        let mut state = lock(&self.state);
        if state.queued.remove(&id) {
            state.heap.retain(|r| r.id != id);
            true
        } else {
            false
        }
    }

    /// Takes as many tasks as free slots allow (`max_active` in total), marking each active:
    /// its slot is reserved before this returns.
    pub(crate) fn take_dispatchable(&self, max_active: usize) -> Vec<TaskId> {
        let mut state = lock(&self.state);
        let mut taken = Vec::new();
        while state.active.len() < max_active {
            let Some(ready) = state.heap.pop() else { break };
            state.queued.remove(&ready.id);
            state.active.insert(ready.id);
            taken.push(ready.id);
        }
        taken
    }

    /// Reserves a slot for `id` outside the queue (a due task claimed at once) if one is free
    /// and `id` is neither queued nor active; `false` leaves everything as it was.
    pub(crate) fn try_reserve(&self, id: TaskId, max_active: usize) -> bool {
        let mut state = lock(&self.state);
        if state.active.len() >= max_active
            || !state.heap.is_empty()
            || state.active.contains(&id)
            || state.queued.contains(&id)
        {
            return false;
        }
        state.active.insert(id);
        true
    }

    /// Frees the slot of a finished (or suspended) task, queueing it again if it was pushed
    /// while it ran.
    pub(crate) fn finish(&self, id: TaskId) {
        let mut state = lock(&self.state);
        state.active.remove(&id);
        if let Some(priority) = state.rerun.remove(&id) {
            state.enqueue(id, priority);
        }
    }

    pub(crate) fn active_count(&self) -> usize {
        lock(&self.state).active.len()
    }

    pub(crate) fn queued_count(&self) -> usize {
        lock(&self.state).queued.len()
    }
}

#[derive(Debug, Default)]
struct TimerState {
    due: BTreeSet<(DateTime<Utc>, TaskId)>,
    by_id: HashMap<TaskId, DateTime<Utc>>,
    /// The timer thread must end (its stop token was cancelled or its runtime is gone).
    ended: bool,
}

/// A set of (due time, task) entries fired by one sleeper (a task or a thread).
pub(crate) struct Timers {
    state: Mutex<TimerState>,
    /// Wakes the sleeping task.
    changed: Notify,
    /// Wakes the sleeping thread.
    changed_thread: Condvar,
    clock: Arc<dyn Clock>,
}

/// Ends the timer thread when dropped: held by a task of the runtime the thread fires into,
/// which ends with the stop token or with the runtime.
struct EndThread(Arc<Timers>);

impl Drop for EndThread {
    fn drop(&mut self) {
        lock(&self.0.state).ended = true;
        self.0.changed_thread.notify_all();
    }
}

impl Timers {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Timers {
            state: Mutex::new(TimerState::default()),
            changed: Notify::new(),
            changed_thread: Condvar::new(),
            clock,
        }
    }

    /// Arms (or re-arms) the timer of `id`. Idempotent for the same time.
    pub(crate) fn arm(&self, id: TaskId, at: DateTime<Utc>) {
        let mut state = lock(&self.state);
        if let Some(old) = state.by_id.insert(id, at) {
            state.due.remove(&(old, id));
        }
        state.due.insert((at, id));
        drop(state);
        self.wake();
    }

    /// Disarms the timer of `id`; returns whether one was armed.
    pub(crate) fn disarm(&self, id: TaskId) -> bool {
        let mut state = lock(&self.state);
        match state.by_id.remove(&id) {
            Some(at) => {
                state.due.remove(&(at, id));
                true
            }
            None => false,
        }
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.state).by_id.len()
    }

    /// Re-reads the clock now (a test clock was advanced).
    pub(crate) fn wake(&self) {
        self.changed.notify_one();
        self.changed_thread.notify_all();
    }

    /// Removes and returns every entry due at `now`, and the next due time.
    fn take_due(&self, now: DateTime<Utc>) -> (Vec<TaskId>, Option<DateTime<Utc>>) {
        take_due(&mut lock(&self.state), now)
    }

    /// Fires due entries through `fire` until `stop` is cancelled. Each firing runs as its own
    /// task, so a burst of due entries is handled in parallel, not one store round trip after
    /// another.
    pub(crate) async fn run<F, Fut>(self: Arc<Self>, stop: CancellationToken, fire: F)
    where
        F: Fn(TaskId) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            // Register interest before reading the state, so an `arm` between the read and the
            // sleep still wakes us.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (fired, next) = self.take_due(self.clock.now());
            for id in fired {
                tokio::spawn(fire(id));
            }
            let wait = next.map(|at| {
                (at - self.clock.now())
                    .to_std()
                    .unwrap_or(std::time::Duration::ZERO)
            });
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = &mut changed => {}
                _ = async {
                    match wait {
                        Some(duration) => tokio::time::sleep(duration).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }

    /// Like [`Timers::run`], on a thread of its own named `name`: it sleeps on a condition
    /// variable to the microsecond (the runtime's timers round up to whole milliseconds) and
    /// spawns each firing on the current runtime. Ends with `stop`, or with the runtime. Must
    /// be called inside a runtime; `Err` when the thread cannot be started.
    pub(crate) fn run_on_thread<F, Fut>(
        self: Arc<Self>,
        name: &str,
        stop: CancellationToken,
        fire: F,
    ) -> std::io::Result<()>
    where
        F: Fn(TaskId) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::current();
        let (timers, fire_on) = (self.clone(), runtime.clone());
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || timers.sleep_and_fire(&fire_on, fire))?;
        let end = EndThread(self);
        runtime.spawn(async move {
            let _end = end;
            stop.cancelled().await;
        });
        Ok(())
    }

    /// The timer thread: fires what is due, then sleeps until the next entry is due or the
    /// set changes, until it is told to end.
    fn sleep_and_fire<F, Fut>(&self, runtime: &tokio::runtime::Handle, fire: F)
    where
        F: Fn(TaskId) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut state = lock(&self.state);
        while !state.ended {
            let (fired, next) = take_due(&mut state, self.clock.now());
            if !fired.is_empty() {
                drop(state);
                for id in fired {
                    runtime.spawn(fire(id));
                }
                state = lock(&self.state);
                continue;
            }
            state = match next {
                Some(at) => {
                    let wait = (at - self.clock.now())
                        .to_std()
                        .unwrap_or(std::time::Duration::ZERO);
                    self.sleep(state, Some(wait))
                }
                None => self.sleep(state, None),
            };
        }
    }

    /// Waits on the thread's condition variable (at most `wait`), releasing `state` meanwhile.
    fn sleep<'a>(
        &self,
        state: MutexGuard<'a, TimerState>,
        wait: Option<std::time::Duration>,
    ) -> MutexGuard<'a, TimerState> {
        // As with `lock`: a panic elsewhere leaves the set consistent (single inserts/removes).
        match wait {
            Some(wait) => match self.changed_thread.wait_timeout(state, wait) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            },
            None => self
                .changed_thread
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        }
    }
}

/// Removes and returns every entry of `state` due at `now`, and the next due time.
fn take_due(state: &mut TimerState, now: DateTime<Utc>) -> (Vec<TaskId>, Option<DateTime<Utc>>) {
    let mut fired = Vec::new();
    while let Some(&(at, id)) = state.due.first() {
        if at > now {
            break;
        }
        state.due.pop_first();
        state.by_id.remove(&id);
        fired.push(id);
    }
    let next = state.due.first().map(|&(at, _)| at);
    (fired, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_priority_first_then_fifo_and_no_double_queueing() {
        let queue = ReadyQueue::default();
        let ids: Vec<TaskId> = (0..5).map(|_| TaskId::new()).collect();
        assert!(queue.push(ids[0], 0));
        assert!(queue.push(ids[1], 5));
        assert!(queue.push(ids[2], 0));
        assert!(queue.push(ids[3], 5));
        assert!(!queue.push(ids[0], 9), "already queued");
        assert_eq!(queue.take_dispatchable(3), vec![ids[1], ids[3], ids[0]]);
        assert!(
            !queue.push(ids[3], 0),
            "an active task is not queued while it runs"
        );
        assert_eq!(
            queue.take_dispatchable(3),
            Vec::<TaskId>::new(),
            "no free slot"
        );
        queue.finish(ids[1]);
        assert!(queue.remove(ids[2]));
        assert!(queue.push(ids[4], -1));
        assert_eq!(queue.take_dispatchable(3), vec![ids[4]]);
        queue.finish(ids[3]);
        assert_eq!(
            queue.queued_count(),
            1,
            "pushed while active: queued once it finished"
        );
        queue.finish(ids[4]);
        assert_eq!(queue.take_dispatchable(3), vec![ids[3]]);
        assert_eq!(queue.active_count(), 2);
        assert_eq!(queue.queued_count(), 0);
    }

    /// Arms three entries, disarms one, and checks the other two fire in order through the
    /// sleeper `start` runs, then that it ends with its stop token.
    async fn fire_in_order_and_never_the_disarmed(
        start: impl FnOnce(Arc<Timers>, CancellationToken, tokio::sync::mpsc::UnboundedSender<TaskId>),
    ) {
        let clock: Arc<dyn Clock> = Arc::new(mai_core::clock::SystemClock);
        let timers = Arc::new(Timers::new(clock.clone()));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        start(timers.clone(), stop.clone(), tx);
        let now = clock.now();
        let (a, b, c) = (TaskId::new(), TaskId::new(), TaskId::new());
        timers.arm(b, now + chrono::Duration::milliseconds(40));
        timers.arm(a, now + chrono::Duration::milliseconds(20));
        timers.arm(c, now + chrono::Duration::milliseconds(30));
        assert!(timers.disarm(c));
        assert_eq!(rx.recv().await, Some(a));
        assert!(
            clock.now() >= now + chrono::Duration::milliseconds(20),
            "not early"
        );
        assert_eq!(rx.recv().await, Some(b));
        assert_eq!(timers.len(), 0);
        stop.cancel();
        // The sleeper ends and drops its `fire` (and with it the sender).
        assert_eq!(rx.recv().await, None, "the disarmed timer never fired");
    }

    fn send_on_fire(
        tx: tokio::sync::mpsc::UnboundedSender<TaskId>,
    ) -> impl Fn(TaskId) -> std::future::Ready<()> + Send + 'static {
        move |id| {
            let _ = tx.send(id);
            std::future::ready(())
        }
    }

    #[tokio::test]
    async fn timers_fire_in_order_and_disarmed_ones_never_fire() {
        fire_in_order_and_never_the_disarmed(|timers, stop, tx| {
            tokio::spawn(timers.run(stop, send_on_fire(tx)));
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timers_on_their_thread_fire_in_order_and_end_with_the_stop_token() {
        fire_in_order_and_never_the_disarmed(|timers, stop, tx| {
            timers
                .run_on_thread("test-timers", stop, send_on_fire(tx))
                .unwrap();
        })
        .await;
    }
}
