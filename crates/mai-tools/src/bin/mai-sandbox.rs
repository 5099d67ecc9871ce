//! `mai-sandbox --workdir DIR -- COMMAND`: the launcher `run_command` uses when
//! `[shell] sandbox` is on. It confines itself with Landlock, then execs `/bin/sh -c COMMAND`;
//! see `mai_tools::shell` (module `sandbox`) for the policy. Install it next to `mai-agent`.

fn main() -> std::process::ExitCode {
    mai_tools::shell::run_sandbox_launcher()
}
