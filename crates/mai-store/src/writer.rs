//! [`Writer`]: the only way this process writes a database. It owns the write connection, the
//! write turn and the queue of writes waiting for it.
//!
//! The connection lives on a thread of its own; a write is a closure sent to that thread (one
//! hand-off per batch of writes, not one per statement) and its outcome comes back on a
//! oneshot channel once the transaction that holds it has committed. Whatever is queued when
//! the thread takes its next turn runs as one batch, in one transaction with one commit (group
//! commit): each write inside its own savepoint, so a write that fails or decides not to write
//! (a compare-and-set conflict) undoes only itself. A caller hears "written" only after the
//! `COMMIT` returned, so its write is as durable as the connection's `synchronous` setting
//! makes any commit. Between batches the thread polls its queue for 50 µs before it sleeps:
//! a task's next write often follows within microseconds, and waking a sleeping thread costs
//! more than that on a virtual machine ((a) 0.15 → 0.11 ms per round on an idle 2-core VM).
//! The caller's side has the same cost the other way: a write that finds the writer idle
//! (nothing queued, no batch running) is committed within tens of microseconds, so its caller
//! polls for the outcome briefly (see `answer`) before it sleeps ((a) about 0.19 → 0.11 ms per
//! round on an idle 2-core VM). A write queued behind others sleeps at once.
//!
//! What a transaction is belongs to the backend behind the [`Session`] trait: SQLite (a
//! `rusqlite::Connection`, see `database`) today; another database's session can sit behind
//! the same seam. This module must not know any SQL.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use tokio::sync::oneshot;

/// At most this many writes share one transaction (bounds how long a batch holds the lock).
const MAX_BATCH: usize = 64;

/// A connection the writer can run transactions on.
pub trait Session: Send + 'static {
    /// The backend's error.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Starts a transaction that holds the database's write lock from its first statement.
    fn begin(&mut self) -> Result<(), Self::Error>;
    fn commit(&mut self) -> Result<(), Self::Error>;
    fn rollback(&mut self) -> Result<(), Self::Error>;
    /// Marks where the next write of a batch starts.
    fn mark(&mut self) -> Result<(), Self::Error>;
    /// Keeps what was written since the mark.
    fn keep(&mut self) -> Result<(), Self::Error>;
    /// Undoes what was written since the mark (the rest of the transaction stays).
    fn undo(&mut self) -> Result<(), Self::Error>;
    /// Whether a transaction is still open (a database can end one on its own after an I/O
    /// error, a full disk or a lack of memory).
    fn in_transaction(&self) -> bool;
}

/// A write that could not run or commit: the database refused the transaction (or its end),
/// or the writer is gone. Nothing of the write is stored when this is returned for it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{doing}: {source}")]
pub struct WriteError {
    /// What the writer was doing: starting the transaction, committing it, …
    pub doing: &'static str,
    #[source]
    pub source: Arc<dyn std::error::Error + Send + Sync>,
}

impl WriteError {
    fn new(doing: &'static str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        WriteError {
            doing,
            source: Arc::new(source),
        }
    }

    fn gone() -> Self {
        WriteError {
            doing: "handing a write to the writer",
            source: Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(
                "the database writer has stopped (closed, or a write panicked): reopen the database",
            )),
        }
    }
}

/// One queued write: runs on the writer's thread, then hears how its transaction ended.
trait Unit<S>: Send {
    /// Runs the write; `true` to keep what it wrote.
    fn run(&mut self, session: &mut S) -> bool;
    /// Reports the outcome: `failed` is set when the transaction did not commit.
    fn finish(self: Box<Self>, failed: Option<WriteError>);
}

struct Closure<F, T, E> {
    job: Option<F>,
    result: Option<Result<T, E>>,
    reply: oneshot::Sender<Result<Result<T, E>, WriteError>>,
}

impl<S, F, T, E> Unit<S> for Closure<F, T, E>
where
    F: FnOnce(&mut S) -> Result<T, E> + Send,
    T: Send,
    E: Send,
{
    fn run(&mut self, session: &mut S) -> bool {
        let Some(job) = self.job.take() else {
            return false;
        };
        let result = job(session);
        let keep = result.is_ok();
        self.result = Some(result);
        keep
    }

    fn finish(self: Box<Self>, failed: Option<WriteError>) {
        let outcome = match (self.result, failed) {
            // Undone by its own decision: its result stands whatever happened to the rest.
            (Some(Err(error)), _) => Ok(Err(error)),
            (Some(Ok(value)), None) => Ok(Ok(value)),
            (_, Some(failed)) => Err(failed),
            (None, None) => Err(WriteError::gone()),
        };
        let _ = self.reply.send(outcome);
    }
}

enum Message<S> {
    Write(Box<dyn Unit<S>>),
    /// A read on the write connection, between transactions (an in-memory database has only
    /// this one connection).
    Read(Box<dyn FnOnce(&mut S) + Send>),
    Stop(oneshot::Sender<()>),
}

/// The write connection on its thread, and the queue to it. Cheap to clone (all clones share
/// the one thread); the thread ends when the last clone is dropped or [`Writer::close`] runs.
pub struct Writer<S: Session> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    sender: mpsc::Sender<Message<S>>,
    activity: Activity,
}

impl<S: Session> Clone for Writer<S> {
    fn clone(&self) -> Self {
        Writer {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Session> std::fmt::Debug for Writer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("queued", &self.queued())
            .finish_non_exhaustive()
    }
}

impl<S: Session> Writer<S> {
    /// Moves `session` onto a new thread named `name` and returns the queue to it.
    pub fn spawn(session: S, name: &str) -> std::io::Result<Self> {
        Self::spawn_observed(session, name, |_: &mut S| {})
    }

    /// Like [`Writer::spawn`]; `committed` runs on the writer's thread with the session after
    /// each commit (outside any transaction), and is dropped after the session when the writer
    /// stops (so what it owns outlives the connection and is released before
    /// [`Writer::close`] returns).
    pub fn spawn_observed(
        session: S,
        name: &str,
        committed: impl FnMut(&mut S) + Send + 'static,
    ) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let activity = Activity::default();
        let shared = activity.clone();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || serve(session, &receiver, &shared, committed))?;
        Ok(Writer {
            inner: Arc::new(Inner { sender, activity }),
        })
    }

    /// Runs `job` in a write transaction (shared with whatever else is queued) and returns its
    /// result once that transaction committed. When `job` returns `Err`, what it wrote is
    /// undone and the error comes back as `Ok(Err(..))`; `Err(WriteError)` means the
    /// transaction itself failed and nothing of the write is stored.
    pub async fn write<T, E, F>(&self, job: F) -> Result<Result<T, E>, WriteError>
    where
        F: FnOnce(&mut S) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let (reply, outcome) = oneshot::channel();
        let unit = Closure {
            job: Some(job),
            result: None,
            reply,
        };
        let activity = &self.inner.activity;
        let idle = activity.queued.fetch_add(1, Ordering::SeqCst) == 0
            && !activity.busy.load(Ordering::SeqCst);
        if self
            .inner
            .sender
            .send(Message::Write(Box::new(unit)))
            .is_err()
        {
            activity.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(WriteError::gone());
        }
        let mut outcome = outcome;
        if idle && let Some(polled) = crate::answer::poll_briefly(&mut outcome).await {
            return polled.unwrap_or_else(|| Err(WriteError::gone()));
        }
        outcome.await.unwrap_or_else(|_| Err(WriteError::gone()))
    }

    /// Runs `job` on the write connection outside any transaction, after the writes queued
    /// before it.
    pub async fn read<T, F>(&self, job: F) -> Result<T, WriteError>
    where
        F: FnOnce(&mut S) -> T + Send + 'static,
        T: Send + 'static,
    {
        let (reply, outcome) = oneshot::channel();
        let read = move |session: &mut S| {
            let _ = reply.send(job(session));
        };
        self.inner
            .sender
            .send(Message::Read(Box::new(read)))
            .map_err(|_| WriteError::gone())?;
        outcome.await.map_err(|_| WriteError::gone())
    }

    /// Writes sent and not yet taken into a batch (a diagnostic; tests wait on it).
    pub fn queued(&self) -> usize {
        self.inner.activity.queued.load(Ordering::SeqCst)
    }

    /// Finishes the writes queued so far, then ends the thread, closing the connection. Later
    /// writes fail with [`WriteError`].
    pub async fn close(&self) {
        let (done, stopped) = oneshot::channel();
        if self.inner.sender.send(Message::Stop(done)).is_ok() {
            let _ = stopped.await;
        }
    }
}

/// What callers can see of the thread's work.
#[derive(Clone, Default)]
struct Activity {
    /// Writes sent and not yet taken into a batch.
    queued: Arc<AtomicUsize>,
    /// Set while a batch runs.
    busy: Arc<AtomicBool>,
}

/// The writer thread: takes what is queued as one batch, runs it, and again.
fn serve<S: Session>(
    mut session: S,
    receiver: &mpsc::Receiver<Message<S>>,
    activity: &Activity,
    mut committed: impl FnMut(&mut S),
) {
    while let Some(first) = next_message(receiver) {
        let mut units = Vec::new();
        let mut reads = Vec::new();
        let mut stop = None;
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Write(unit) => units.push(unit),
                Message::Read(read) => reads.push(read),
                Message::Stop(done) => {
                    stop = Some(done);
                    break;
                }
            }
            if units.len() < MAX_BATCH {
                next = receiver.try_recv().ok();
            }
        }
        activity.busy.store(true, Ordering::SeqCst);
        activity.queued.fetch_sub(units.len(), Ordering::SeqCst);
        let done = run_batch(&mut session, units);
        activity.busy.store(false, Ordering::SeqCst);
        if done {
            committed(&mut session);
        }
        for read in reads {
            read(&mut session);
        }
        if let Some(done) = stop {
            drop(session);
            drop(committed);
            let _ = done.send(());
            return;
        }
    }
}

/// How long the writer polls for the next write before it sleeps: a task's next checkpoint
/// often follows within microseconds, and waking a sleeping thread costs tens of microseconds
/// on a virtual machine.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// The next message, polled for [`SPIN`] before sleeping on the queue; `None` when every
/// sender is gone.
fn next_message<M>(receiver: &mpsc::Receiver<M>) -> Option<M> {
    let start = std::time::Instant::now();
    loop {
        match receiver.try_recv() {
            Ok(message) => return Some(message),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN => std::hint::spin_loop(),
            Err(mpsc::TryRecvError::Empty) => return receiver.recv().ok(),
        }
    }
}

/// Runs `units` in one transaction and tells each how it ended; `true` when it committed.
fn run_batch<S: Session>(session: &mut S, mut units: Vec<Box<dyn Unit<S>>>) -> bool {
    if units.is_empty() {
        return false;
    }
    if let Err(error) = session.begin() {
        let failed = WriteError::new("starting a write transaction", error);
        finish_all(units, Some(&failed));
        return false;
    }
    let alone = units.len() == 1;
    let mut keeps = 0_usize;
    for unit in &mut units {
        match run_unit(session, unit.as_mut(), alone) {
            Ok(kept) => keeps += usize::from(kept),
            Err(failed) => {
                if session.in_transaction() {
                    let _ = session.rollback();
                }
                finish_all(units, Some(&failed));
                return false;
            }
        }
    }
    let ended = if keeps == 0 {
        session.rollback()
    } else {
        session.commit()
    };
    let failed = match ended {
        Ok(()) if keeps > 0 => None,
        Ok(()) => {
            finish_all(units, None);
            return false;
        }
        Err(error) => {
            if session.in_transaction() {
                let _ = session.rollback();
            }
            Some(WriteError::new("committing a write transaction", error))
        }
    };
    let done = failed.is_none();
    finish_all(units, failed.as_ref());
    done
}

/// One write of a batch inside its savepoint (none when it is alone: its transaction is its
/// own). `Ok(kept)`; `Err` when the transaction can no longer go on.
fn run_unit<S: Session>(
    session: &mut S,
    unit: &mut dyn Unit<S>,
    alone: bool,
) -> Result<bool, WriteError> {
    if !alone {
        session
            .mark()
            .map_err(|error| WriteError::new("marking a write in its batch", error))?;
    }
    // A write that panics is undone like one that failed; its caller hears that the writer
    // could not finish it.
    let keep = std::panic::catch_unwind(AssertUnwindSafe(|| unit.run(session))).unwrap_or(false);
    if !session.in_transaction() {
        return Err(WriteError::new(
            "running a write",
            std::io::Error::other(
                "the database rolled the transaction back on its own (an I/O error, a full \
                 disk or no memory); retry the write",
            ),
        ));
    }
    if alone {
        return Ok(keep);
    }
    let ended = if keep { session.keep() } else { session.undo() };
    ended.map_err(|error| WriteError::new("ending a write in its batch", error))?;
    Ok(keep)
}

fn finish_all<S>(units: Vec<Box<dyn Unit<S>>>, failed: Option<&WriteError>) {
    for unit in units {
        unit.finish(failed.cloned());
    }
}
