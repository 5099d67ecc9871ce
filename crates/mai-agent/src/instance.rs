//! One engine per data directory. The commands that run the engine (`serve`, `mcp`, `run`) hold
//! an advisory lock (`flock`) on `<data-dir>/serve.lock` for as long as they run; the kernel
//! releases it when the process ends, however it ends, so a restart after a crash or SIGKILL
//! just works. The file says who holds it — pid, command and, for `serve`, the address of its
//! HTTP API — so a second engine refuses naming the first, and the CLI's `task ask|cancel|inject`
//! can find a running `serve` to send the change to (docs/design.md, "One service per data
//! directory").
//!
//! Must not: open the database (`app.rs` does), or decide what a command does when the lock is
//! taken (the command does).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "serve.lock";

/// How often a taken lock is tried again before refusing: a `task` command probing the lock
/// holds it (shared) for a moment, which must not make a starting `serve` refuse.
const ATTEMPTS: u32 = 10;
const RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// Who holds the lock, as its file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// `None` when the holder has not written its pid yet (it just took the lock).
    pub pid: Option<u32>,
    /// `serve`, `mcp` or `run`.
    pub command: String,
    /// The HTTP API of a `serve` (`127.0.0.1:8760`).
    pub api: Option<SocketAddr>,
    /// The name the holder gives itself (`[server] instance_id`), once it wrote it.
    pub instance: Option<String>,
}

impl Holder {
    /// "`mai-agent serve` (pid 1234)".
    pub fn describe(&self) -> String {
        match self.pid {
            Some(pid) => format!("`mai-agent {}` (pid {pid})", self.command),
            None => format!("`mai-agent {}` (pid not written yet)", self.command),
        }
    }

    fn parse(text: &str) -> Holder {
        let mut holder = Holder {
            pid: None,
            command: "serve".into(),
            api: None,
            instance: None,
        };
        for line in text.lines() {
            match line.split_once('=') {
                Some(("pid", pid)) => holder.pid = pid.trim().parse().ok(),
                Some(("command", command)) => holder.command = command.trim().to_owned(),
                Some(("api", api)) => holder.api = api.trim().parse().ok(),
                Some(("instance", name)) => holder.instance = Some(name.trim().to_owned()),
                _ => {}
            }
        }
        holder
    }
}

/// The held lock: one engine runs on this data directory while it lives.
#[derive(Debug)]
pub struct InstanceLock {
    file: File,
    command: &'static str,
    /// The name this process gives itself, once set (see [`InstanceLock::set_instance`]).
    instance: Option<String>,
    /// The name the previous holder of this data directory wrote: that process is gone.
    predecessor: Option<String>,
}

impl InstanceLock {
    /// Takes the lock of `data_dir` for `command`, or refuses naming the process that holds it.
    pub fn acquire(data_dir: &Path, command: &'static str) -> Result<InstanceLock> {
        crate::data_dir::prepare(data_dir)?;
        let path = data_dir.join(LOCK_FILE);
        let mut file = open(&path)?;
        let mut attempts = 0;
        while !try_lock(&file, Mode::Exclusive)
            .with_context(|| format!("cannot lock {}", path.display()))?
        {
            attempts += 1;
            if attempts >= ATTEMPTS {
                let holder = read_holder(&mut file);
                anyhow::bail!(
                    "another {} is already running on the data directory {} (it holds {}): \
                     stop it first, or give this one its own --data-dir",
                    holder.describe(),
                    data_dir.display(),
                    path.display()
                );
            }
            std::thread::sleep(RETRY);
        }
        let predecessor = read_holder(&mut file).instance;
        let lock = InstanceLock {
            file,
            command,
            instance: None,
            predecessor,
        };
        lock.write(None)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(lock)
    }

    /// Records the name this process gives itself (`[server] instance_id`) in the lock file, so
    /// the next holder knows whose leases it may release.
    pub fn set_instance(&mut self, instance: String) -> Result<()> {
        self.instance = Some(instance);
        self.write(None)
            .context("cannot record the instance name in the lock file")
    }

    /// The name of the process that held this data directory before, now gone (it held the
    /// lock); `None` when it wrote none.
    pub fn predecessor(&self) -> Option<&str> {
        self.predecessor.as_deref()
    }

    /// Records the address of this `serve`'s HTTP API in the lock file, for the CLI.
    pub fn set_api(&self, api: SocketAddr) -> Result<()> {
        self.write(Some(api))
            .context("cannot record the API address in the lock file")
    }

    fn write(&self, api: Option<SocketAddr>) -> std::io::Result<()> {
        let mut text = format!("pid={}\ncommand={}\n", std::process::id(), self.command);
        if let Some(instance) = &self.instance {
            text.push_str(&format!("instance={instance}\n"));
        }
        if let Some(api) = api {
            text.push_str(&format!("api={api}\n"));
        }
        let mut file = &self.file;
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        // One write: a reader sees the old text, nothing, or the new text.
        file.write_all(text.as_bytes())?;
        file.flush()
    }
}

/// Who runs the engine on `data_dir` right now; `None` when nobody does (a lock file left by a
/// process that ended says nothing, since its lock went with it).
pub fn holder(data_dir: &Path) -> Result<Option<Holder>> {
    let path = data_dir.join(LOCK_FILE);
    let mut file = match File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(error).with_context(|| format!("cannot open {}", path.display()));
        }
    };
    // Shared and at once released: two probes never block each other.
    if try_lock(&file, Mode::Shared).with_context(|| format!("cannot lock {}", path.display()))? {
        return Ok(None);
    }
    Ok(Some(read_holder(&mut file)))
}

fn read_holder(file: &mut File) -> Holder {
    let mut text = String::new();
    let _ = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text));
    Holder::parse(&text)
}

/// Opens (creating, private) the lock file without truncating it: the text belongs to whoever
/// holds the lock.
fn open(path: &PathBuf) -> Result<File> {
    crate::data_dir::private_file()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))
}

enum Mode {
    Shared,
    Exclusive,
}

/// Tries to lock without waiting: `false` when another process holds a conflicting lock. A
/// shared probe is released when `file` is closed.
#[cfg(unix)]
fn try_lock(file: &File, mode: Mode) -> std::io::Result<bool> {
    use rustix::fs::{FlockOperation, flock};
    let operation = match mode {
        Mode::Shared => FlockOperation::NonBlockingLockShared,
        Mode::Exclusive => FlockOperation::NonBlockingLockExclusive,
    };
    match flock(file, operation) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Elsewhere there is no advisory lock: every command runs as if it were alone.
#[cfg(not(unix))]
fn try_lock(_file: &File, _mode: Mode) -> std::io::Result<bool> {
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_data_dir_refuses_naming_the_first_pid() {
        let data = tempfile::tempdir().unwrap();
        let first = InstanceLock::acquire(data.path(), "serve").unwrap();
        first.set_api("127.0.0.1:8760".parse().unwrap()).unwrap();
        let error = InstanceLock::acquire(data.path(), "run")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("`mai-agent serve` (pid {})", std::process::id())),
            "{error}"
        );
        assert!(error.contains("--data-dir"), "{error}");
        let holder = holder(data.path()).unwrap().unwrap();
        assert_eq!(holder.api, Some("127.0.0.1:8760".parse().unwrap()));
        drop(first);
        assert_eq!(holder_after_release(data.path()), None);
        InstanceLock::acquire(data.path(), "run").unwrap();
    }

    fn holder_after_release(data: &Path) -> Option<Holder> {
        holder(data).unwrap()
    }

    #[test]
    fn a_lock_file_left_behind_by_an_ended_process_names_nobody() {
        let data = tempfile::tempdir().unwrap();
        std::fs::write(data.path().join(LOCK_FILE), "pid=1\ncommand=serve\n").unwrap();
        assert_eq!(holder(data.path()).unwrap(), None);
        InstanceLock::acquire(data.path(), "serve").unwrap();
    }

    #[test]
    fn the_next_holder_learns_the_name_of_the_instance_that_held_the_data_dir_before() {
        let data = tempfile::tempdir().unwrap();
        let mut first = InstanceLock::acquire(data.path(), "serve").unwrap();
        assert_eq!(
            first.predecessor(),
            None,
            "a fresh data directory had nobody"
        );
        first.set_instance("box-41".to_owned()).unwrap();
        first.set_api("127.0.0.1:8760".parse().unwrap()).unwrap();
        let holder = holder(data.path()).unwrap().unwrap();
        assert_eq!(holder.instance.as_deref(), Some("box-41"));
        drop(first);
        let second = InstanceLock::acquire(data.path(), "serve").unwrap();
        assert_eq!(second.predecessor(), Some("box-41"));
    }
}
