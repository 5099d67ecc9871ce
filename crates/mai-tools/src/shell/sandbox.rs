//! The optional OS sandbox of `run_command` (`[shell] sandbox = true`): Linux Landlock with the
//! host filesystem read-only, the work directory (and `/dev/null`) writable, and TCP bind/connect
//! denied where the kernel has Landlock ABI v4.
//!
//! Landlock restricts the calling process and is inherited, so it must be applied between fork
//! and exec of the command — never in the agent itself. `pre_exec` would need `unsafe` (forbidden
//! in this workspace), so a tiny launcher does it instead: `mai-sandbox --workdir DIR -- CMD`
//! confines itself, then `exec`s `/bin/sh -c CMD` (same pid, so the process-group kill still
//! covers it). The launcher fails closed: if Landlock cannot be enforced it runs nothing, exits
//! with [`LAUNCHER_FAILED`] and says why on stderr after [`LAUNCHER_PREFIX`].
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
/// File name of the launcher binary, looked for next to the running executable.
const LAUNCHER_NAME: &str = "mai-sandbox";

/// `mai-sandbox` in the directory of the running executable (where it is installed with
/// `mai-agent`).
pub(super) fn default_launcher() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(
        exe.parent()?
            .join(format!("{LAUNCHER_NAME}{}", std::env::consts::EXE_SUFFIX)),
    )
}

/// The launcher's arguments for running `command` with `workdir` writable.
pub(super) fn launcher_args(workdir: &Path, command: &str) -> Vec<OsString> {
    vec![
        "--workdir".into(),
        workdir.into(),
        "--".into(),
        command.into(),
    ]
}

/// The whole `mai-sandbox` program: confine this process, then become `/bin/sh -c CMD`.
/// Returns only on failure.
pub fn run_sandbox_launcher() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let [flag, workdir, separator, command] = args.as_slice() else {
        return refuse("usage: mai-sandbox --workdir DIR -- COMMAND");
    };
    if flag != "--workdir" || separator != "--" {
        return refuse("usage: mai-sandbox --workdir DIR -- COMMAND");
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
