//! [`Checkpointer`]: copies a database's write-ahead log back into the database file on a
//! thread and connection of its own, so the writer's turn never pays for it.
//!
//! SQLite's default is to checkpoint inside the commit that crosses 1,000 log pages — on the
//! one writer thread every write waits for. Here the writer runs with automatic checkpoints
//! off and tells this thread after each commit; every [`COMMITS_PER_CHECKPOINT`] commits a
//! passive checkpoint runs beside the writer and the readers (it takes no lock they need; the
//! next write transaction after a complete one starts the log over). A checkpoint that could
//! not copy everything (a reader still used old pages) is simply retried at the next turn.
//!
//! This module must not write any row: it only moves committed pages.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;

/// Commits between two checkpoints: a commit here writes a few pages, so this keeps the log
/// near SQLite's default of 1,000 pages.
const COMMITS_PER_CHECKPOINT: u32 = 256;

/// The checkpoint thread. Dropping it stops and joins the thread (after the checkpoint in
/// progress, if any).
pub(crate) struct Checkpointer {
    /// `Some` until drop; a full channel means a checkpoint is already due.
    due: Option<mpsc::SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    commits: u32,
}

impl Checkpointer {
    /// Opens its own connection to the file at `path` and starts the thread.
    pub(crate) fn spawn(path: &Path) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let connection = Connection::open(path)?;
        let (due, receiver) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("mai-db-checkpointer".to_owned())
            .spawn(move || {
                while receiver.recv().is_ok() {
                    // A failed passive checkpoint loses nothing: the pages stay in the log and
                    // the next turn copies them.
                    if let Err(error) = connection.execute_batch("PRAGMA wal_checkpoint(PASSIVE)") {
                        tracing::debug!(%error, "a WAL checkpoint did not run; retried later");
                    }
                }
            })?;
        Ok(Checkpointer {
            due: Some(due),
            thread: Some(thread),
            commits: 0,
        })
    }

    /// Counts a commit; every [`COMMITS_PER_CHECKPOINT`] commits, wakes the thread.
    pub(crate) fn committed(&mut self) {
        self.commits += 1;
        if self.commits < COMMITS_PER_CHECKPOINT {
            return;
        }
        self.commits = 0;
        if let Some(due) = &self.due {
            // Full: a checkpoint is already waiting to run, which will copy these pages too.
            let _ = due.try_send(());
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.due = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
