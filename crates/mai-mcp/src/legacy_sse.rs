//! The legacy HTTP+SSE transport (MCP 2024-11-05) for servers that never moved to streamable
//! HTTP. rmcp 3 dropped its client for it, so this is the thin wrapper the architecture allows:
//! rmcp's own message types, carried by reqwest and `eventsource-stream`, handed to rmcp as a
//! (Sink, Stream) pair — rmcp still does the whole protocol.
//!
//! The plumbing: `GET url` opens the event stream; the server's first `endpoint` event names
//! where to POST; each `message` event is one JSON-RPC message for rmcp. Must not build or
//! interpret JSON-RPC itself, and must not send credentials to another origin than the one
//! configured (an `endpoint` on another host is refused).

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures::{Sink, StreamExt};
use reqwest::Url;
use reqwest::header::{ACCEPT, HeaderMap};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::McpError;

/// Messages received but not yet taken by rmcp.
const RECEIVE_QUEUE: usize = 64;

/// A POST of one message failed.
#[derive(Debug, thiserror::Error)]
#[error("legacy SSE: {0}")]
pub struct SseSendError(String);

pub(crate) type SseSink =
    Pin<Box<dyn Sink<TxJsonRpcMessage<RoleClient>, Error = SseSendError> + Send>>;
pub(crate) type SseStream = ReceiverStream<RxJsonRpcMessage<RoleClient>>;

/// Opens the event stream at `url` and waits (up to `wait`) for the `endpoint` event.
pub(crate) async fn connect(
    url: &str,
    headers: HeaderMap,
    wait: Duration,
) -> Result<(SseSink, SseStream), McpError> {
    let base = Url::parse(url).map_err(|e| McpError::Config(format!("url `{url}`: {e}")))?;
    let client = reqwest::Client::builder()
        .connect_timeout(wait)
        .build()
        .map_err(|e| failed(url, e))?;
    let response = client
        .get(base.clone())
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|e| failed(url, e))?;
    if !response.status().is_success() {
        return Err(failed(
            url,
            format!("GET answered HTTP {}", response.status()),
        ));
    }
    let mut events = response.bytes_stream().eventsource();
    let endpoint = endpoint(&mut events, &base, wait).await?;
    let received = forward_messages(events);
    Ok((post_sink(client, endpoint, headers), received))
}

/// The error of connecting to `url`, saying `what` went wrong.
fn failed(url: &str, what: impl std::fmt::Display) -> McpError {
    McpError::Initialize(format!("legacy SSE {url}: {what}"))
}

/// Waits (up to `wait`) for the `endpoint` event and returns where to POST: resolved against
/// `base`, and refused unless it has `base`'s origin.
async fn endpoint<S, E>(events: &mut S, base: &Url, wait: Duration) -> Result<Url, McpError>
where
    S: futures::Stream<Item = Result<Event, E>> + Unpin,
    E: std::fmt::Display,
{
    let url = base.as_str();
    let endpoint = tokio::time::timeout(wait, async {
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| failed(url, e))?;
            if event.event == "endpoint" {
                return Ok(event.data);
            }
        }
        Err(failed(url, "the stream ended before the `endpoint` event"))
    })
    .await
    .map_err(|_| failed(url, format!("no `endpoint` event within {wait:?}")))??;
    let endpoint = base
        .join(endpoint.trim())
        .map_err(|e| failed(url, format!("bad endpoint `{endpoint}`: {e}")))?;
    if endpoint.origin() != base.origin() {
        return Err(failed(
            url,
            format!(
                "the server asked to post to another origin ({endpoint}); refused so the \
                 configured headers are not sent there"
            ),
        ));
    }
    Ok(endpoint)
}

/// Hands each `message` event to rmcp, in order, until the server's stream ends (which ends
/// the returned stream: rmcp sees the server gone).
fn forward_messages<S, E>(mut events: S) -> SseStream
where
    S: futures::Stream<Item = Result<Event, E>> + Unpin + Send + 'static,
    E: Send,
{
    let (tx, rx) = mpsc::channel(RECEIVE_QUEUE);
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Ok(event) = event else { break };
            // The spec's event type is `message`; some servers leave it unnamed.
            if !(event.event == "message" || event.event.is_empty()) {
                continue;
            }
            match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&event.data) {
                Ok(message) => {
                    if tx.send(message).await.is_err() {
                        break;
                    }
                }
                Err(error) => tracing::warn!(%error, "legacy SSE: skipped an unreadable message"),
            }
        }
        // Dropping `tx` ends the stream: rmcp sees the server gone.
    });
    ReceiverStream::new(rx)
}

/// Sends each message rmcp writes as one POST to `endpoint`, with the configured headers.
fn post_sink(client: reqwest::Client, endpoint: Url, headers: HeaderMap) -> SseSink {
    let sink = futures::sink::unfold(
        (client, endpoint, headers),
        |(client, endpoint, headers), message: TxJsonRpcMessage<RoleClient>| async move {
            let response = client
                .post(endpoint.clone())
                .headers(headers.clone())
                .json(&message)
                .send()
                .await
                .map_err(|e| SseSendError(e.to_string()))?;
            if !response.status().is_success() {
                return Err(SseSendError(format!(
                    "POST {endpoint} answered HTTP {}",
                    response.status()
                )));
            }
            Ok((client, endpoint, headers))
        },
    );
    Box::pin(sink)
}
