//! Record and replay of model calls as a JSONL cassette: one line per call, holding a short
//! summary of the request and the response (or the error) it got.
//!
//! Owns the cassette format, `RecordingModel` (wraps any `ChatModel` and appends a line per call)
//! and `ReplayModel` (answers from a cassette in order). Replay is by order, not by matching
//! requests: a recording of concurrent calls (parallel sub-agents) replays in completion order.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use mai_core::model::{
    ChatModel, ChatRequest, ChatResponse, MessageRole, ModelError, ModelPurpose, StreamDelta,
};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// How much of the last message a summary keeps: enough for a human to recognise the call.
const SUMMARY_CHARS: usize = 200;

/// What a recorded request was, for people reading the cassette and for a divergence check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestSummary {
    pub purpose: ModelPurpose,
    pub messages: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_role: Option<MessageRole>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

impl RequestSummary {
    pub fn of(req: &ChatRequest) -> Self {
        let last = req.messages.last();
        Self {
            purpose: req.purpose,
            messages: req.messages.len(),
            last_role: last.map(|m| m.role),
            last_content: last
                .map(|m| crate::openai::excerpt(&m.content, SUMMARY_CHARS))
                .unwrap_or_default(),
            tools: req.tools.iter().map(|t| t.name.clone()).collect(),
        }
    }
}

/// What a recorded call produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CassetteOutcome {
    Response(ChatResponse),
    Error(ModelError),
}

/// One line of a cassette: `{"request": {…}, "response": {…}}` or `{"request": {…}, "error": {…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CassetteEntry {
    pub request: RequestSummary,
    #[serde(flatten)]
    pub outcome: CassetteOutcome,
}

/// Wraps a model and appends every call it answers to a cassette file.
pub struct RecordingModel<M> {
    inner: M,
    path: PathBuf,
    file: tokio::sync::Mutex<tokio::fs::File>,
}

impl<M> std::fmt::Debug for RecordingModel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingModel")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl<M: ChatModel> RecordingModel<M> {
    /// Opens `path` for appending (creating it if needed); existing lines are kept so a cassette
    /// can be recorded across several runs.
    pub fn create(inner: M, path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| cassette_error(&path, None, format!("cannot open for appending: {e}")))?;
        Ok(Self {
            inner,
            path,
            file: tokio::sync::Mutex::new(tokio::fs::File::from_std(file)),
        })
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn record(
        &self,
        req: &ChatRequest,
        result: Result<ChatResponse, ModelError>,
    ) -> Result<ChatResponse, ModelError> {
        let entry = CassetteEntry {
            request: RequestSummary::of(req),
            outcome: match &result {
                Ok(response) => CassetteOutcome::Response(response.clone()),
                Err(error) => CassetteOutcome::Error(error.clone()),
            },
        };
        let mut line = serde_json::to_string(&entry)
            .map_err(|e| cassette_error(&self.path, None, format!("cannot encode entry: {e}")))?;
        line.push('\n');
        // One write per line under the lock, so concurrent calls never interleave lines.
        let mut file = self.file.lock().await;
        let written = async {
            file.write_all(line.as_bytes()).await?;
            file.flush().await
        }
        .await;
        // A cassette silently missing a call would replay out of step, so a failed write fails
        // the call.
        written.map_err(|e| cassette_error(&self.path, None, format!("cannot append: {e}")))?;
        result
    }
}

#[async_trait]
impl<M: ChatModel> ChatModel for RecordingModel<M> {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let result = self.inner.complete(req).await;
        self.record(req, result).await
    }

    async fn complete_streaming(
        &self,
        req: &ChatRequest,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ChatResponse, ModelError> {
        let result = self.inner.complete_streaming(req, on_delta).await;
        self.record(req, result).await
    }
}

/// Answers calls in order from a cassette.
#[derive(Debug)]
pub struct ReplayModel {
    source: String,
    total: usize,
    /// (line number, entry), in file order.
    entries: Mutex<VecDeque<(usize, CassetteEntry)>>,
}

impl ReplayModel {
    /// Reads and checks the whole cassette now, so a malformed file fails at start-up with its
    /// line number rather than in the middle of a run.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| cassette_error(path, None, format!("cannot read: {e}")))?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses cassette text; `source` names it in error messages. Blank lines are skipped.
    pub fn parse(source: &str, text: &str) -> Result<Self, ModelError> {
        let mut entries = VecDeque::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry: CassetteEntry =
                serde_json::from_str(line).map_err(|e| ModelError::Cassette {
                    path: source.to_owned(),
                    line: Some(index + 1),
                    message: format!(
                        "not a cassette entry ({e}); expected {{\"request\": …, \"response\": …}} \
                         or {{\"request\": …, \"error\": …}}"
                    ),
                })?;
            entries.push_back((index + 1, entry));
        }
        Ok(Self {
            source: source.to_owned(),
            total: entries.len(),
            entries: Mutex::new(entries),
        })
    }

    /// How many recorded calls have not been replayed yet.
    pub fn remaining(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[async_trait]
impl ChatModel for ReplayModel {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let call = self.total - entries.len() + 1;
        let Some((line, entry)) = entries.pop_front() else {
            return Err(ModelError::Exhausted {
                message: format!(
                    "cassette {} has {} recorded calls and all were replayed, but call {call} was \
                     made; the run diverged from the recording — re-record the cassette",
                    self.source, self.total
                ),
            });
        };
        // A different purpose means the run took another path than the recording; answering
        // anyway would feed the engine nonsense.
        if entry.request.purpose != req.purpose {
            return Err(ModelError::Cassette {
                path: self.source.clone(),
                line: Some(line),
                message: format!(
                    "call {call} is for purpose {} but the cassette recorded purpose {} here; the \
                     run diverged from the recording — re-record the cassette",
                    req.purpose.as_str(),
                    entry.request.purpose.as_str()
                ),
            });
        }
        match entry.outcome {
            CassetteOutcome::Response(response) => Ok(response),
            CassetteOutcome::Error(error) => Err(error),
        }
    }
}

fn cassette_error(path: &Path, line: Option<usize>, message: String) -> ModelError {
    ModelError::Cassette {
        path: path.display().to_string(),
        line,
        message,
    }
}
