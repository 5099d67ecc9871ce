//! [`Checkpointer`]: copies a database's write-ahead log back into the database file on a
//! thread and connection of its own, so the writer's turn never pays for it.
//!
//! SQLite's default is to checkpoint inside the commit that crosses 1,000 log pages — on the
//! one writer thread every write waits for. Here the writer runs with automatic checkpoints
//! off and tells this thread after each commit; every [`COMMITS_PER_CHECKPOINT`] commits a
//! passive checkpoint runs beside the writer and the readers (it takes no lock they need). A
//! checkpoint that could not copy everything (a reader still used old pages) is simply retried
//! at the next turn.
//!
//! SQLite starts the log over only in a write transaction that begins while the whole log is
//! in the database file; under steady writes that never happens (the writer commits more while
//! the thread copies), and the log grows for as long as writes keep coming (44 MB in one run
//! of benchmark (b) at 4 KiB pages; without bound under a steady load). So once the thread has
//! copied a log of [`RESTART_FRAMES`] or more, the writer, after its next commit, copies the
//! few frames committed since (a pause of a few milliseconds: that copy syncs both files), and
//! its next transaction starts the log over.
//!
//! This module must not write any row: it only moves committed pages.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;

/// Commits between two checkpoints: a commit here writes a few pages, so this keeps the log
/// near SQLite's default of 1,000 pages.
const COMMITS_PER_CHECKPOINT: u32 = 256;

/// A log at least this long (in frames, one page each) is started over once it has been copied:
/// 16 MiB at the 1 KiB pages of a file this crate made (64 MiB in an older 4 KiB file), so a
/// burst pays no pause and a steady load one every few thousand commits.
const RESTART_FRAMES: i64 = 16_384;

/// When the thread copies the log, and when the writer starts a copied log over.
#[derive(Debug, Clone, Copy)]
struct Thresholds {
    commits_per_checkpoint: u32,
    restart_frames: i64,
}

/// The checkpoint thread. Dropping it stops and joins the thread (after the checkpoint in
/// progress, if any).
pub(crate) struct Checkpointer {
    /// `Some` until drop; a full channel means a checkpoint is already due.
    due: Option<mpsc::SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    commits: u32,
    /// Set by the thread when it copied a whole log of [`RESTART_FRAMES`] or more.
    caught_up: Arc<AtomicBool>,
    commits_per_checkpoint: u32,
}

impl Checkpointer {
    /// Opens its own connection to the file at `path` and starts the thread.
    pub(crate) fn spawn(path: &Path) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Self::spawn_with(
            path,
            Thresholds {
                commits_per_checkpoint: COMMITS_PER_CHECKPOINT,
                restart_frames: RESTART_FRAMES,
            },
        )
    }

    fn spawn_with(
        path: &Path,
        thresholds: Thresholds,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let connection = Connection::open(path)?;
        let (due, receiver) = mpsc::sync_channel::<()>(1);
        let caught_up = Arc::new(AtomicBool::new(false));
        let copied = caught_up.clone();
        let thread = std::thread::Builder::new()
            .name("mai-db-checkpointer".to_owned())
            .spawn(move || {
                while receiver.recv().is_ok() {
                    copy_log(&connection, thresholds.restart_frames, &copied);
                }
            })?;
        Ok(Checkpointer {
            due: Some(due),
            thread: Some(thread),
            commits: 0,
            caught_up,
            commits_per_checkpoint: thresholds.commits_per_checkpoint,
        })
    }

    /// Runs on the writer's thread after each commit, between transactions: starts a long log
    /// over once the thread has copied it (see the module comment); every
    /// [`COMMITS_PER_CHECKPOINT`] commits, wakes the thread.
    pub(crate) fn committed(&mut self, writer: &Connection) {
        if self.caught_up.swap(false, Ordering::AcqRel) {
            // Copies what was committed since the thread's checkpoint (a few frames), so the
            // writer's next transaction finds the whole log copied and starts it over. A
            // reader on an older snapshot keeps it from starting over: then the next copy
            // tries again.
            checkpoint(writer);
        }
        self.commits += 1;
        if self.commits < self.commits_per_checkpoint {
            return;
        }
        self.commits = 0;
        if let Some(due) = &self.due {
            // Full: a checkpoint is already waiting to run, which will copy these pages too.
            let _ = due.try_send(());
        }
    }
}

/// The thread's turn: copies the log into the database file and, when the whole log was
/// copied and it is `restart_frames` long or more, tells the writer so through `caught_up`.
fn copy_log(connection: &Connection, restart_frames: i64, caught_up: &AtomicBool) {
    if let Some((log, done)) = checkpoint(connection)
        && log >= restart_frames
        && done == log
    {
        caught_up.store(true, Ordering::Release);
    }
}

/// A passive checkpoint: `(frames in the log, frames copied)`, or `None` when it did not run.
/// A failed one loses nothing: the pages stay in the log and a later turn copies them.
fn checkpoint(connection: &Connection) -> Option<(i64, i64)> {
    let ran = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, i64>(2)?,
        ))
    });
    match ran {
        Ok((0, log, done)) => Some((log, done)),
        Ok(_) => None,
        Err(error) => {
            tracing::debug!(%error, "a WAL checkpoint did not run; retried later");
            None
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The log header's salt, which SQLite changes each time it starts the log over.
    fn log_salt(path: &Path) -> Vec<u8> {
        let header = std::fs::read(path.with_extension("db-wal")).unwrap_or_default();
        header.get(16..24).map(<[u8]>::to_vec).unwrap_or_default()
    }

    fn insert(writer: &Connection, rows: u32) {
        for n in 0..rows {
            writer
                .execute("INSERT INTO t (v) VALUES (?)", [format!("{n:0>600}")])
                .unwrap();
        }
    }

    #[test]
    fn a_copied_log_is_started_over_although_writes_came_after_the_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steady.db");
        let writer = Connection::open(&path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        writer
            .execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY, v TEXT)")
            .unwrap();
        let copier = Connection::open(&path).unwrap();
        // The writer's side, without a thread: the test takes the thread's turns itself.
        let mut checkpointer = Checkpointer {
            due: None,
            thread: None,
            commits: 0,
            caught_up: Arc::new(AtomicBool::new(false)),
            commits_per_checkpoint: u32::MAX,
        };
        insert(&writer, 100);
        let before = log_salt(&path);
        assert_eq!(before.len(), 8, "the log has its header");

        // The thread copies the whole log; then more is committed before the writer's next
        // transaction, as under a steady load: on its own, SQLite would now never restart.
        copy_log(&copier, 64, &checkpointer.caught_up);
        assert!(checkpointer.caught_up.load(Ordering::Acquire));
        insert(&writer, 3);
        checkpointer.committed(&writer);
        insert(&writer, 1);
        assert_ne!(log_salt(&path), before, "the log was started over");
        assert!(!checkpointer.caught_up.load(Ordering::Acquire));
    }

    #[test]
    fn a_short_or_partly_copied_log_is_left_to_grow() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("short.db");
        let writer = Connection::open(&path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        writer
            .execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY, v TEXT)")
            .unwrap();
        insert(&writer, 10);
        let caught_up = AtomicBool::new(false);
        copy_log(&Connection::open(&path).unwrap(), 1_000, &caught_up);
        assert!(!caught_up.load(Ordering::Acquire), "10 frames is short");
    }
}
