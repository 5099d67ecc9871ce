//! The optional OS sandbox of `run_command` (`[shell] sandbox = true`): Linux Landlock with the
//! host filesystem read-only, the work directory (and `/dev/null`) writable, and TCP bind/connect
//! denied where the kernel has Landlock ABI v4.
//!
//! Landlock restricts the calling process and is inherited, so it must be applied between fork
//! and exec of the command — never in the agent itself. `pre_exec` would need `unsafe` (forbidden
//! in this workspace), so a tiny launcher does it instead: `--workdir DIR -- CMD` confines
//! itself, then `exec`s `/bin/sh -c CMD` (same pid, so the process-group kill still covers it).
//! The launcher is built into `mai-agent` as the hidden mode `mai-agent sandbox-exec …`
//! ([`sandbox_exec_mode`]), which `run_command` re-executes by default, so one installed binary
//! has everything; the stand-alone `mai-sandbox` binary is the same code (tests, other
//! embedders). It fails closed: if Landlock cannot be enforced it runs nothing, exits with
//! [`LAUNCHER_FAILED`] and says why on stderr after [`LAUNCHER_PREFIX`]. `--check` confines
//! itself and reports what is enforced, running nothing ([`sandbox_launcher_available`]).
//!
//! Not covered (Landlock limits): UDP and other non-TCP sockets, abstract unix sockets, and
//! processes the command reaches over IPC that are not themselves confined.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit code of a launcher that refused to run the command.
pub(super) const LAUNCHER_FAILED: i32 = 125;
/// How the launcher's own error messages start on stderr.
pub(super) const LAUNCHER_PREFIX: &str = "mai-sandbox:";
/// The hidden first argument that turns `mai-agent` into the launcher.
pub const SANDBOX_EXEC: &str = "sandbox-exec";

/// How to start the launcher: a program and the arguments before the launcher's own.
#[derive(Debug, Clone)]
pub(super) struct Launcher {
    pub(super) program: PathBuf,
    pub(super) leading: Vec<OsString>,
}

impl Launcher {
    /// A stand-alone launcher binary (`mai-sandbox`).
    pub(super) fn binary(path: PathBuf) -> Launcher {
        Launcher {
            program: path,
            leading: Vec::new(),
        }
    }

    /// The running executable's built-in launcher: `<current exe> sandbox-exec …`.
    pub(super) fn embedded() -> Result<Launcher, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the running executable to re-execute: {e}"))?;
        Ok(Launcher {
            program: exe,
            leading: vec![SANDBOX_EXEC.into()],
        })
    }

    /// The full argument list for running `command` with `workdir` writable.
    pub(super) fn args(&self, workdir: &Path, command: &str) -> Vec<OsString> {
        let mut args = self.leading.clone();
        args.extend([
            "--workdir".into(),
            workdir.into(),
            "--".into(),
            command.into(),
        ]);
        args
    }
}

/// For the binary's `main`, first thing: when invoked as `<exe> sandbox-exec ARGS…`, runs the
/// launcher with `ARGS` and returns its exit code (only on failure: on success the process has
/// become the command); otherwise `None` and the program goes on as usual.
pub fn sandbox_exec_mode() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != SANDBOX_EXEC {
        return None;
    }
    Some(launch(args.collect()))
}

/// Whether `[shell] sandbox = true` can work with the running executable: runs its built-in
/// launcher's `--check`. `Ok` says what is enforced (`"fs"`, or `"fs,net"` with TCP denied);
/// `Err` says why not and what to do. Meant for the binary (`mai-agent`), whose `main` calls
/// [`sandbox_exec_mode`].
pub fn sandbox_launcher_available() -> Result<String, String> {
    let launcher = Launcher::embedded()?;
    let output = std::process::Command::new(&launcher.program)
        .args(&launcher.leading)
        .arg("--check")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "cannot run `{} {SANDBOX_EXEC}`: {e}",
                launcher.program.display()
            )
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if output.status.success() && !stdout.is_empty() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(match stderr.trim().strip_prefix(LAUNCHER_PREFIX) {
        Some(reason) => reason.trim().to_owned(),
        None => format!(
            "`{}` has no built-in sandbox launcher; use the mai-agent binary, or set [shell] \
             sandbox = false",
            launcher.program.display()
        ),
    })
}

/// The whole stand-alone `mai-sandbox` program: confine this process, then become
/// `/bin/sh -c CMD`. Returns only on failure.
pub fn run_sandbox_launcher() -> ExitCode {
    launch(std::env::args_os().skip(1).collect())
}

const USAGE: &str = "usage: --workdir DIR -- COMMAND, or --check";

/// The launcher on its own arguments: `--workdir DIR -- COMMAND`, or `--check`.
fn launch(args: Vec<OsString>) -> ExitCode {
    if let [check] = args.as_slice()
        && check == "--check"
    {
        return match confine(&std::env::temp_dir()) {
            Ok(confined) => {
                println!("{confined}");
                ExitCode::SUCCESS
            }
            Err(why) => refuse(&format!(
                "Landlock cannot be enforced here ({why}). Disable [shell] sandbox or run on a \
                 Linux kernel with Landlock enabled"
            )),
        };
    }
    let [flag, workdir, separator, command] = args.as_slice() else {
        return refuse(USAGE);
    };
    if flag != "--workdir" || separator != "--" {
        return refuse(USAGE);
    }
    let confined = match confine(Path::new(workdir)) {
        Ok(confined) => confined,
        Err(why) => {
            return refuse(&format!(
                "cannot sandbox the command ({why}); nothing was run. Disable [shell].sandbox or \
                 run on a Linux kernel with Landlock enabled"
            ));
        }
    };
    exec_shell(command, confined)
}

fn refuse(message: &str) -> ExitCode {
    eprintln!("{LAUNCHER_PREFIX} {message}");
    ExitCode::from(LAUNCHER_FAILED as u8)
}

#[cfg(unix)]
fn exec_shell(command: &OsString, confined: &str) -> ExitCode {
    use std::os::unix::process::CommandExt;
    // `MAI_SANDBOX` tells the command (and tests) what is enforced: "fs" or "fs,net".
    let error = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .env("MAI_SANDBOX", confined)
        .exec();
    refuse(&format!("cannot run /bin/sh: {error}"))
}

#[cfg(not(unix))]
fn exec_shell(_command: &OsString, _confined: &str) -> ExitCode {
    refuse("the sandbox is only available on Linux")
}

/// Applies the Landlock ruleset to this process. Returns what is enforced.
#[cfg(target_os = "linux")]
fn confine(workdir: &Path) -> Result<&'static str, ConfineError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
        path_beneath_rules,
    };
    // The newest ABI this code was written against; older kernels get the subset they have
    // (best effort), but filesystem confinement itself is required below.
    const TARGET: ABI = ABI::V5;
    let network = network_rules_supported();
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(TARGET))?;
    if network {
        // Handled with no allow rule: every TCP bind and connect is denied.
        ruleset = ruleset.handle_access(AccessNet::from_all(TARGET))?;
    }
    let status = ruleset
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(TARGET)))?
        .add_rules(path_beneath_rules(
            [workdir, Path::new("/dev/null")],
            AccessFs::from_all(TARGET),
        ))?
        .restrict_self()?;
    match status.ruleset {
        RulesetStatus::NotEnforced => Err(ConfineError::Unsupported),
        _ if network => Ok("fs,net"),
        _ => Ok("fs"),
    }
}

/// Whether the kernel can deny TCP (Landlock ABI v4); asked by creating, not applying, a ruleset.
#[cfg(target_os = "linux")]
fn network_rules_supported() -> bool {
    use landlock::{ABI, Access, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr};
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::from_all(ABI::V4))
        .and_then(Ruleset::create)
        .is_ok()
}

#[cfg(not(target_os = "linux"))]
fn confine(_workdir: &Path) -> Result<&'static str, ConfineError> {
    Err(ConfineError::Unsupported)
}

/// Why the launcher could not confine itself.
#[derive(Debug, thiserror::Error)]
enum ConfineError {
    #[error("Landlock is not available: not Linux, or not built into or enabled in this kernel")]
    Unsupported,
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Landlock(#[from] landlock::RulesetError),
}
