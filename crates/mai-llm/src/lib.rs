//! mai-agent's chat model clients: `OpenAiClient` (any OpenAI-compatible Chat Completions API,
//! streaming, retries, lenient parsing of provider quirks), `ScriptedModel` (answers from a
//! script, for tests and demos) and `RecordingModel`/`ReplayModel` (JSONL cassettes).
//!
//! The provider-neutral types and the `ChatModel` trait live in `mai_core::model`; nothing here
//! leaks a provider's wire format to callers.

mod cassette;
mod client;
#[doc(hidden)]
pub mod fuzzing;

mod openai;
mod retry;
mod scripted;
mod stream;

pub use cassette::{CassetteEntry, CassetteOutcome, RecordingModel, ReplayModel, RequestSummary};
pub use client::{MAX_BODY_BYTES, OpenAiClient};
pub use mai_core::config::{LlmConfig, ModelNames};
pub use scripted::ScriptedModel;
pub use stream::MAX_STREAM_BYTES;
