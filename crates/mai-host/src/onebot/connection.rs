//! The client loop: connects to the implementation's forward WebSocket (with the access token),
//! reads frames until the connection drops, writes the actions the senders queue, and
//! reconnects by the shared capped exponential [`Backoff`] until shut down.
//!
//! It is the only reader and writer of the socket. It must not block reading on anything
//! slow: events go to an unbounded hand-off queue (see [`super::forward_events`]) because a
//! consumer handling a message may itself be waiting for a send's answer, which only this
//! loop can read. Nothing a peer sends may end the loop: a bad frame is logged and skipped, a
//! broken connection is retried.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use mai_core::backoff::Backoff;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, header::AUTHORIZATION};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

use super::OneBotState;
use super::protocol::{Frame, parse_frame};
use super::sender::{Link, Live};
use crate::ingest::IncomingMessage;

/// How long opening the connection (TCP, TLS, upgrade) may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Frames above this are dropped unread (tungstenite ends the connection above
/// `MAX_MESSAGE_BYTES`); message events are a few KiB, base64 media is what gets this big.
const MAX_FRAME_BYTES: usize = 1024 * 1024;
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Frames the senders may queue ahead of the socket.
const OUTGOING_QUEUE: usize = 64;
/// Missed heartbeats before a silent connection counts as dead.
const MISSED_HEARTBEATS: u32 = 3;
/// How much of a bad frame the log shows.
const LOG_PREVIEW_CHARS: usize = 200;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What the loop needs from the config.
pub(crate) struct Settings {
    pub url: String,
    pub access_token: Option<String>,
    pub platform: String,
    pub reconnect_initial: Duration,
    pub reconnect_max: Duration,
    /// The TLS client config of a `wss://` url, built on first use (it reads the system's
    /// root certificates).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// Runs until `cancel` fires; the status ends `Stopped`.
pub(crate) async fn run(
    mut settings: Settings,
    link: Arc<Link>,
    events: mpsc::UnboundedSender<IncomingMessage>,
    cancel: CancellationToken,
) {
    let backoff = Backoff::new(settings.reconnect_initial, settings.reconnect_max);
    // Failed attempts since the last connection that worked.
    let mut retries: u32 = 0;
    loop {
        let attempt = tokio::select! {
            () = cancel.cancelled() => break,
            attempt = connect(&mut settings) => attempt,
        };
        let error = match attempt {
            Ok(socket) => {
                tracing::info!(url = %settings.url, "OneBot connected");
                retries = 0;
                match serve(socket, &settings, &link, &events, &cancel).await {
                    Ended::Shutdown => break,
                    Ended::Dropped(why) => why,
                }
            }
            Err(why) => why,
        };
        let delay = backoff.delay(retries);
        retries = retries.saturating_add(1);
        tracing::warn!(
            url = %settings.url,
            error = %error,
            retry_in_ms = delay.as_millis(),
            "OneBot connection down; reconnecting"
        );
        link.set_status(OneBotState::Reconnecting, Some(error));
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(delay) => {}
        }
    }
    let last_error = link.status().last_error;
    link.set_status(OneBotState::Stopped, last_error);
    tracing::info!(url = %settings.url, "OneBot channel stopped");
}

/// Opens the WebSocket; the error says what to fix.
async fn connect(settings: &mut Settings) -> Result<Socket, String> {
    let mut request = settings
        .url
        .as_str()
        .into_client_request()
        .map_err(|error| format!("invalid OneBot url `{}`: {error}", settings.url))?;
    if let Some(token) = settings.access_token.as_deref().filter(|t| !t.is_empty()) {
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            "[channels.onebot] access_token contains characters not allowed in a header".to_owned()
        })?;
        request.headers_mut().insert(AUTHORIZATION, value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES));
    let tls = if request.uri().scheme_str() == Some("wss") {
        Some(tls_connector(&mut settings.tls)?)
    } else {
        None
    };
    let opening =
        tokio_tungstenite::connect_async_tls_with_config(request, Some(config), true, tls);
    match tokio::time::timeout(CONNECT_TIMEOUT, opening).await {
        Ok(Ok((socket, _response))) => Ok(socket),
        Ok(Err(error)) => Err(connect_error(&settings.url, error)),
        Err(_) => Err(format!(
            "connecting to {} took longer than {} s",
            settings.url,
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}

/// TLS for `wss://`: the system's root certificates, aws-lc-rs as the explicit crypto provider
/// (rustls would panic on a missing process-wide default otherwise).
fn tls_connector(cached: &mut Option<Arc<rustls::ClientConfig>>) -> Result<Connector, String> {
    if let Some(config) = cached {
        return Ok(Connector::Rustls(Arc::clone(config)));
    }
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (_added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 || !found.errors.is_empty() {
        tracing::debug!(ignored, errors = ?found.errors, "some system root certificates were not loaded");
    }
    if roots.is_empty() {
        return Err(
            "wss:// needs trusted root certificates, and none were found on this system \
             (install ca-certificates, or use ws:// to a local implementation)"
                .to_owned(),
        );
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("cannot set up TLS: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let config = Arc::new(config);
    *cached = Some(Arc::clone(&config));
    Ok(Connector::Rustls(config))
}

fn connect_error(url: &str, error: tungstenite::Error) -> String {
    match error {
        tungstenite::Error::Http(response) if matches!(response.status().as_u16(), 401 | 403) => {
            format!(
                "the OneBot server at {url} refused the access token (HTTP {}): set \
                 [channels.onebot] access_token to the token configured in the implementation",
                response.status()
            )
        }
        tungstenite::Error::Http(response) => {
            format!(
                "the OneBot server at {url} answered HTTP {}",
                response.status()
            )
        }
        other => format!("cannot connect to {url}: {other}"),
    }
}

/// How a connection ended.
enum Ended {
    Shutdown,
    Dropped(String),
}

/// Serves one open connection until it drops or the channel shuts down.
async fn serve(
    mut socket: Socket,
    settings: &Settings,
    link: &Link,
    events: &mpsc::UnboundedSender<IncomingMessage>,
    cancel: &CancellationToken,
) -> Ended {
    let (outgoing, mut queued) = mpsc::channel::<String>(OUTGOING_QUEUE);
    let live = Arc::new(Live::new(outgoing));
    link.set_current(Some(Arc::clone(&live)));
    link.set_status(OneBotState::Connected, None);
    let mut heartbeat: Option<Duration> = None;
    let mut last_heard = Instant::now();
    let ended = loop {
        // Only once the implementation announced its heartbeat interval is silence a failure.
        let deadline = heartbeat.map(|interval| last_heard + interval * MISSED_HEARTBEATS);
        tokio::select! {
            () = cancel.cancelled() => {
                // Best effort: the peer may already be gone.
                let _ = socket.close(None).await;
                break Ended::Shutdown;
            }
            frame = queued.recv() => {
                let Some(frame) = frame else {
                    // `live` holds the sender, so the queue cannot close while serving.
                    continue;
                };
                if let Err(error) = socket.send(Message::text(frame)).await {
                    break Ended::Dropped(format!("sending to OneBot failed: {error}"));
                }
            }
            message = socket.next() => {
                let message = match message {
                    None => break Ended::Dropped("the OneBot server closed the connection".into()),
                    Some(Err(error)) => break Ended::Dropped(format!("reading from OneBot failed: {error}")),
                    Some(Ok(message)) => message,
                };
                last_heard = Instant::now();
                if message.len() > MAX_FRAME_BYTES {
                    tracing::warn!(bytes = message.len(), limit = MAX_FRAME_BYTES, "skipping an oversized OneBot frame");
                    continue;
                }
                let text = match message {
                    Message::Text(text) => text.as_str().to_owned(),
                    Message::Binary(bytes) => match String::from_utf8(bytes.to_vec()) {
                        Ok(text) => text,
                        Err(_) => {
                            tracing::warn!(bytes = bytes.len(), "skipping a binary OneBot frame that is not UTF-8");
                            continue;
                        }
                    },
                    Message::Close(frame) => {
                        let why = frame.map_or_else(String::new, |frame| format!(" ({} {})", frame.code, frame.reason));
                        break Ended::Dropped(format!("the OneBot server closed the connection{why}"));
                    }
                    // tungstenite answers pings itself.
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
                };
                if let Some(interval) = handle_frame(&text, settings, &live, events) {
                    heartbeat = Some(interval);
                }
            }
            () = sleep_until(deadline) => {
                break Ended::Dropped(format!(
                    "no frame from OneBot for {} heartbeat intervals",
                    MISSED_HEARTBEATS
                ));
            }
        }
    };
    link.set_current(None);
    live.close();
    ended
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Acts on one text frame; returns the heartbeat interval when the frame announced one.
fn handle_frame(
    text: &str,
    settings: &Settings,
    live: &Live,
    events: &mpsc::UnboundedSender<IncomingMessage>,
) -> Option<Duration> {
    match parse_frame(text, &settings.platform) {
        Ok(Frame::Message(message)) => {
            if events.send(message).is_err() {
                tracing::warn!("dropping a OneBot message: the channel is shutting down");
            }
        }
        Ok(Frame::SkippedMessage(why)) => tracing::debug!(why, "OneBot message not forwarded"),
        Ok(Frame::Heartbeat { interval_ms }) => {
            return interval_ms.filter(|ms| *ms > 0).map(Duration::from_millis);
        }
        Ok(Frame::Lifecycle { sub_type }) => {
            tracing::info!(sub_type = %sub_type, "OneBot lifecycle event");
        }
        Ok(Frame::OtherEvent { post_type, detail }) => {
            tracing::debug!(post_type = %post_type, detail = %detail, "OneBot event ignored");
        }
        Ok(Frame::Response(response)) => {
            let answered = response
                .echo
                .clone()
                .is_some_and(|echo| live.answer(&echo, response.clone()));
            if !answered {
                // A late answer to a send that timed out, or the implementation telling us
                // something unprompted (some report a bad token this way).
                if response.succeeded() {
                    tracing::debug!(echo = ?response.echo, "OneBot answer nobody waits for");
                } else {
                    tracing::warn!(echo = ?response.echo, failure = %response.failure(), "OneBot reported a failure nobody waits for");
                }
            }
        }
        Err(error) => tracing::warn!(
            error = %error,
            frame = %preview(text),
            "skipping an unreadable OneBot frame"
        ),
    }
    None
}

fn preview(text: &str) -> String {
    let mut shown: String = text.chars().take(LOG_PREVIEW_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_is_bounded() {
        let long = "x".repeat(1000);
        assert_eq!(preview(&long).chars().count(), LOG_PREVIEW_CHARS + 1);
        assert_eq!(preview("short"), "short");
    }
}
