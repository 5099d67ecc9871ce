//! Shared by the integration tests of several crates (included with `#[path]`): what a test does
//! when something outside the workspace it needs is missing ([`peer_missing`]), and where the
//! real MCP peers live ([`peers`]) — the MCP reference servers (npm) and the official Python MCP
//! SDK with its probe client, installed by `testing/peers/setup.sh`.
//!
//! A test that needs a peer returns early when it is missing — after a SKIP line, or, under
//! `CI=true`, never: there the missing peer fails the test, so CI proves the real thing.
//! Everything else about a test stays in its own file.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Whether this run is CI's (`CI=true`), where no test may skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// `what` (a peer a test needs) is missing; `install` is the command that provides it. Under
/// `CI=true` this panics with both; elsewhere it prints a SKIP line and the caller returns.
pub fn peer_missing(what: &str, install: &str) {
    if in_ci() {
        panic!("CI=true and {what}; to install: {install}");
    }
    println!("SKIP: {what}; to install: {install}");
    eprintln!("SKIP: {what}; to install: {install}");
}

/// `testing/peers/setup.sh` in this repository.
fn setup_script() -> PathBuf {
    // Every including crate sits at crates/<name>.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testing/peers/setup.sh")
}

/// The peers directory when it holds everything the tests use; `None` after [`peer_missing`].
/// Runs `setup.sh` once per test binary (idempotent, and fast once installed); when it fails,
/// falls back to an earlier install in `$MAI_PEERS_DIR` or the default location.
pub fn peers() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = setup_script();
        let (from_setup, failure) = match Command::new("bash").arg(&script).output() {
            Ok(out) if out.status.success() => (
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .last()
                    .map(|l| PathBuf::from(l.trim())),
                String::new(),
            ),
            Ok(out) => (None, String::from_utf8_lossy(&out.stderr).trim().to_owned()),
            Err(error) => (None, format!("cannot run bash: {error}")),
        };
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
                && d.join("node/node_modules/.bin/mcp-server-filesystem")
                    .exists()
                && d.join("venv/bin/python").exists()
                && d.join("mcp_probe.py").exists()
                && d.join("paged_server.py").exists()
        });
        if usable.is_none() {
            peer_missing(
                &format!("the MCP peers are not installed ({failure})"),
                "bash testing/peers/setup.sh",
            );
        }
        usable
    })
    .clone()
}
