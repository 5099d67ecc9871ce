//! [`Database`]: one SQLite file opened once for everything that keeps tables in it (the task
//! store, the embedded host) — its [`Writer`], the reader connections, their pragmas, and the
//! migrations each component brings.
//!
//! Every connection is a `rusqlite::Connection` owned by a thread of its own; callers hand it
//! a closure, so a transaction of many statements is one hand-off between threads. Reads run
//! on a few reader threads (WAL lets them run beside the writer); a read handed to an idle one
//! is polled for briefly before its caller sleeps (see `answer`). An in-memory database has
//! one connection, so its reads run on the writer's. This module owns connections and
//! pragmas, not any component's tables.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::checkpointer::Checkpointer;
use crate::migrate::{MigrateError, Migrations};
use crate::writer::{Session, WriteError, Writer};

/// How many statements each connection keeps prepared.
const STATEMENT_CACHE: usize = 128;

/// How durable a commit is (SQLite's `synchronous`; the database is always in WAL mode).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// A commit survives a crash of the process; a power loss can undo the last commits
    /// (never corrupt the file).
    #[default]
    Normal,
    /// Every commit is synced to disk before it returns: it survives a power loss too.
    Full,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// How a database file is opened.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Reader connections (each on its own thread; reads run in parallel in WAL mode).
    pub max_connections: u32,
    /// How long a statement waits for another process's write lock before it fails with
    /// "database is locked".
    pub busy_timeout: Duration,
    pub synchronous: Synchronous,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            max_connections: 4,
            busy_timeout: Duration::from_secs(10),
            synchronous: Synchronous::Normal,
        }
    }
}

/// The database file could not be opened or created; names the file.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the database {}: {source}", path.display())]
pub struct OpenError {
    pub path: PathBuf,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// A read that could not run: its connection's thread is gone (the database was closed).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the database is closed; reopen it")]
pub struct Closed;

impl Session for Connection {
    type Error = rusqlite::Error;

    fn begin(&mut self) -> Result<(), Self::Error> {
        // IMMEDIATE: the write lock before the first read, so "read, then write" is atomic and
        // never fails half-way with SQLITE_BUSY.
        run(self, "BEGIN IMMEDIATE")
    }

    fn commit(&mut self) -> Result<(), Self::Error> {
        run(self, "COMMIT")
    }

    fn rollback(&mut self) -> Result<(), Self::Error> {
        run(self, "ROLLBACK")
    }

    fn mark(&mut self) -> Result<(), Self::Error> {
        run(self, "SAVEPOINT unit")
    }

    fn keep(&mut self) -> Result<(), Self::Error> {
        run(self, "RELEASE unit")
    }

    fn undo(&mut self) -> Result<(), Self::Error> {
        run(self, "ROLLBACK TO unit")?;
        run(self, "RELEASE unit")
    }

    fn in_transaction(&self) -> bool {
        !self.is_autocommit()
    }
}

/// Runs one transaction-control statement, prepared once per connection (they run several
/// times per batch; `execute_batch` would compile them every time).
fn run(connection: &Connection, statement: &str) -> rusqlite::Result<()> {
    connection.prepare_cached(statement)?.execute([]).map(drop)
}

type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// Where reads run.
#[derive(Clone)]
enum Readers {
    /// Reader threads taking jobs from one queue; `idle` counts those waiting for one.
    Pool {
        sender: mpsc::Sender<ReadJob>,
        idle: Arc<AtomicUsize>,
    },
    /// The writer's connection (an in-memory database).
    Writer,
}

/// A SQLite file (or an in-memory database), opened: its writer and its readers. Cheap to
/// clone; every clone shares the same threads.
#[derive(Clone)]
pub struct Database {
    writer: Writer<Connection>,
    readers: Readers,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Opens (creating it and its directory if missing) the database file at `path` in WAL
    /// mode with foreign keys on. Components then bring their tables with
    /// [`Database::migrate`].
    pub async fn open(path: impl AsRef<Path>, options: &SqliteOptions) -> Result<Self, OpenError> {
        let path = path.as_ref().to_owned();
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| OpenError {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|error| failed(Box::new(error)))?;
        }
        let opening = path.clone();
        let options = options.clone();
        let connections = tokio::task::spawn_blocking(move || {
            let (writer, readers) = open_all(&opening, &options)?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((
                writer,
                readers,
                Checkpointer::spawn(&opening)?,
            ))
        })
        .await
        .map_err(|error| failed(Box::new(error)))?
        .map_err(failed)?;
        let (writer, readers, mut checkpointer) = connections;
        let writer = Writer::spawn_observed(writer, "mai-db-writer", move |connection| {
            checkpointer.committed(connection);
        })
        .map_err(|error| failed(Box::new(error)))?;
        let (sender, receiver) = mpsc::channel::<ReadJob>();
        let receiver = Arc::new(Mutex::new(receiver));
        let idle = Arc::new(AtomicUsize::new(0));
        for (number, reader) in readers.into_iter().enumerate() {
            let (receiver, idle) = (receiver.clone(), idle.clone());
            std::thread::Builder::new()
                .name(format!("mai-db-reader-{number}"))
                .spawn(move || serve_reads(&reader, &receiver, &idle))
                .map_err(|error| failed(Box::new(error)))?;
        }
        Ok(Database {
            writer,
            readers: Readers::Pool { sender, idle },
        })
    }

    /// A private in-memory database, gone when the last clone is dropped (tests, dry runs).
    pub async fn open_in_memory() -> Result<Self, OpenError> {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| OpenError {
            path: PathBuf::from(":memory:"),
            source,
        };
        let connection = Connection::open_in_memory().map_err(|error| failed(Box::new(error)))?;
        configure(&connection, None).map_err(|error| failed(Box::new(error)))?;
        let writer =
            Writer::spawn(connection, "mai-db-writer").map_err(|error| failed(Box::new(error)))?;
        Ok(Database {
            writer,
            readers: Readers::Writer,
        })
    }

    /// Brings `migrations`' tables to their newest version (refusing tables from a newer build).
    pub async fn migrate(&self, migrations: &'static Migrations) -> Result<(), MigrateError> {
        self.writer
            .write(move |connection| migrations.apply(connection))
            .await
            .map_err(MigrateError::Write)?
    }

    /// The highest migration of `migrations` recorded in the file (0: never migrated).
    pub async fn schema_version(
        &self,
        migrations: &'static Migrations,
    ) -> Result<i64, MigrateError> {
        self.read(move |connection| migrations.recorded_version(connection))
            .await
            .map_err(|_| MigrateError::Closed)?
    }

    /// Runs `job` in a write transaction: see [`Writer::write`].
    pub async fn write<T, E, F>(&self, job: F) -> Result<Result<T, E>, WriteError>
    where
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.writer.write(move |connection| job(connection)).await
    }

    /// Runs `job` on a reader connection (it sees the last committed state).
    pub async fn read<T, F>(&self, job: F) -> Result<T, Closed>
    where
        F: FnOnce(&Connection) -> T + Send + 'static,
        T: Send + 'static,
    {
        match &self.readers {
            Readers::Pool { sender, idle } => {
                let (reply, mut outcome) = oneshot::channel();
                let read: ReadJob = Box::new(move |connection| {
                    let _ = reply.send(job(connection));
                });
                let was_idle = idle.load(Ordering::SeqCst) > 0;
                sender.send(read).map_err(|_| Closed)?;
                if was_idle && let Some(polled) = crate::answer::poll_briefly(&mut outcome).await {
                    return polled.ok_or(Closed);
                }
                outcome.await.map_err(|_| Closed)
            }
            Readers::Writer => self
                .writer
                .read(move |connection| job(connection))
                .await
                .map_err(|_| Closed),
        }
    }

    /// The writer (its queue length, for diagnostics and tests).
    pub fn writer(&self) -> &Writer<Connection> {
        &self.writer
    }

    /// Finishes the queued writes and closes the write connection (checkpointing the WAL when
    /// it is the last connection). Reads still run until the last clone is dropped.
    pub async fn close(&self) {
        self.writer.close().await;
    }
}

/// The page size of a new database file. Every commit writes each page it changed whole to the
/// write-ahead log, and a write here changes a few small rows in several b-trees (the task row,
/// its indexes, history and status-log rows): at 1 KiB a commit writes a quarter of the bytes it
/// writes at SQLite's default 4 KiB, for about as many pages. Benchmark (b) ran 11–17 % faster
/// with it on a 2-core VM (1,395 against 1,255 tasks/s, medians of 5 interleaved); larger rows
/// spill into overflow pages, which only long messages and answers have.
const PAGE_SIZE: i64 = 1024;

/// Opens the writer and the readers, each configured.
fn open_all(
    path: &Path,
    options: &SqliteOptions,
) -> Result<(Connection, Vec<Connection>), rusqlite::Error> {
    let writer = Connection::open(path)?;
    configure(&writer, Some(options))?;
    // Only a new file takes it (an existing one keeps the size it was made with).
    writer.pragma_update(None, "page_size", PAGE_SIZE)?;
    writer.pragma_update(None, "journal_mode", "WAL")?;
    // The log is copied back by the `Checkpointer`'s thread, not inside the writer's commits.
    writer.pragma_update(None, "wal_autocheckpoint", 0)?;
    let mut readers = Vec::new();
    for _ in 0..options.max_connections.max(1) {
        let reader = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        configure(&reader, Some(options))?;
        reader.pragma_update(None, "query_only", true)?;
        readers.push(reader);
    }
    Ok((writer, readers))
}

/// The pragmas every connection runs with (`None`: an in-memory database).
fn configure(
    connection: &Connection,
    options: Option<&SqliteOptions>,
) -> Result<(), rusqlite::Error> {
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    connection.pragma_update(None, "foreign_keys", true)?;
    // Savepoints' statement journals and sorts stay in memory: a temporary file per write
    // (created, written, unlinked) cost the writer more than the write.
    connection.pragma_update(None, "temp_store", "MEMORY")?;
    if let Some(options) = options {
        connection.busy_timeout(options.busy_timeout)?;
        connection.pragma_update(None, "synchronous", options.synchronous.pragma())?;
    }
    Ok(())
}

/// A reader thread: runs read jobs until every sender is gone; counted in `idle` while it
/// waits for one.
fn serve_reads(
    connection: &Connection,
    receiver: &Mutex<mpsc::Receiver<ReadJob>>,
    idle: &AtomicUsize,
) {
    loop {
        idle.fetch_add(1, Ordering::SeqCst);
        let job = {
            let receiver = receiver
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            receiver.recv()
        };
        idle.fetch_sub(1, Ordering::SeqCst);
        let Ok(job) = job else {
            return;
        };
        // A read that panics fails only its caller (its reply is dropped).
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(connection)));
    }
}
