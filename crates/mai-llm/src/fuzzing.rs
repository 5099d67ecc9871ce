//! Entry points for the fuzz targets in `fuzz/` (and hostile-input tests): the wire parsers the
//! HTTP client uses, without HTTP. Not a stable API; hidden from the docs.

use std::time::Duration;

use mai_core::model::ChatResponse;

use crate::openai;
use crate::stream::{self, StreamAccumulator};

/// Parses a non-streamed Chat Completions body exactly as `OpenAiClient` does; the error is the
/// message the client would put in its `ModelError`.
pub fn parse_completion(body: &[u8]) -> Result<ChatResponse, String> {
    openai::parse_completion(body).map_err(|e| format!("{e:?}"))
}

/// Folds `data:` payloads into a response as the streaming client does.
pub fn parse_stream_chunks<'a>(
    chunks: impl IntoIterator<Item = &'a str>,
) -> Result<ChatResponse, String> {
    let mut accumulator = StreamAccumulator::default();
    for chunk in chunks {
        accumulator
            .apply_data(chunk, &mut |_| {})
            .map_err(|e| format!("{e:?}"))?;
    }
    accumulator.finish().map_err(|e| format!("{e:?}"))
}

/// Reads a whole server-sent-event body, delivered in pieces of `piece_len` bytes (so events and
/// UTF-8 sequences are split at arbitrary points), as the streaming client does.
pub async fn read_event_stream(body: &[u8], piece_len: usize) -> Result<ChatResponse, String> {
    let pieces: Vec<Result<Vec<u8>, std::io::Error>> = body
        .chunks(piece_len.max(1))
        .map(|piece| Ok(piece.to_vec()))
        .collect();
    stream::read_event_stream(
        futures::stream::iter(pieces),
        Duration::from_secs(60),
        &mut |_| {},
    )
    .await
    .map_err(|e| format!("{e:?}"))
}
