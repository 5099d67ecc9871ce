//! Running one command as a process tree that cannot outlive the call: spawn in a new process
//! group, read both pipes while waiting, and kill the whole group when the command ends, times
//! out, is cancelled, or the call's future is dropped.
//!
//! This module knows nothing of tools, roles or JSON. It must not leave a process running after
//! [`run`] returns (or its future is dropped), and must not hang on pipes held open by a process
//! that escaped the group (e.g. via `setsid`): reads stop after [`DRAIN_TIMEOUT`].

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::pin::pin;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::capture::{Capture, Captured};

/// How long the pipes are still read once the command has ended and its group was killed.
/// Only a process outside the group can hold them open that long.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Debug)]
pub(super) struct Spec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    pub timeout: Duration,
    pub max_chars: usize,
}

/// Why the command stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// It exited (or was killed by a signal it did not get from us).
    Exited,
    TimedOut,
    Cancelled,
}

#[derive(Debug)]
pub(super) struct Finished {
    pub ending: Ending,
    /// `None` only if the killed leader could not be reaped within the drain timeout.
    pub status: Option<ExitStatus>,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
}

/// Runs `spec` to its end, its timeout or `cancel`, whichever comes first.
pub(super) async fn run(spec: Spec, cancel: &CancellationToken) -> io::Result<Finished> {
    let started = Instant::now();
    let mut command = Command::new(&spec.program);
    add_args(&mut command, &spec.args);
    command
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Backstop for the direct child; the group kill below covers the rest of the tree.
        .kill_on_drop(true);
    new_process_group(&mut command);
    let mut child = command.spawn()?;
    let mut tree = TreeGuard::new(child.id());
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io::Error::other(
            "the command's output pipes were not created",
        ));
    };

    let mut out = Capture::new(spec.max_chars);
    let mut err = Capture::new(spec.max_chars);
    let (ending, mut status) = {
        // Pipes are read while waiting: a command that fills a pipe buffer would block forever.
        let mut readers =
            pin!(async { tokio::join!(out.read_from(stdout), err.read_from(stderr)) });
        let mut deadline = pin!(tokio::time::sleep(spec.timeout));
        let mut pipes_closed = false;
        let ended = loop {
            tokio::select! {
                _ = &mut readers, if !pipes_closed => pipes_closed = true,
                status = child.wait() => break (Ending::Exited, Some(status?)),
                () = &mut deadline => break (Ending::TimedOut, None),
                () = cancel.cancelled() => break (Ending::Cancelled, None),
            }
        };
        // Always kill the group, even after a normal exit: background children (`cmd &`) would
        // be orphans, and they may hold the pipes open.
        tree.kill();
        if !pipes_closed {
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, &mut readers).await;
        }
        ended
    };
    if status.is_none() {
        // Reap the killed leader so its status (the signal) can be reported.
        status = tokio::time::timeout(DRAIN_TIMEOUT, child.wait())
            .await
            .ok()
            .and_then(Result::ok);
    }
    Ok(Finished {
        ending,
        status,
        stdout: out.finish(spec.max_chars),
        stderr: err.finish(spec.max_chars),
        duration: started.elapsed(),
    })
}

#[cfg(not(windows))]
fn add_args(command: &mut Command, args: &[OsString]) {
    command.args(args);
}

#[cfg(windows)]
fn add_args(command: &mut Command, args: &[OsString]) {
    // cmd.exe parses its own command line; Rust's MSVC-style quoting would mangle it.
    for arg in args {
        command.raw_arg(arg);
    }
}

#[cfg(unix)]
fn new_process_group(command: &mut Command) {
    // pgid = the child's pid: the child and everything it starts share a group we can kill
    // at once, and a terminal's signals aimed at the agent do not reach it.
    command.process_group(0);
}

#[cfg(windows)]
fn new_process_group(command: &mut Command) {
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
    command.creation_flags(CREATE_NEW_PROCESS_GROUP);
}

/// Kills the command's whole process tree when dropped, so every exit path — including a
/// cancelled (dropped) tool-call future — leaves nothing running.
#[derive(Debug)]
struct TreeGuard {
    leader: Option<u32>,
}

impl TreeGuard {
    fn new(leader: Option<u32>) -> Self {
        TreeGuard { leader }
    }

    /// Kills the tree once. Called right after the leader is reaped, so its pid (the group id)
    /// cannot have been reused yet in any practical sense.
    fn kill(&mut self) {
        if let Some(leader) = self.leader.take() {
            kill_tree(leader);
        }
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(unix)]
fn kill_tree(leader: u32) {
    use rustix::process::{Pid, Signal, kill_process_group};
    if let Some(pgid) = i32::try_from(leader).ok().and_then(Pid::from_raw) {
        // ESRCH means the group is already empty: nothing left to kill.
        if let Err(error) = kill_process_group(pgid, Signal::KILL)
            && error != rustix::io::Errno::SRCH
        {
            tracing::warn!(pgid = leader, %error, "run_command: could not kill the process group");
        }
    }
}

#[cfg(windows)]
fn kill_tree(leader: u32) {
    // Windows has no group kill; `taskkill /T` walks the tree. Fire and forget: this may run
    // inside Drop, which must not block.
    let _ = std::process::Command::new("taskkill")
        .args(["/T", "/F", "/PID", &leader.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}
