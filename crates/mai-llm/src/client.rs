//! `OpenAiClient`: the `ChatModel` over HTTP to any OpenAI-compatible Chat Completions endpoint.
//!
//! Owns the HTTP exchange: headers, timeouts, turning statuses and transport failures into
//! `ModelError`s that name the URL and what to do, and the retry loop. The wire format lives in
//! `openai`, delta assembly in `stream`, the retry decision in `retry`.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use mai_core::model::{ChatModel, ChatRequest, ChatResponse, ModelError, StreamDelta};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::Value;

use crate::openai::{self, BodyOptions, WireError};
use crate::retry::{RetryPolicy, parse_retry_after};
use crate::stream::{self, StreamError, read_event_stream};
use mai_core::config::LlmConfig;

/// How much of an error body goes into an error message.
const ERROR_DETAIL_CHARS: usize = 500;

/// Largest non-streamed answer read. A real completion is a few hundred KiB at most (even 64k
/// output tokens are ~256 KiB of JSON); a broken or hostile server that sends more is refused
/// with an error instead of being buffered until memory runs out.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Largest body of an error status read for its message (only an excerpt is kept anyway).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// A Chat Completions client. Cheap to share behind an `Arc`; one per `[llm]` configuration.
pub struct OpenAiClient {
    config: LlmConfig,
    http: reqwest::Client,
    endpoint: String,
    retry: RetryPolicy,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("endpoint", &self.endpoint)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// Validates `config` and prepares the HTTP client (no request is sent).
    pub fn new(config: LlmConfig) -> Result<Self, ModelError> {
        config.validate()?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.extra_headers {
            let header_name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| ModelError::Config {
                    message: format!(
                        "[llm].extra_headers has an invalid header name {name:?}: {e}"
                    ),
                })?;
            let header_value = HeaderValue::from_str(value).map_err(|e| ModelError::Config {
                message: format!("[llm].extra_headers.{name} has an invalid value: {e}"),
            })?;
            headers.insert(header_name, header_value);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(config.connect_timeout_secs))
            .user_agent(concat!("mai-agent/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers)
            .build()
            .map_err(|e| ModelError::Config {
                message: format!("could not build the HTTP client: {}", error_chain(&e)),
            })?;
        Ok(Self {
            endpoint: config.endpoint(),
            retry: RetryPolicy::from_config(&config),
            config,
            http,
        })
    }

    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// The Chat Completions URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `GET {base_url}/models`: the ids of the models the server offers. One attempt, no
    /// retries: it is a check (`config check --probe`), not work.
    pub async fn list_models(&self) -> Result<Vec<String>, ModelError> {
        let url = format!(
            "{}/models",
            self.config.base_url.trim().trim_end_matches('/')
        );
        let mut request = self.http.get(&url).timeout(self.config.timeout());
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| at_url(self.request_error(&e), &url))?;
        let response = self
            .check_status(response, "(listing models)")
            .await
            .map_err(|e| at_url(e, &url))?;
        let bytes = self
            .read_body(response)
            .await
            .map_err(|e| at_url(e, &url))?;
        model_ids(&bytes).ok_or_else(|| ModelError::InvalidResponse {
            url,
            detail: "expected {\"data\": [{\"id\": …}, …]}".into(),
        })
    }

    fn body_options(&self, stream: bool) -> BodyOptions {
        BodyOptions {
            stream,
            stream_include_usage: self.config.stream_include_usage,
            send_reasoning_content: self.config.send_reasoning_content,
        }
    }

    fn post(&self, body: &openai::Body<'_>) -> reqwest::RequestBuilder {
        let builder = self.http.post(&self.endpoint).json(body);
        match &self.config.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    async fn attempt(&self, req: &ChatRequest, model: &str) -> Result<ChatResponse, ModelError> {
        let body = openai::request_body(req, model, self.body_options(false));
        let response = self
            .post(&body)
            .timeout(self.config.timeout())
            .send()
            .await
            .map_err(|e| self.request_error(&e))?;
        let response = self.check_status(response, model).await?;
        let bytes = self.read_body(response).await?;
        openai::parse_completion(&bytes).map_err(|e| self.wire_error(e))
    }

    async fn attempt_streaming(
        &self,
        req: &ChatRequest,
        model: &str,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ChatResponse, ModelError> {
        let body = openai::request_body(req, model, self.body_options(true));
        // No whole-request timeout: a long answer may stream for minutes. The wait for headers
        // and for each chunk is bounded instead.
        let response = tokio::time::timeout(self.config.timeout(), self.post(&body).send())
            .await
            .map_err(|_| self.timeout_error())?
            .map_err(|e| self.request_error(&e))?;
        let response = self.check_status(response, model).await?;

        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/json"));
        if is_json {
            // Some servers ignore `stream: true` and answer with one whole completion.
            let bytes = tokio::time::timeout(self.config.timeout(), self.read_body(response))
                .await
                .map_err(|_| self.timeout_error())??;
            let response = openai::parse_completion(&bytes).map_err(|e| self.wire_error(e))?;
            if let Some(reasoning) = &response.message.reasoning_content {
                on_delta(StreamDelta::Reasoning(reasoning.clone()));
            }
            if !response.message.content.is_empty() {
                on_delta(StreamDelta::Text(response.message.content.clone()));
            }
            return Ok(response);
        }

        read_event_stream(
            Box::pin(response.bytes_stream()),
            self.config.timeout(),
            on_delta,
        )
        .await
        .map_err(|e| match e {
            StreamError::Wire(wire) => self.wire_error(wire),
            StreamError::Idle => self.timeout_error(),
            StreamError::Broken(detail) => ModelError::TruncatedStream {
                url: self.endpoint.clone(),
                detail: format!("connection failed while reading: {detail}"),
            },
            StreamError::Truncated(detail) => ModelError::TruncatedStream {
                url: self.endpoint.clone(),
                detail,
            },
            StreamError::TooLarge => ModelError::InvalidResponse {
                url: self.endpoint.clone(),
                detail: format!(
                    "the streamed answer exceeded {} bytes; refused",
                    stream::MAX_STREAM_BYTES
                ),
            },
        })
    }

    /// Reads a success body, refusing one over [`MAX_BODY_BYTES`] (not retried: the same server
    /// would send the same again).
    async fn read_body(&self, response: reqwest::Response) -> Result<Vec<u8>, ModelError> {
        match read_limited(response, MAX_BODY_BYTES).await {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(read)) => Err(ModelError::InvalidResponse {
                url: self.endpoint.clone(),
                detail: format!(
                    "the answer is larger than {MAX_BODY_BYTES} bytes (read {read} before \
                     stopping); refused"
                ),
            }),
            Err(e) => Err(self.request_error(&e)),
        }
    }

    /// Passes success statuses through; turns the others into `ModelError::Status` with the
    /// provider's message and its `Retry-After`.
    async fn check_status(
        &self,
        response: reqwest::Response,
        model: &str,
    ) -> Result<reqwest::Response, ModelError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = parse_retry_after(
            header("retry-after-ms").as_deref(),
            header(RETRY_AFTER.as_str()).as_deref(),
            SystemTime::now(),
        );
        // The body only explains the error; if reading it fails or stalls, report without it.
        let body = tokio::time::timeout(
            self.config.timeout(),
            read_limited(response, MAX_ERROR_BODY_BYTES),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .map(|bytes| String::from_utf8_lossy(&bytes.unwrap_or_else(|_| Vec::new())).into_owned())
        .unwrap_or_default();
        Err(ModelError::Status {
            url: self.endpoint.clone(),
            model: model.to_owned(),
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or("").to_owned(),
            detail: error_detail(&body),
            retry_after,
        })
    }

    fn timeout_error(&self) -> ModelError {
        ModelError::Timeout {
            url: self.endpoint.clone(),
            timeout_secs: self.config.timeout_secs,
        }
    }

    fn request_error(&self, error: &reqwest::Error) -> ModelError {
        if error.is_timeout() {
            return self.timeout_error();
        }
        if error.is_connect() {
            return ModelError::Unreachable {
                url: self.endpoint.clone(),
                detail: root_cause(error),
            };
        }
        ModelError::Transport {
            url: self.endpoint.clone(),
            detail: error_chain(error),
        }
    }

    fn wire_error(&self, error: WireError) -> ModelError {
        match error {
            WireError::Invalid(detail) => ModelError::InvalidResponse {
                url: self.endpoint.clone(),
                detail,
            },
            WireError::Provider { message, retryable } => {
                ModelError::Provider { message, retryable }
            }
        }
    }

    /// Each retry at debug level; the operator hears of a retried call once, when it ends
    /// ([`log_retried`]), with how many attempts it took.
    fn log_retry(&self, attempt: u32, delay: Duration, error: &ModelError) {
        tracing::debug!(
            attempt,
            max_retries = self.config.max_retries,
            delay_ms = delay.as_millis() as u64,
            error = %error,
            "model call failed; retrying"
        );
    }
}

/// One line for a call that needed retries: how many, and how it ended. A call that succeeded
/// or failed at its first attempt logs nothing here (a failure is reported by the caller).
fn log_retried<T>(attempts: u32, result: &Result<T, ModelError>) {
    if attempts <= 1 {
        return;
    }
    let retries = attempts - 1;
    match result {
        Ok(_) => tracing::warn!(retries, "model call succeeded after {retries} retries"),
        Err(error) => tracing::warn!(retries, %error, "model call failed after {retries} retries"),
    }
}

#[async_trait]
impl ChatModel for OpenAiClient {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let model = self.config.models.for_purpose(req.purpose);
        let mut schedule = self.retry.schedule();
        let mut attempt = 1;
        loop {
            let result = self.attempt(req, model).await;
            let delay = match &result {
                Ok(_) => None,
                Err(error) => schedule.next_delay(error),
            };
            match (result, delay) {
                (Err(error), Some(delay)) => {
                    self.log_retry(attempt, delay, &error);
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                (result, _) => {
                    log_retried(attempt, &result);
                    return result;
                }
            }
        }
    }

    async fn complete_streaming(
        &self,
        req: &ChatRequest,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ChatResponse, ModelError> {
        let model = self.config.models.for_purpose(req.purpose);
        let mut schedule = self.retry.schedule();
        let mut attempt = 1;
        loop {
            let mut emitted = false;
            let result = {
                let mut forward = |delta: StreamDelta| {
                    emitted = true;
                    on_delta(delta);
                };
                self.attempt_streaming(req, model, &mut forward).await
            };
            let delay = match &result {
                Ok(_) => None,
                Err(error) => schedule.next_delay(error),
            };
            match (result, delay) {
                (Err(error), Some(delay)) => {
                    self.log_retry(attempt, delay, &error);
                    // The consumer already showed part of a failed answer; tell it to drop it.
                    if emitted {
                        on_delta(StreamDelta::Restart);
                    }
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                (result, _) => {
                    log_retried(attempt, &result);
                    return result;
                }
            }
        }
    }
}

/// The ids of an OpenAI-style model list (`{"data": [{"id": "gpt-4o-mini"}, …]}`).
fn model_ids(body: &[u8]) -> Option<Vec<String>> {
    let list: Value = serde_json::from_slice(body).ok()?;
    list.get("data")?
        .as_array()?
        .iter()
        .map(|model| model.get("id")?.as_str().map(str::to_owned))
        .collect()
}

/// `error` naming `url` instead of the Chat Completions endpoint.
fn at_url(mut error: ModelError, url: &str) -> ModelError {
    match &mut error {
        ModelError::Status { url: at, .. }
        | ModelError::Transport { url: at, .. }
        | ModelError::Unreachable { url: at, .. }
        | ModelError::Timeout { url: at, .. }
        | ModelError::InvalidResponse { url: at, .. } => url.clone_into(at),
        _ => {}
    }
    error
}

/// Reads a body chunk by chunk: `Ok(Err(read))` when it is longer than `max` bytes (reading
/// stops there, so a huge body costs at most `max` bytes of memory).
async fn read_limited(
    mut response: reqwest::Response,
    max: usize,
) -> Result<Result<Vec<u8>, usize>, reqwest::Error> {
    if let Some(length) = response.content_length()
        && length > max as u64
    {
        return Ok(Err(usize::try_from(length).unwrap_or(usize::MAX)));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > max {
            return Ok(Err(body.len() + chunk.len()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok(body))
}

/// The provider's own error message when the body is the usual `{"error": {"message": …}}`,
/// otherwise an excerpt of the body.
fn error_detail(body: &str) -> String {
    let body = body.trim();
    if body.is_empty() {
        return "(empty body)".to_owned();
    }
    let message = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        let error = v.get("error").unwrap_or(&v);
        error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| error.as_str())
            .map(str::to_owned)
    });
    openai::excerpt(message.as_deref().unwrap_or(body), ERROR_DETAIL_CHARS)
}

/// reqwest's top-level message is vague ("error sending request"); the cause chain says why.
/// The innermost cause of `error` (`tcp connect error: Connection refused (os error 111)`,
/// `dns error: …`): what went wrong, without the layers that only repeat the URL.
fn root_cause(error: &dyn std::error::Error) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_detail_prefers_the_provider_message() {
        assert_eq!(
            error_detail(r#"{"error":{"message":"Incorrect API key provided","type":"x"}}"#),
            "Incorrect API key provided"
        );
        assert_eq!(error_detail(r#"{"error":"quota"}"#), "quota");
        assert_eq!(error_detail("  "), "(empty body)");
        assert_eq!(error_detail("Bad Gateway"), "Bad Gateway");
    }

    #[test]
    fn invalid_extra_header_is_a_config_error() {
        let config = LlmConfig {
            extra_headers: [("bad header".to_owned(), "v".to_owned())].into(),
            ..LlmConfig::default()
        };
        let error = OpenAiClient::new(config).unwrap_err();
        assert!(error.to_string().contains("[llm].extra_headers"), "{error}");
    }
}
