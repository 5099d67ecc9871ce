//! A consistent online copy of a database file (`mai-agent backup FILE`): SQLite's `VACUUM INTO`
//! on a connection of its own reads one snapshot (WAL lets it run beside a live writer, which
//! it never blocks for long) and writes it as a compact SQLite file with the same tables and
//! schema versions. The copy is created private (0600) and checked before it is reported done.
//!
//! Must not: write to the source, or overwrite an existing file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// How long the copy waits for a lock held by a writer's checkpoint.
const BUSY: Duration = Duration::from_secs(30);

/// A backup that could not be made; nothing is left at the destination.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("no database at {} (nothing to back up): check --data-dir", .0.display())]
    NoSource(PathBuf),
    #[error(
        "{} already exists: give a new file name (a backup never overwrites a file)",
        .0.display()
    )]
    Exists(PathBuf),
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("copying {} failed: {source}", from.display())]
    Copy {
        from: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the copy {} failed its integrity check: {found}", path.display())]
    Check { path: PathBuf, found: String },
}

/// Copies the database at `source` into the new file `destination` (mode 0600); returns the
/// copy's size in bytes.
pub fn backup(source: &Path, destination: &Path) -> Result<u64, BackupError> {
    if !source.is_file() {
        return Err(BackupError::NoSource(source.to_owned()));
    }
    create_private(destination)?;
    match copy(source, destination) {
        Ok(size) => Ok(size),
        Err(error) => {
            let _ = std::fs::remove_file(destination);
            Err(error)
        }
    }
}

/// Creates `path` empty and private; `VACUUM INTO` fills an empty file and keeps its mode.
fn create_private(path: &Path) -> Result<(), BackupError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(BackupError::Exists(path.to_owned()))
        }
        Err(source) => Err(BackupError::Create {
            path: path.to_owned(),
            source,
        }),
    }
}

fn copy(source: &Path, destination: &Path) -> Result<u64, BackupError> {
    let failed = |source_error| BackupError::Copy {
        from: source.to_owned(),
        source: source_error,
    };
    // Read-write (it writes nothing): a read-only connection cannot always open a WAL file a
    // crashed process left with its `-wal` and `-shm`.
    let connection = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    connection.busy_timeout(BUSY).map_err(failed)?;
    let target = destination.to_string_lossy().into_owned();
    connection
        .execute("VACUUM INTO ?1", [&target])
        .map_err(failed)?;
    drop(connection);
    check(destination)?;
    std::fs::metadata(destination)
        .map(|metadata| metadata.len())
        .map_err(|source| BackupError::Create {
            path: destination.to_owned(),
            source,
        })
}

/// `PRAGMA quick_check` on the copy: a backup that cannot be read is no backup.
fn check(path: &Path) -> Result<(), BackupError> {
    let failed = |source| BackupError::Copy {
        from: path.to_owned(),
        source,
    };
    let copy =
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(failed)?;
    let found: String = copy
        .query_row("PRAGMA quick_check", [], |row| row.get(0))
        .map_err(failed)?;
    if found != "ok" {
        return Err(BackupError::Check {
            path: path.to_owned(),
            found,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn database_with_a_row(path: &Path) -> Connection {
        let connection = Connection::open(path).unwrap();
        connection
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('kept');",
            )
            .unwrap();
        connection
    }

    #[test]
    fn a_backup_beside_an_open_writer_holds_the_committed_rows_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("live.db");
        let live = database_with_a_row(&source);
        // An open transaction of the live writer is not in the copy, and does not block it.
        live.execute_batch("BEGIN; INSERT INTO t VALUES ('uncommitted');")
            .unwrap();
        let copy = dir.path().join("copy.db");
        assert!(backup(&source, &copy).unwrap() > 0);
        let read = Connection::open(&copy).unwrap();
        let rows: Vec<String> = read
            .prepare("SELECT x FROM t")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows, ["kept"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
    }

    #[test]
    fn a_backup_refuses_an_existing_file_and_leaves_it_alone() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("live.db");
        database_with_a_row(&source);
        let existing = dir.path().join("precious.txt");
        std::fs::write(&existing, "keep me").unwrap();
        let error = backup(&source, &existing).unwrap_err();
        assert!(error.to_string().contains("already exists"), "{error}");
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
    }

    #[test]
    fn a_backup_of_a_missing_database_says_there_is_nothing_to_back_up() {
        let dir = tempfile::tempdir().unwrap();
        let error = backup(&dir.path().join("none.db"), &dir.path().join("copy.db")).unwrap_err();
        assert!(error.to_string().contains("nothing to back up"), "{error}");
        assert!(!dir.path().join("copy.db").exists());
    }
}
