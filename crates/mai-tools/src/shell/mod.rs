//! `run_command` (docs/tools.md#run_command): runs a shell command line for an admin task and
//! reports its exit code and (bounded) output.
//!
//! Owns the tool's definition, its arguments and result shape, and the checks made at each call
//! (role, `[shell]` limits read from the call's config snapshot, cwd). Process handling lives in
//! [`process`], output bounding in [`capture`], the optional Landlock sandbox in [`sandbox`].
//!
//! Must not: run for a non-admin role (the handler re-checks, whatever the registry did); leave
//! any process of the command's tree running after the call returns or is cancelled; buffer
//! unbounded output; be registered unless `[shell] enabled` (the wiring's job — the handler also
//! refuses when a reloaded config turned it off).

mod capture;
mod process;
mod sandbox;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use mai_core::role::{PermissionDenied, Role, require};
use mai_core::tool::{
    Effect, ToolContext, ToolDefinition, ToolDefinitionError, ToolError, TypedTool, Visibility,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use process::{Ending, Finished, Spec};
pub use sandbox::{
    SANDBOX_EXEC, run_sandbox_launcher, sandbox_exec_mode, sandbox_launcher_available,
};

/// The tool's name.
pub const RUN_COMMAND: &str = "run_command";

/// The highest `timeout_seconds` a call may ask for, unless the configured default is higher
/// (then the default is the cap): long enough for a build, short enough that a forgotten
/// `tail -f` does not hold a task for hours.
pub const MAX_TIMEOUT_SECONDS: u64 = 600;

const DESCRIPTION: &str = "Run a shell command on the host and get its exit code, stdout and \
stderr. Use it for builds, tests, git, package managers and system inspection that no other tool \
covers. No stdin (nothing interactive); the command and its child processes are killed at the \
timeout; long output is cut in the middle.";

/// Arguments of `run_command`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandArgs {
    /// Command line for `/bin/sh -c` (Windows: `cmd.exe /C`).
    pub command: String,
    /// Seconds before it is killed. Default from config; at most 600 (or the default if higher).
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<u64>,
    /// Working directory; must exist. Default: the agent's own directory.
    pub cwd: Option<String>,
}

/// The `run_command` handler. `launcher` is the sandbox launcher used when `[shell] sandbox`
/// is on; `None` means the running executable's built-in one (`<exe> sandbox-exec`).
#[derive(Debug, Clone, Default)]
pub struct RunCommand {
    launcher: Option<PathBuf>,
}

/// The `run_command` definition (discoverable, admin only). Register it only when
/// `[shell] enabled`.
pub fn run_command_tool() -> Result<ToolDefinition, ToolDefinitionError> {
    definition(RunCommand::default())
}

/// [`run_command_tool`] with an explicit sandbox launcher (`mai-sandbox`) path.
pub fn run_command_tool_with_launcher(
    launcher: impl Into<PathBuf>,
) -> Result<ToolDefinition, ToolDefinitionError> {
    definition(RunCommand {
        launcher: Some(launcher.into()),
    })
}

fn definition(tool: RunCommand) -> Result<ToolDefinition, ToolDefinitionError> {
    ToolDefinition::typed(
        RUN_COMMAND,
        DESCRIPTION,
        Visibility::Discoverable,
        Role::Admin,
        tool,
    )
    .map(|tool| tool.with_effects(Effect::RunsCommands))
}

/// Why a call failed before the command could run (told to the model as the error).
#[derive(Debug, thiserror::Error)]
enum ShellError {
    #[error(transparent)]
    PermissionDenied(#[from] PermissionDenied),
    #[error("run_command is disabled on this host ([shell] enabled = false)")]
    Disabled,
    #[error("`command` is empty: pass the shell command line to run")]
    EmptyCommand,
    #[error("cwd `{path}` does not exist; pass an existing directory or omit cwd")]
    CwdMissing { path: String },
    #[error("cwd `{path}` is not a directory; pass a directory or omit cwd")]
    CwdNotADirectory { path: String },
    #[error("cwd `{path}` cannot be used: {source}")]
    CwdUnusable { path: String, source: io::Error },
    #[error("could not start `{program}`: {source}")]
    Spawn { program: String, source: io::Error },
    #[error(
        "sandbox launcher not found at `{path}`: leave the launcher unset to use the one built \
         into mai-agent, or set [shell] sandbox = false"
    )]
    LauncherMissing { path: String },
    #[error("{0}")]
    Sandbox(String),
}

impl TypedTool for RunCommand {
    type Args = RunCommandArgs;

    async fn call(&self, ctx: &ToolContext, args: RunCommandArgs) -> Result<Value, ToolError> {
        self.run(ctx, args).await.map_err(ToolError::new)
    }
}

impl RunCommand {
    async fn run(&self, ctx: &ToolContext, args: RunCommandArgs) -> Result<Value, ShellError> {
        // Third gate: the registry already checked, but this tool must never run for a
        // non-admin whatever path reached it.
        require(ctx.role(), Role::Admin)?;
        // Limits come from this call's snapshot, so a config reload applies to the next call.
        let config = &ctx.config().shell;
        if !config.enabled {
            return Err(ShellError::Disabled);
        }
        if args.command.trim().is_empty() {
            return Err(ShellError::EmptyCommand);
        }
        let timeout_seconds = effective_timeout(args.timeout_seconds, config.timeout_seconds);
        let max_chars = usize::try_from(config.max_output_chars).unwrap_or(usize::MAX);
        let cwd = resolve_cwd(args.cwd.as_deref()).await?;
        let (program, argv) = if config.sandbox {
            let launcher = self.launcher()?;
            let argv = launcher.args(&cwd, &args.command);
            (launcher.program, argv)
        } else {
            let (shell, flag) = SHELL;
            (
                PathBuf::from(shell),
                vec![flag.into(), args.command.clone().into()],
            )
        };
        tracing::info!(task = %ctx.task_id(), command = %args.command, cwd = %cwd.display(),
            sandbox = config.sandbox, "run_command");
        let spec = Spec {
            program: program.clone(),
            args: argv,
            cwd,
            timeout: Duration::from_secs(timeout_seconds),
            max_chars,
        };
        let finished = process::run(spec, ctx.cancel_token())
            .await
            .map_err(|source| ShellError::Spawn {
                program: program.display().to_string(),
                source,
            })?;
        if config.sandbox && launcher_refused(&finished) {
            return Err(ShellError::Sandbox(finished.stderr.text.trim().to_owned()));
        }
        Ok(report(&args.command, timeout_seconds, &finished))
    }

    fn launcher(&self) -> Result<sandbox::Launcher, ShellError> {
        match self.launcher.clone() {
            Some(path) if path.is_file() => Ok(sandbox::Launcher::binary(path)),
            Some(path) => Err(ShellError::LauncherMissing {
                path: path.display().to_string(),
            }),
            None => sandbox::Launcher::embedded().map_err(ShellError::Sandbox),
        }
    }
}

#[cfg(unix)]
const SHELL: (&str, &str) = ("/bin/sh", "-c");
#[cfg(windows)]
const SHELL: (&str, &str) = ("cmd.exe", "/C");

/// The requested timeout, clamped to `1..=max(default, MAX_TIMEOUT_SECONDS)`.
fn effective_timeout(requested: Option<u64>, default: u64) -> u64 {
    let cap = default.max(MAX_TIMEOUT_SECONDS);
    requested.unwrap_or(default).clamp(1, cap)
}

/// The directory to run in, absolute (the sandbox launcher is told it after the chdir).
async fn resolve_cwd(cwd: Option<&str>) -> Result<PathBuf, ShellError> {
    let path = match cwd {
        Some(cwd) => PathBuf::from(cwd),
        None => std::env::current_dir().map_err(|source| ShellError::CwdUnusable {
            path: ".".into(),
            source,
        })?,
    };
    let shown = || path.display().to_string();
    match tokio::fs::metadata(&path).await {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(ShellError::CwdNotADirectory { path: shown() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ShellError::CwdMissing { path: shown() });
        }
        Err(source) => {
            return Err(ShellError::CwdUnusable {
                path: shown(),
                source,
            });
        }
    }
    tokio::fs::canonicalize(&path)
        .await
        .map_err(|source| ShellError::CwdUnusable {
            path: shown(),
            source,
        })
}

/// The launcher exits with its own code and message when it could not confine the command.
fn launcher_refused(finished: &Finished) -> bool {
    finished.ending == Ending::Exited
        && finished.status.and_then(|s| s.code()) == Some(sandbox::LAUNCHER_FAILED)
        && finished.stderr.text.starts_with(sandbox::LAUNCHER_PREFIX)
}

/// The result the model sees. A command that ran to its end is a success whatever its exit
/// code; a timeout or cancellation is a failure that still carries the partial output.
fn report(command: &str, timeout_seconds: u64, finished: &Finished) -> Value {
    let exit_code = finished.status.and_then(|s| s.code());
    let mut result = json!({
        "success": finished.ending == Ending::Exited,
        "command": command,
        "exit_code": exit_code,
        "stdout": finished.stdout.text,
        "stderr": finished.stderr.text,
        "timed_out": finished.ending == Ending::TimedOut,
        "truncated": finished.stdout.truncated || finished.stderr.truncated,
        "duration_seconds": (finished.duration.as_secs_f64() * 1000.0).round() / 1000.0,
    });
    if let Some(signal) = finished.status.and_then(signal_of) {
        result["signal"] = json!(signal);
    }
    match finished.ending {
        Ending::Exited => {}
        Ending::TimedOut => {
            result["error"] = json!(format!(
                "timed out after {timeout_seconds} s; the command and all its child processes \
                 were killed (pass a larger timeout_seconds if it needs longer)"
            ));
        }
        Ending::Cancelled => {
            result["error"] = json!(
                "cancelled: the task was stopped; the command and all its child processes were \
                 killed"
            );
            result["cancelled"] = json!(true);
        }
    }
    result
}

#[cfg(unix)]
fn signal_of(status: std::process::ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&status)
}

#[cfg(not(unix))]
fn signal_of(_status: std::process::ExitStatus) -> Option<i32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_defaults_to_config_and_is_capped() {
        assert_eq!(effective_timeout(None, 60), 60);
        assert_eq!(effective_timeout(Some(5), 60), 5);
        assert_eq!(effective_timeout(Some(300), 60), 300);
        assert_eq!(effective_timeout(Some(100_000), 60), MAX_TIMEOUT_SECONDS);
        assert_eq!(effective_timeout(Some(100_000), 7200), 7200);
        assert_eq!(effective_timeout(Some(0), 60), 1);
    }

    #[test]
    fn schema_is_strict_and_small() {
        let tool = run_command_tool().unwrap();
        let schema = tool.parameters();
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["required"], json!(["command"]));
        assert_eq!(tool.min_role(), Role::Admin);
        assert_eq!(tool.visibility(), Visibility::Discoverable);
        assert!(tool.description().len() < 400);
    }
}
