//! Hot reload of the config file while `serve` runs (docs/configuration.md#hot-reload): the file is
//! watched, an edit is parsed with the environment overrides applied, validated and put through
//! the start-up checks of `config check` (templates dir, `${ENV}` references, sandbox launcher),
//! and only a good config is swapped in — a bad edit keeps the last good config and the log says
//! why.
//!
//! Hot: permission, task limits, shell, subagent, splitter, send, search, mcp (servers and fetch),
//! planner_board, polish, plugin_api, `[channels.onebot] guest_replies`. Read once at start-up (a
//! change is logged as needing a restart): llm, storage, server, channels (but guest_replies),
//! host, prompts. Must not apply half a config.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use mai_core::config::Config;
use mai_engine::Engine;
use mai_mcp::McpManager;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::app::sync_fetch_tool;
use crate::settings::load_file;

/// Editors save in bursts (truncate + write, or write a temp file and rename): wait this long
/// after the last change before reading the file.
const SETTLE: Duration = Duration::from_millis(150);

/// Watches the config file until dropped.
pub struct ConfigReloader {
    _watcher: RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ConfigReloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `path` (the directory is watched, so a file replaced by rename is seen).
pub fn watch(path: &Path, engine: Arc<Engine>, mcp: Option<McpManager>) -> Result<ConfigReloader> {
    let path = path
        .canonicalize()
        .with_context(|| format!("cannot watch config file {}", path.display()))?;
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let file = path.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && !event.kind.is_access()
            && event.paths.iter().any(|p| p == &file)
        {
            let _ = tx.send(());
        }
    })
    .context("cannot start the config file watcher")?;
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    let task = tokio::spawn(async move {
        let mut current = engine.config().config();
        while rx.recv().await.is_some() {
            // Let the burst settle: every further change restarts the wait.
            while let Ok(Some(())) = tokio::time::timeout(SETTLE, rx.recv()).await {}
            if let Some(applied) = reload(&path, &engine, mcp.as_ref(), &current).await {
                current = applied;
            }
        }
    });
    Ok(ConfigReloader {
        _watcher: watcher,
        task,
    })
}

/// Reads, validates and applies the file; returns the config now in force when it changed.
async fn reload(
    path: &Path,
    engine: &Arc<Engine>,
    mcp: Option<&McpManager>,
    current: &Config,
) -> Option<Arc<Config>> {
    let config = match load_file(path) {
        Ok(config) => config,
        Err(error) => {
            tracing::warn!("config not reloaded, keeping the last good one: {error:#}");
            return None;
        }
    };
    if &config == current {
        return None;
    }
    // What `serve` and `config check` would refuse at start is not applied now either.
    match crate::preflight::check_config(&config) {
        Ok(Some(warning)) => tracing::warn!("{warning}"),
        Ok(None) => {}
        Err(error) => {
            tracing::warn!("config not reloaded, keeping the last good one: {error:#}");
            return None;
        }
    }
    if let Err(error) = engine.reload_config(config.clone()).await {
        tracing::warn!("config not reloaded, keeping the last good one: {error}");
        return None;
    }
    let restart_only = restart_only_changes(current, &config);
    if !restart_only.is_empty() {
        tracing::warn!(
            "config sections {} changed; they are read at start-up: restart `mai-agent serve` to apply them",
            restart_only.join(", ")
        );
    }
    if config.mcp != current.mcp {
        if let Err(error) = sync_fetch_tool(engine.registry(), &config.mcp) {
            tracing::warn!("fetch tool not updated: {error:#}");
        }
        match mcp {
            Some(manager) => {
                let servers = if config.mcp.enabled {
                    &config.mcp.servers[..]
                } else {
                    &[]
                };
                // Only changed servers restart; removed ones stop and their tools leave the
                // registry through the manager's change feed.
                manager.reconcile(servers).await;
            }
            None if config.mcp.enabled => tracing::warn!(
                "[mcp] was disabled at start-up; restart `mai-agent serve` to start MCP servers"
            ),
            None => {}
        }
    }
    tracing::info!("config reloaded from {}", path.display());
    Some(engine.config().config())
}

/// The sections that changed but only take effect after a restart.
fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if old.llm != new.llm {
        changed.push("[llm]");
    }
    if old.storage != new.storage {
        changed.push("[storage]");
    }
    if old.server != new.server {
        changed.push("[server]");
    }
    // `[channels.onebot] guest_replies` is read live by the inbound pipeline.
    let mut channels = new.channels.clone();
    channels.onebot.guest_replies = old.channels.onebot.guest_replies;
    if old.channels != channels {
        changed.push("[channels]");
    }
    if old.host != new.host {
        changed.push("[host]");
    }
    if old.prompts != new.prompts {
        changed.push("[prompts]");
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_only_sections_are_named() {
        let old = Config::default();
        let mut new = old.clone();
        new.task.max_rounds = 3;
        new.channels.onebot.guest_replies = false;
        assert!(
            restart_only_changes(&old, &new).is_empty(),
            "guest_replies is read live"
        );
        new.channels.onebot.enabled = true;
        assert_eq!(restart_only_changes(&old, &new), ["[channels]"]);
        new.channels = old.channels.clone();
        new.server.listen = "127.0.0.1:9".into();
        new.llm.base_url = "http://127.0.0.1:1/v1".into();
        new.host.kind = mai_core::config::HostKind::Maibot;
        assert_eq!(
            restart_only_changes(&old, &new),
            ["[llm]", "[server]", "[host]"]
        );
    }
}
