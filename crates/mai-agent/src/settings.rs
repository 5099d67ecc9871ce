//! Where the configuration and the data live: the TOML file (if any), the environment
//! overrides, and the data directory. Reading files and the environment happens here only.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use mai_core::config::{Config, ConfigError, Parsed};

/// The loaded settings of one command.
#[derive(Debug)]
pub struct Settings {
    pub config: Config,
    /// The file the config came from; `None` = embedded defaults (plus environment).
    pub config_path: Option<PathBuf>,
    pub data_dir: PathBuf,
    /// What the operator should hear about the config without it being an error (old
    /// spellings); shown by `serve` and `config check`.
    pub warnings: Vec<String>,
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
        let Parsed { config, warnings } = match &config_path {
            Some(path) => load_file_with_warnings(path)?,
            None => Config::parse_with_warnings("", std::env::vars())
                .map_err(|error| blame(error, None))?,
        };
        Ok(Settings {
            config,
            config_path,
            data_dir,
            warnings,
        })
    }

    /// The SQLite file of the embedded store: `[storage] url` (a path or `sqlite://PATH`,
    /// checked when the config was loaded; a relative one is inside the data directory, not the
    /// working directory, which is `/` under a service manager), else `mai-agent.db` in the data
    /// directory.
    /// With a PostgreSQL `[storage] url` this file is not used.
    pub fn database_path(&self) -> PathBuf {
        match mai_core::config::storage_target(self.config.storage.url.as_deref()) {
            Ok(mai_core::config::StorageTarget::Sqlite(path)) => self.data_dir.join(path),
            // `Default` or PostgreSQL; an invalid URL never gets here (validation refused it).
            _ => self.data_dir.join("mai-agent.db"),
        }
    }

    /// The PostgreSQL URL of `[storage] url`, when it names one.
    pub fn postgres_url(&self) -> Option<String> {
        match mai_core::config::storage_target(self.config.storage.url.as_deref()) {
            Ok(mai_core::config::StorageTarget::Postgres(url)) => Some(url),
            _ => None,
        }
    }

    /// Where the store and the host's tables are, as `[storage]` says.
    pub fn storage_location(&self) -> mai_store::Location {
        let sqlite = mai_store::SqliteOptions {
            synchronous: match self.config.storage.synchronous {
                mai_core::config::SyncMode::Normal => mai_store::Synchronous::Normal,
                mai_core::config::SyncMode::Full => mai_store::Synchronous::Full,
            },
            ..mai_store::SqliteOptions::default()
        };
        match self.postgres_url() {
            Some(url) => mai_store::Location::Postgres {
                url,
                options: mai_store::PgOptions {
                    instance: Some(mai_engine::instance_id(&self.config)),
                    lease: self.config.lease_terms().unwrap_or_default().lease,
                    ..mai_store::PgOptions::default()
                },
            },
            None => mai_store::Location::Sqlite {
                path: self.database_path(),
                options: sqlite,
            },
        }
    }
}

/// Parses one config file with the environment applied; errors name the file, or the
/// environment variable when only the environment is at fault.
pub fn load_file(path: &Path) -> Result<Config> {
    load_file_with_warnings(path).map(|parsed| parsed.config)
}

fn load_file_with_warnings(path: &Path) -> Result<Parsed> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    Config::parse_with_warnings(&text, std::env::vars()).map_err(|error| blame(error, Some(path)))
}

/// Says who is at fault: an environment variable, else the file (or the built-in defaults).
fn blame(error: ConfigError, path: Option<&Path>) -> anyhow::Error {
    match (&error, path) {
        (ConfigError::Env { var, reason }, _) => {
            anyhow!("environment variable {var} is invalid: {reason}; fix or unset it")
        }
        (_, Some(path)) => {
            anyhow::Error::new(error).context(format!("config file {} is invalid", path.display()))
        }
        (_, None) => anyhow::Error::new(error).context("the configuration is invalid"),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn with_url(url: Option<&str>) -> Settings {
        let mut config = Config::default();
        config.storage.url = url.map(str::to_owned);
        Settings {
            config,
            config_path: None,
            data_dir: PathBuf::from("/var/lib/mai-agent"),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_relative_database_path_is_inside_the_data_dir_and_an_absolute_one_stays() {
        let at = |url| with_url(url).database_path();
        assert_eq!(at(None), Path::new("/var/lib/mai-agent/mai-agent.db"));
        assert_eq!(
            at(Some("tasks.db")),
            Path::new("/var/lib/mai-agent/tasks.db")
        );
        assert_eq!(
            at(Some("sqlite://db/tasks.db")),
            Path::new("/var/lib/mai-agent/db/tasks.db")
        );
        assert_eq!(at(Some("/srv/mai.db")), Path::new("/srv/mai.db"));
        assert_eq!(at(Some("sqlite:///srv/mai.db")), Path::new("/srv/mai.db"));
    }
}
