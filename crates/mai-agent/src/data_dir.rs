//! The data directory and the database file kept private: the directory 0700 and the SQLite file
//! with its `-wal`/`-shm` 0600 — they hold private chats. Created that way, and tightened at
//! every start when an older build (or a hand) left them readable by others (docs/backup.md).
//!
//! Must not: open the database (`app.rs` does) or choose where it lives (`settings.rs` does).

use std::path::Path;

use anyhow::{Context, Result};

/// Creates `dir` (and its parents) if missing, and makes it private to its owner.
pub fn prepare(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    }
    tighten(dir, 0o700)
}

/// Open options whose created file is readable and writable by its owner only (0600).
pub fn private_file() -> std::fs::OpenOptions {
    #[allow(unused_mut)]
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// Makes the database file at `path` private before SQLite opens it: creates it empty with mode
/// 0600 when missing (SQLite gives its `-wal` and `-shm` files the database file's mode), and
/// tightens an existing file and its `-wal`/`-shm`.
pub fn private_database(path: &Path) -> Result<()> {
    if !path.exists() {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| {
                format!("cannot create the database's directory {}", dir.display())
            })?;
        }
        match private_file().write(true).create_new(true).open(path) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot create the database {}", path.display()));
            }
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let file = Path::new(&file);
        if file.exists() {
            tighten(file, 0o600)?;
        }
    }
    Ok(())
}

/// Removes every permission beyond `mode` (group and others) from `path`.
#[cfg(unix)]
fn tighten(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::metadata(path)
        .with_context(|| format!("cannot read the permissions of {}", path.display()))?;
    let current = metadata.permissions().mode() & 0o777;
    if current & !mode == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(current & mode)).with_context(
        || {
            format!(
                "cannot make {} private (mode {mode:o}); change its owner or mode by hand",
                path.display()
            )
        },
    )?;
    tracing::info!(
        "made {} private: mode {:o} → {:o}",
        path.display(),
        current,
        current & mode
    );
    Ok(())
}

#[cfg(not(unix))]
fn tighten(_path: &Path, _mode: u32) -> Result<()> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_data_dir_and_database_are_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        prepare(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let db = dir.join("mai-agent.db");
        private_database(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
    }

    #[test]
    fn an_existing_world_readable_data_dir_and_database_are_tightened() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let db = dir.join("mai-agent.db");
        for file in ["mai-agent.db", "mai-agent.db-wal", "mai-agent.db-shm"] {
            std::fs::write(dir.join(file), b"").unwrap();
            std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o644))
                .unwrap();
        }
        prepare(&dir).unwrap();
        private_database(&db).unwrap();
        assert_eq!(mode(&dir), 0o700);
        for file in ["mai-agent.db", "mai-agent.db-wal", "mai-agent.db-shm"] {
            assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
        }
    }
}
