//! `mai-agent config check|init`: the operator's config helpers.
//!
//! `config check [FILE] [--probe]` loads the config `serve` would load (the same resolution:
//! FILE, else `--config` / `MAI_AGENT_CONFIG`, else `<data-dir>/config.toml`, else the built-in
//! defaults, with the environment applied), runs the same start-up checks ([`crate::preflight`])
//! and says what it found; `--probe` also asks the model API whether it answers.
//!
//! `config init [FILE]` writes a commented starting configuration — by default to
//! `<data-dir>/config.toml`, the file `serve` reads without `--config` — and never overwrites
//! one. The template (`config_template.toml`) is checked by a test to pass `config check`.
//!
//! Must not: start the engine or open the store.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use mai_core::config::LlmConfig;
use mai_core::model::{ChatMessage, ChatModel, ChatRequest, ModelPurpose};
use mai_llm::OpenAiClient;

use crate::preflight;
use crate::settings::{self, Settings};

/// The file `config init` writes.
pub const TEMPLATE: &str = include_str!("config_template.toml");

#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Check the config `serve` would use (with environment overrides applied) the way `serve`
    /// checks it, and report the first problem.
    Check {
        /// The file to check (default: the one `serve` would use: --config / MAI_AGENT_CONFIG,
        /// else <data-dir>/config.toml if present, else the built-in defaults).
        file: Option<PathBuf>,
        /// Also ask the model API: list its models and request a one-token completion.
        #[arg(long)]
        probe: bool,
    },
    /// Write a commented starting config (default: <data-dir>/config.toml); never overwrites.
    Init {
        /// Where to write it (default: the --config file, else <data-dir>/config.toml).
        file: Option<PathBuf>,
    },
}

/// Runs one `config` command; `config` and `data_dir` are the global `--config` and
/// `--data-dir`.
pub async fn run(
    command: &ConfigCommand,
    config: Option<&Path>,
    data_dir: Option<&Path>,
) -> Result<ExitCode> {
    match command {
        ConfigCommand::Check { file, probe } => {
            check(file.as_deref().or(config), data_dir, *probe).await
        }
        ConfigCommand::Init { file } => {
            let path = file
                .clone()
                .or_else(|| config.map(Path::to_path_buf))
                .unwrap_or_else(|| settings::data_dir_or_default(data_dir).join("config.toml"));
            init(&path)
        }
    }
}

/// Checks the config; `Err` (exit 2) when `serve` would refuse it or the probe finds the model
/// unusable.
async fn check(config: Option<&Path>, data_dir: Option<&Path>, probe: bool) -> Result<ExitCode> {
    let settings = Settings::load(config, data_dir)?;
    let findings = preflight::check(&settings)?;
    for warning in &findings.warnings {
        eprintln!("warning: {warning}");
    }
    let llm = &settings.config.llm;
    if !preflight::has_api_key(llm) {
        eprintln!("{}", preflight::NO_API_KEY);
    }
    match &settings.config_path {
        Some(path) => println!("{}: ok", path.display()),
        None => println!("built-in defaults (no config file) with the environment: ok"),
    }
    println!("  data:     {}", settings.data_dir.display());
    match settings.postgres_url() {
        Some(_) => {
            println!("  database: PostgreSQL ([storage] url)");
            println!("  chats:    {}", settings.database_path().display());
        }
        None => println!("  database: {}", settings.database_path().display()),
    }
    println!("  model:    {}", preflight::describe_model(llm));
    if probe {
        probe_model(llm).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks the model API for its model list and for a one-token completion with each configured
/// model; prints what works. Only a failed completion is an error: some compatible servers do
/// not list models.
async fn probe_model(llm: &LlmConfig) -> Result<()> {
    let client = OpenAiClient::new(LlmConfig {
        max_retries: 0,
        ..llm.clone()
    })?;
    let mut names = vec![(ModelPurpose::Agent, llm.models.agent.as_str())];
    for purpose in [ModelPurpose::Replyer, ModelPurpose::Title] {
        let name = llm.models.for_purpose(purpose);
        if !names.iter().any(|(_, known)| *known == name) {
            names.push((purpose, name));
        }
    }
    match client.list_models().await {
        Ok(offered) => {
            println!("  GET /models: ok, {} model(s)", offered.len());
            for (_, name) in &names {
                if !offered.iter().any(|id| id == name) {
                    println!("    `{name}` is not in the list (some servers list only a few)");
                }
            }
        }
        Err(error) => println!("  GET /models: failed: {error}"),
    }
    let mut failed = None;
    for (purpose, name) in names {
        let mut request = ChatRequest::new(purpose, vec![ChatMessage::user("Say OK.")]);
        request.max_tokens = Some(1);
        match client.complete(&request).await {
            Ok(_) => println!("  completion with `{name}`: ok"),
            Err(error) => {
                println!("  completion with `{name}`: failed: {error}");
                failed.get_or_insert(name.to_owned());
            }
        }
    }
    match failed {
        Some(name) => anyhow::bail!("the model API does not answer for `{name}` (see above)"),
        None => Ok(()),
    }
}

/// Writes [`TEMPLATE`] to `path` (its directory created if missing), refusing an existing file.
fn init(path: &Path) -> Result<ExitCode> {
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
    let mut file = crate::data_dir::private_file()
        .write(true)
        .create_new(true)
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
