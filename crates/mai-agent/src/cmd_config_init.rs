//! `mai-agent config init [FILE]`: writes a commented starting configuration — by default to
//! `<data-dir>/config.toml`, the file `serve` reads without `--config` — and never overwrites
//! one. The template (`config_template.toml`) is checked by a test to pass `config check`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

/// The file `config init` writes.
pub const TEMPLATE: &str = include_str!("config_template.toml");

/// Writes [`TEMPLATE`] to `path` (its directory created if missing), refusing an existing file.
pub fn init(path: &Path) -> Result<ExitCode> {
    if path.exists() {
        anyhow::bail!(
            "{} already exists; nothing was written. Edit it and check it with `mai-agent config \
             check {}`, or give another FILE",
            path.display(),
            path.display()
        );
    }
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(TEMPLATE.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", path.display());
    println!(
        "next: set MAI_AGENT__LLM__API_KEY in the environment, put yourself in [permission], then \
         `mai-agent config check` and `mai-agent serve` (docs/quickstart-qq.md)"
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_is_a_valid_config_with_every_secure_default() {
        let config = mai_core::config::Config::parse(TEMPLATE, []).unwrap();
        assert!(!config.shell.enabled && !config.shell.sandbox);
        assert!(!config.channels.onebot.enabled && !config.channels.console.enabled);
        assert!(config.permission.admins.is_empty() && config.permission.users.is_empty());
        assert_eq!(config.server.listen, "127.0.0.1:8760");
        assert_eq!(config.llm.api_key, None);
    }
}
