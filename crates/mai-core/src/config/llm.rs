//! The `[llm]` configuration section: where the model API is, which model serves which purpose,
//! and how patient the client is (timeouts, retries).
//!
//! Owns defaults and validation. Must not read the environment or files: the config loader does
//! that and hands a finished value here.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::model::{ModelError, ModelPurpose};
use serde::{Deserialize, Serialize};

/// `[llm]`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// OpenAI-compatible API root; `/chat/completions` is appended.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set. Local servers (Ollama, vLLM) need none.
    pub api_key: Option<String>,
    pub models: ModelNames,
    /// Whole-request limit for non-streamed calls; for streamed calls, the longest wait for the
    /// response headers and for each next chunk (a long answer that keeps streaming is never cut).
    pub timeout_secs: u64,
    pub connect_timeout_secs: u64,
    /// Retries after the first attempt, for 408/429/5xx, dropped connections and timeouts.
    pub max_retries: u32,
    /// First backoff delay; doubles per retry (plus jitter) up to `retry_max_delay_secs`.
    pub retry_initial_delay_ms: u64,
    pub retry_max_delay_secs: u64,
    /// A `Retry-After` longer than this is not waited for: the call fails at once, because
    /// blocking a task for minutes is worse than reporting the rate limit.
    pub max_retry_after_secs: u64,
    /// Ask for token usage in streamed answers (`stream_options.include_usage`). Turn off for
    /// servers that reject unknown request fields.
    pub stream_include_usage: bool,
    /// Send assistant `reasoning_content` back in later requests. Off by default: DeepSeek's
    /// reasoner rejects it in input messages, while some thinking-with-tools modes want it.
    pub send_reasoning_content: bool,
    /// Extra headers on every request (e.g. OpenRouter's `HTTP-Referer`).
    pub extra_headers: BTreeMap<String, String>,
}

/// `[llm.models]`: the model name per purpose. `replyer` and `title` fall back to `agent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelNames {
    pub agent: String,
    pub replyer: Option<String>,
    pub title: Option<String>,
}

impl Default for ModelNames {
    fn default() -> Self {
        Self {
            agent: "gpt-4o-mini".to_owned(),
            replyer: None,
            title: None,
        }
    }
}

impl ModelNames {
    /// The model name serving `purpose`.
    pub fn for_purpose(&self, purpose: ModelPurpose) -> &str {
        let specific = match purpose {
            ModelPurpose::Agent => None,
            ModelPurpose::Replyer => self.replyer.as_deref(),
            ModelPurpose::Title => self.title.as_deref(),
        };
        specific.unwrap_or(&self.agent)
    }
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".to_owned(),
            api_key: None,
            models: ModelNames::default(),
            timeout_secs: 120,
            connect_timeout_secs: 10,
            max_retries: 3,
            retry_initial_delay_ms: 500,
            retry_max_delay_secs: 20,
            max_retry_after_secs: 60,
            stream_include_usage: true,
            send_reasoning_content: false,
            extra_headers: BTreeMap::new(),
        }
    }
}

// Hand-written so the API key never reaches a log line.
impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("models", &self.models)
            .field("timeout_secs", &self.timeout_secs)
            .field("connect_timeout_secs", &self.connect_timeout_secs)
            .field("max_retries", &self.max_retries)
            .field("retry_initial_delay_ms", &self.retry_initial_delay_ms)
            .field("retry_max_delay_secs", &self.retry_max_delay_secs)
            .field("max_retry_after_secs", &self.max_retry_after_secs)
            .field("stream_include_usage", &self.stream_include_usage)
            .field("send_reasoning_content", &self.send_reasoning_content)
            .field(
                "extra_headers",
                &self.extra_headers.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl LlmConfig {
    /// Checks what would otherwise fail on the first model call, with a message naming the key.
    pub fn validate(&self) -> Result<(), ModelError> {
        let fail = |message: String| Err(ModelError::Config { message });
        let url = self.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return fail(format!(
                "[llm].base_url must start with http:// or https://, got {:?}",
                self.base_url
            ));
        }
        if self.models.agent.trim().is_empty() {
            return fail("[llm.models].agent must name a model, got an empty string".to_owned());
        }
        for (key, name) in [
            ("replyer", &self.models.replyer),
            ("title", &self.models.title),
        ] {
            if name.as_deref().is_some_and(|n| n.trim().is_empty()) {
                return fail(format!(
                    "[llm.models].{key} must name a model or be left out (then the agent model is \
                     used), got an empty string"
                ));
            }
        }
        if self.timeout_secs == 0 {
            return fail("[llm].timeout_secs must be ≥ 1, got 0".to_owned());
        }
        if self.connect_timeout_secs == 0 {
            return fail("[llm].connect_timeout_secs must be ≥ 1, got 0".to_owned());
        }
        if self.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return fail(
                "[llm].api_key is set but empty; remove it or set MAI_AGENT__LLM__API_KEY"
                    .to_owned(),
            );
        }
        Ok(())
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    /// The full Chat Completions URL.
    pub fn endpoint(&self) -> String {
        format!(
            "{}/chat/completions",
            self.base_url.trim().trim_end_matches('/')
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_section_gives_defaults_and_unknown_keys_are_rejected() {
        let config: LlmConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(config, LlmConfig::default());
        config.validate().unwrap();
        let error = serde_json::from_str::<LlmConfig>(r#"{"base_ulr": "x"}"#).unwrap_err();
        assert!(error.to_string().contains("base_ulr"), "{error}");
    }

    #[test]
    fn purposes_fall_back_to_the_agent_model() {
        let mut names = ModelNames {
            agent: "big".into(),
            replyer: None,
            title: Some("small".into()),
        };
        assert_eq!(names.for_purpose(ModelPurpose::Agent), "big");
        assert_eq!(names.for_purpose(ModelPurpose::Replyer), "big");
        assert_eq!(names.for_purpose(ModelPurpose::Title), "small");
        names.replyer = Some("mid".into());
        assert_eq!(names.for_purpose(ModelPurpose::Replyer), "mid");
    }

    #[test]
    fn validation_names_the_key() {
        let config = LlmConfig {
            timeout_secs: 0,
            ..LlmConfig::default()
        };
        let message = config.validate().unwrap_err().to_string();
        assert!(
            message.contains("[llm].timeout_secs must be ≥ 1"),
            "{message}"
        );

        let config = LlmConfig {
            base_url: "localhost:8080".into(),
            ..LlmConfig::default()
        };
        let message = config.validate().unwrap_err().to_string();
        assert!(message.contains("[llm].base_url"), "{message}");
    }

    #[test]
    fn debug_hides_the_api_key() {
        let config = LlmConfig {
            api_key: Some("sk-secret".into()),
            ..LlmConfig::default()
        };
        let text = format!("{config:?}");
        assert!(!text.contains("sk-secret"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn endpoint_tolerates_a_trailing_slash() {
        let config = LlmConfig {
            base_url: "http://127.0.0.1:9/v1/".into(),
            ..LlmConfig::default()
        };
        assert_eq!(config.endpoint(), "http://127.0.0.1:9/v1/chat/completions");
    }
}
