//! Shared by the integration tests of several crates (included with `#[path]`): where the real
//! MCP peers live — the official MCP reference servers (npm) and the official Python MCP SDK with
//! its probe client, installed by `shared/peers/setup.sh`.
//!
//! Tests that need a peer call [`peers`] and return early (after the SKIP line printed here) when
//! the peers cannot be installed; everything else about a test stays in its own file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The peers directory when it holds everything the tests use, or `None` after printing why not.
/// Runs `setup.sh` once per test binary (it is idempotent and fast once installed); without it,
/// falls back to `$MAI_PEERS_DIR` or the default install location.
pub fn peers() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peers/setup.sh");
        let from_setup = Command::new("bash")
            .arg(&script)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|s| s.lines().last().map(|l| PathBuf::from(l.trim())));
        let dir = from_setup.or_else(|| {
            std::env::var_os("MAI_PEERS_DIR")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .map(|h| PathBuf::from(h).join(".cache/mai-agent-peers"))
                })
        });
        let usable = dir.filter(|d| {
            d.join("node/node_modules/.bin/mcp-server-everything")
                .exists()
                && d.join("venv/bin/python").exists()
                && d.join("mcp_probe.py").exists()
        });
        if usable.is_none() {
            println!(
                "SKIP: MCP peers unavailable ({} failed and no installed peers found); run \
                 shared/peers/setup.sh",
                script.display()
            );
        }
        usable
    })
    .clone()
}
