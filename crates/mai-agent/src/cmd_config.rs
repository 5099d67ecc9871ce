//! `mai-agent config check [FILE] [--probe]`: loads the config `serve` would load (the same
//! resolution: FILE, else `--config` / `MAI_AGENT_CONFIG`, else `<data-dir>/config.toml`, else the
//! built-in defaults, with the environment applied), runs the same start-up checks
//! ([`crate::preflight`]) and says what it found; `--probe` also asks the model API whether it
//! answers.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use mai_core::config::LlmConfig;
use mai_core::model::{ChatMessage, ChatModel, ChatRequest, ModelPurpose};
use mai_llm::OpenAiClient;

use crate::preflight;
use crate::settings::Settings;

/// Checks the config; `Err` (exit 2) when `serve` would refuse it or the probe finds the model
/// unusable.
pub async fn check(
    config: Option<&Path>,
    data_dir: Option<&Path>,
    probe: bool,
) -> Result<ExitCode> {
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
    println!("  database: {}", settings.database_path().display());
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
