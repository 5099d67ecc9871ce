//! Start-up checks: what a loaded config can still get wrong that parsing cannot see — the
//! prompt templates directory, unset `${ENV}` references, the sandbox launcher — and the
//! warnings an operator should read before the service takes requests (no API key, old
//! spellings, `MAI_AGENT_…` variables that match no setting).
//!
//! One function, [`check`], used by `serve` (and the other commands that run the engine) and by
//! `config check`, so the two never disagree; its config part, [`check_config`], also guards
//! every hot reload. Owns no wiring: it reads files and the environment
//! and says what it found; the caller decides how to print it.

use anyhow::{Result, bail};
use mai_core::config::{Config, LlmConfig};

use crate::settings::Settings;

/// The warning for a config without an API key, printed by `serve` before it takes requests.
pub const NO_API_KEY: &str = "warning: no API key set ([llm] api_key / MAI_AGENT__LLM__API_KEY)";

/// What the checks found that does not stop a start.
#[derive(Debug, Default)]
pub struct Findings {
    /// Each a full sentence (without a `warning:` prefix).
    pub warnings: Vec<String>,
}

/// Runs every start-up check on `settings`: `Err` names the first problem that makes the config
/// unusable (and what to do); the warnings come back in [`Findings`].
pub fn check(settings: &Settings) -> Result<Findings> {
    let mut warnings = settings.warnings.clone();
    warnings.extend(check_config(&settings.config)?);
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .collect();
    warnings.extend(mai_core::config::unknown_env_vars(
        names.iter().map(String::as_str),
    ));
    Ok(Findings { warnings })
}

/// The checks of one config alone — the templates dir, `${ENV}` references, the sandbox
/// launcher — also run on every hot reload, so an edit `serve` would refuse at start is not
/// applied either. `Ok` carries a warning that does not stop it.
pub fn check_config(config: &Config) -> Result<Option<String>> {
    check_templates(config)?;
    check_env_references(config)?;
    check_sandbox(config)
}

/// `[prompts] templates_dir`, loaded exactly as the engine will load it.
fn check_templates(config: &Config) -> Result<()> {
    let Some(dir) = &config.prompts.templates_dir else {
        return Ok(());
    };
    if !dir.is_dir() {
        bail!(
            "[prompts] templates_dir {} is not a directory; create it with your *.j2 overrides \
             or remove the key to use the built-in templates",
            dir.display()
        );
    }
    mai_engine::Prompts::with_override_dir(dir).map_err(|error| {
        anyhow::anyhow!(
            "cannot load prompt templates from [prompts] templates_dir {}: {error}",
            dir.display()
        )
    })?;
    Ok(())
}

/// Every `${NAME}` in `[[mcp.servers]] headers` must name a set variable: a server connected
/// with a literal `${TOKEN}` would only fail later, quietly, without its tools.
fn check_env_references(config: &Config) -> Result<()> {
    if !config.mcp.enabled {
        return Ok(());
    }
    for server in &config.mcp.servers {
        for (header, value) in &server.headers {
            if let Err(error) = mai_mcp::substitute_env(value) {
                bail!(
                    "[[mcp.servers]] `{}` header `{header}`: {error}; export it before starting \
                     mai-agent or remove the header",
                    server.name
                );
            }
        }
    }
    Ok(())
}

/// `[shell] sandbox = true` needs the sandbox launcher: an error when the shell is on (every
/// command would fail), a warning when it is off (a reload that turns it on would).
fn check_sandbox(config: &Config) -> Result<Option<String>> {
    if !config.shell.sandbox {
        return Ok(None);
    }
    match mai_tools::shell::sandbox_launcher_available() {
        Ok(_) => Ok(None),
        Err(why) if config.shell.enabled => bail!("[shell] sandbox = true, but {why}"),
        Err(why) => Ok(Some(format!(
            "[shell] sandbox = true, but {why} (the shell is off, so nothing fails yet)"
        ))),
    }
}

/// Whether requests carry an API key (an empty one counts as none).
pub fn has_api_key(llm: &LlmConfig) -> bool {
    llm.api_key
        .as_deref()
        .is_some_and(|key| !key.trim().is_empty())
}

/// One line about the model: where requests go, which models, whether a key is set (never the
/// key itself).
pub fn describe_model(llm: &LlmConfig) -> String {
    let models = &llm.models;
    let or_agent = |name: &Option<String>| name.clone().unwrap_or_else(|| "= agent".into());
    format!(
        "{} (agent {}, replyer {}, title {}; API key {})",
        llm.base_url,
        models.agent,
        or_agent(&models.replyer),
        or_agent(&models.title),
        if has_api_key(llm) { "set" } else { "not set" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandboxed(enabled: bool) -> Config {
        let mut config = Config::default();
        config.shell.enabled = enabled;
        config.shell.sandbox = true;
        config
    }

    #[test]
    fn a_sandboxed_shell_is_refused_exactly_when_the_launcher_is_missing() {
        let launcher = mai_tools::shell::sandbox_launcher_available();
        let on = check_sandbox(&sandboxed(true));
        let off = check_sandbox(&sandboxed(false)).unwrap();
        match launcher {
            Ok(_) => {
                assert!(on.unwrap().is_none());
                assert!(off.is_none());
            }
            Err(why) => {
                let error = on.unwrap_err().to_string();
                assert!(error.contains("[shell] sandbox = true") && error.contains(&why));
                assert!(off.unwrap().contains("nothing fails yet"));
            }
        }
        assert!(check_sandbox(&Config::default()).unwrap().is_none());
    }

    #[test]
    fn the_model_line_says_whether_a_key_is_set_but_never_the_key() {
        let mut llm = LlmConfig {
            api_key: Some("sk-secret".into()),
            ..LlmConfig::default()
        };
        let line = describe_model(&llm);
        assert!(
            line.contains("API key set") && !line.contains("sk-secret"),
            "{line}"
        );
        llm.api_key = Some("  ".into());
        assert!(describe_model(&llm).contains("API key not set"));
    }
}
