//! Where the configuration and the data live: the TOML file (if any), the environment
//! overrides, and the data directory. Reading files and the environment happens here only.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use mai_core::config::Config;

/// The loaded settings of one command.
#[derive(Debug)]
pub struct Settings {
    pub config: Config,
    /// The file the config came from; `None` = embedded defaults (plus environment).
    pub config_path: Option<PathBuf>,
    pub data_dir: PathBuf,
}

impl Settings {
    /// Loads `config_path` (or `<data_dir>/config.toml` if it exists, else the defaults), applies
    /// `MAI_AGENT__…` environment overrides and validates.
    pub fn load(config_path: Option<&Path>, data_dir: Option<&Path>) -> Result<Settings> {
        let data_dir = data_dir.map_or_else(default_data_dir, Path::to_path_buf);
        let implicit = data_dir.join("config.toml");
        let config_path = match config_path {
            Some(path) => Some(path.to_path_buf()),
            None => implicit.is_file().then_some(implicit),
        };
        let config = match &config_path {
            Some(path) => load_file(path)?,
            None => Config::from_env(std::env::vars())
                .context("the environment overrides (MAI_AGENT__…) are invalid")?,
        };
        Ok(Settings {
            config,
            config_path,
            data_dir,
        })
    }

    /// The SQLite file of the embedded store.
    pub fn database_path(&self) -> PathBuf {
        match self.config.storage.url.as_deref() {
            Some(url) => PathBuf::from(url.strip_prefix("sqlite://").unwrap_or(url)),
            None => self.data_dir.join("mai-agent.db"),
        }
    }
}

/// Parses one config file with the environment applied; errors name the file.
pub fn load_file(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    Config::parse(&text, std::env::vars())
        .with_context(|| format!("config file {} is invalid", path.display()))
}

/// `data_dir` if given, else [`default_data_dir`].
pub fn data_dir_or_default(data_dir: Option<&Path>) -> PathBuf {
    data_dir.map_or_else(default_data_dir, Path::to_path_buf)
}

/// `$MAI_AGENT_DATA_DIR`, else `$XDG_DATA_HOME/mai-agent`, else `~/.local/share/mai-agent`.
fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MAI_AGENT_DATA_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(dir).join("mai-agent");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/mai-agent"),
        None => PathBuf::from(".mai-agent"),
    }
}
