//! `mai-sandbox --workdir DIR -- COMMAND`: the launcher `run_command` uses when
//! `[shell] sandbox` is on. It confines itself with Landlock, then execs `/bin/sh -c COMMAND`;
//! see `mai_tools::shell` (module `sandbox`) for the policy. `mai-agent` has the same launcher
//! built in (`mai-agent sandbox-exec`) and uses that one; this binary serves tests and other
//! embedders.

fn main() -> std::process::ExitCode {
    mai_tools::shell::run_sandbox_launcher()
}
