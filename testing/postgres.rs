//! Shared by the integration tests of several crates (included with `#[path]`): a throwaway
//! PostgreSQL cluster ([`PgCluster`]) — `initdb` into a temporary directory, the server started
//! with `pg_ctl` on a free loopback port (its socket in the same directory), stopped and removed
//! when the value is dropped. Never a system service, never a mock. A test may stop the server
//! at once and start it again on the same port ([`PgCluster::stop_now`], `start_again`): the
//! database going away.
//!
//! The server programs come from `testing/postgres/setup.sh` (Debian's `postgresql` package,
//! installed when missing; `.ci/run` runs it first). PostgreSQL refuses to run as root, and CI
//! runs as root: then `initdb` and the server run as the `postgres` user (`runuser`). The cluster
//! is initialised with `--locale=C`, the setting under which PostgreSQL's own trigram extension
//! finds nothing in Chinese text, so the tests meet the hard case.
//!
//! Each database a test asks for is owned by the role `mai`, which is not a superuser: what the
//! code under test does there (migrations included) must work with an owner's rights only.
//!
//! A test killed before it drops its cluster (nextest's timeout, a SIGKILL) leaves nothing
//! running: a watchdog in its own session stops the server and removes the directory when the
//! test process is gone.
//!
//! A missing PostgreSQL prints SKIP and [`PgCluster::start`] returns `None`; under `CI=true` it
//! fails the test instead (`peers::peer_missing`).

#![allow(dead_code, clippy::unwrap_used)] // a test fixture: a failed setup step fails the test

#[path = "peers.rs"]
mod peers;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The role that owns every test database: a login without superuser rights.
pub const OWNER: &str = "mai";
/// The superuser `initdb` creates (used only to create roles and databases, and to look).
const SUPERUSER: &str = "postgres";
/// How many ports are tried before giving up (another process may take a free port first).
const START_TRIES: usize = 3;

/// A running throwaway cluster; stopped (immediately) and deleted on drop.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// The unprivileged user the server runs as when this process is root.
    run_as: Option<String>,
    next_database: AtomicU32,
    /// Stops the server and removes its directory once this process is gone, however it ends
    /// (a test killed at its timeout runs no `Drop`): it reads a pipe only this process holds.
    _watchdog: Option<std::process::Child>,
}

/// The directory of `initdb`, `pg_ctl`, `postgres` and `psql`, from `setup.sh` (run once per
/// test process); `Err` with its message.
fn server_bin() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testing/postgres/setup.sh");
        match Command::new("bash").arg(&script).output() {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .map(|line| PathBuf::from(line.trim()))
                .ok_or_else(|| "setup.sh printed no directory".to_owned()),
            Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
            Err(error) => Err(format!("cannot run bash: {error}")),
        }
    })
    .clone()
}

/// Whether PostgreSQL's server programs are here (after a SKIP line, or a failure under
/// `CI=true`, when they are not).
pub fn installed() -> bool {
    match server_bin() {
        Ok(_) => true,
        Err(problem) => {
            peers::peer_missing(
                &format!("PostgreSQL is not installed ({problem})"),
                "bash testing/postgres/setup.sh",
            );
            false
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// `id -u|-g user` as a number.
fn id_of(flag: &str, user: &str) -> u32 {
    let out = Command::new("id").args([flag, user]).output().unwrap();
    assert!(
        out.status.success(),
        "the user `{user}` is missing (Debian's postgresql package creates it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn checked(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl PgCluster {
    /// A new cluster, running, with the role [`OWNER`]; `None` (after a SKIP line) when
    /// PostgreSQL is not installed and cannot be — under `CI=true` that fails the test.
    pub fn start() -> Option<PgCluster> {
        if !installed() {
            return None;
        }
        let bin = server_bin().ok()?;
        let dir = tempfile::Builder::new()
            .prefix("mai-pg-")
            .tempdir()
            .unwrap();
        let run_as = is_root().then(|| SUPERUSER.to_owned());
        if let Some(user) = &run_as {
            let (uid, gid) = (id_of("-u", user), id_of("-g", user));
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let mut cluster = PgCluster {
            dir,
            bin,
            port: 0,
            run_as,
            next_database: AtomicU32::new(0),
            _watchdog: None,
        };
        // First, so no moment leaves a directory or a server without its watchdog.
        cluster._watchdog = cluster.watchdog();
        cluster.init();
        cluster.serve();
        cluster.psql_as_superuser(
            "postgres",
            &format!("CREATE ROLE {OWNER} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"),
        );
        Some(cluster)
    }

    /// A server program as the unprivileged user when this process is root.
    fn server_command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn init(&self) {
        let out = self
            .server_command("initdb")
            .arg("-D")
            .arg(self.data_dir())
            .args(["--no-sync", "--auth=trust", "--username", SUPERUSER])
            .args(["--locale=C", "--encoding=UTF8"])
            .output()
            .unwrap();
        checked("initdb", out);
    }

    /// Starts the server on a free port, trying another when the port was taken meanwhile.
    fn serve(&mut self) {
        let mut last = String::new();
        for _ in 0..START_TRIES {
            let port = free_port();
            match self.start_on(port) {
                Ok(()) => {
                    self.port = port;
                    return;
                }
                Err(log) => last = log,
            }
        }
        panic!("the PostgreSQL server did not start; its log:\n{last}");
    }

    /// `pg_ctl start` on `port`, waiting until it accepts connections; `Err` with the server's
    /// log when it did not start.
    fn start_on(&self, port: u16) -> Result<(), String> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={} \
             -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
             -c max_connections=200",
            self.dir.path().display()
        );
        let out = self
            .server_command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .unwrap();
        if out.status.success() {
            return Ok(());
        }
        Err(std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default())
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`: every connection cut, as when the
    /// database host goes away), keeping its data.
    pub fn stop_now(&self) {
        let out = self
            .server_command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .output()
            .unwrap();
        checked("pg_ctl stop", out);
    }

    /// Starts the stopped server again on the same port and directory (it recovers its data).
    pub fn start_again(&self) {
        if let Err(log) = self.start_on(self.port) {
            panic!("the PostgreSQL server did not start again; its log:\n{log}");
        }
    }

    /// A detached shell (its own session, so a kill of this test's process group spares it)
    /// that waits for the end of its standard input — this process's end, whichever way — then
    /// stops the server at once and removes the cluster's directory. Nothing polls.
    fn watchdog(&self) -> Option<std::process::Child> {
        let stop = self.server_command("pg_ctl");
        let mut words: Vec<String> = vec![stop.get_program().to_string_lossy().into_owned()];
        words.extend(stop.get_args().map(|a| a.to_string_lossy().into_owned()));
        let quoted = |w: &str| format!("'{}'", w.replace('\'', "'\\''"));
        let script = format!(
            "cat >/dev/null; {} -D {} -m immediate -w stop; rm -rf {}",
            words
                .iter()
                .map(|w| quoted(w))
                .collect::<Vec<_>>()
                .join(" "),
            quoted(&self.data_dir().to_string_lossy()),
            quoted(&self.dir.path().to_string_lossy()),
        );
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()
    }

    /// The temporary directory holding the cluster, its socket and its log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A new empty database owned by [`OWNER`]; its URL, connecting as [`OWNER`].
    pub fn database(&self) -> String {
        let number = self.next_database.fetch_add(1, Ordering::SeqCst);
        let name = format!("mai_test_{number}");
        self.psql_as_superuser("postgres", &format!("CREATE DATABASE {name} OWNER {OWNER}"));
        self.url(OWNER, &name)
    }

    /// The URL of database `name` as `user` (no password: the cluster trusts loopback).
    pub fn url(&self, user: &str, name: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{name}", self.port)
    }

    /// The name of the database of a URL this cluster made.
    pub fn database_name(url: &str) -> &str {
        url.rsplit('/').next().unwrap_or_default()
    }

    /// Runs `sql` with psql as the superuser in `database`; the rows, `|`-separated, one a line.
    pub fn psql_as_superuser(&self, database: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", SUPERUSER, "-d", database, "-c", sql])
            .output()
            .unwrap();
        checked(&format!("psql `{sql}`"), out).trim().to_owned()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.port == 0 {
            return;
        }
        let _ = self
            .server_command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}
