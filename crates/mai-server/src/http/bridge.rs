//! `GET /v1/bridge`: the WebSocket the MaiBot plugin opens so mai-agent can call MaiBot
//! (docs/bridge-protocol.md). Behind the same guard as every API route (token, Host, Origin).
//!
//! A thin pump: it reads the plugin's `hello`, attaches the socket to the MaiBot host
//! ([`mai_host::maibot`], which owns the slot, the ids and the timeouts) and moves text frames
//! both ways until the socket closes, the server stops, or a newer bridge replaces this one.
//! Must not: interpret requests or answers itself.

use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mai_host::MaiBotHost;
use tokio_util::sync::CancellationToken;

use super::Api;
use super::error::ApiError;

/// How long a new bridge may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Close codes (RFC 6455): 1000 normal, 1001 going away, 1008 policy violation.
const CLOSE_REPLACED: u16 = 1000;
const CLOSE_STOPPING: u16 = 1001;
const CLOSE_NO_HELLO: u16 = 1008;

pub(crate) async fn upgrade(
    State(api): State<Api>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Some(host) = api.state.bridge.clone() else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this mai-agent runs the embedded host; set [host] kind = \"maibot\" \
             (MAI_AGENT__HOST__KIND=maibot) and restart it to accept a MaiBot bridge",
        ));
    };
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::new(
            rejection.status(),
            format!("GET /v1/bridge is a WebSocket: {rejection}"),
        )
    })?;
    let shutdown = api.shutdown.clone();
    Ok(upgrade
        .on_upgrade(move |socket| serve_bridge(socket, host, shutdown))
        .into_response())
}

async fn serve_bridge(mut socket: WebSocket, host: MaiBotHost, shutdown: CancellationToken) {
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, first_text(&mut socket)).await {
        Ok(Some(frame)) => host.handshake(&frame),
        Ok(None) => return,
        Err(_) => Err(format!("no hello within {HELLO_TIMEOUT:?}")),
    };
    let (hello, answer) = match hello {
        Ok(hello) => hello,
        Err(reason) => {
            tracing::warn!(%reason, "a MaiBot bridge was refused");
            close(&mut socket, CLOSE_NO_HELLO, &reason).await;
            return;
        }
    };
    if socket.send(Message::Text(answer.into())).await.is_err() {
        return;
    }
    let plugin = hello.plugin_version.clone().unwrap_or_default();
    let maibot = hello.maibot_version.clone().unwrap_or_default();
    let mut link = host.attach(hello);
    let generation = link.generation;
    tracing::info!(generation, plugin_version = %plugin, maibot_version = %maibot, "MaiBot bridge connected");
    let why = loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                close(&mut socket, CLOSE_STOPPING, "mai-agent is stopping").await;
                break "mai-agent is stopping";
            }
            _ = link.replaced.cancelled() => {
                close(&mut socket, CLOSE_REPLACED, "a newer bridge replaced this one").await;
                break "replaced by a newer bridge";
            }
            frame = link.outbox.recv() => {
                let Some(frame) = frame else { break "the host dropped the bridge" };
                if socket.send(Message::Text(frame.into())).await.is_err() {
                    break "the socket failed";
                }
            }
            message = socket.recv() => match message {
                Some(Ok(Message::Text(text))) => {
                    if let Some(reply) = host.receive(generation, text.as_str())
                        && socket.send(Message::Text(reply.into())).await.is_err()
                    {
                        break "the socket failed";
                    }
                }
                Some(Ok(Message::Close(_))) | None => break "the plugin closed it",
                Some(Ok(_)) => {} // pings are answered by axum; binary frames are not ours
                Some(Err(_)) => break "the socket failed",
            },
        }
    };
    host.detach(generation);
    tracing::info!(generation, reason = why, "MaiBot bridge disconnected");
}

/// The first text frame, skipping pings; `None` when the socket closed first.
async fn first_text(socket: &mut WebSocket) -> Option<String> {
    loop {
        match socket.recv().await? {
            Ok(Message::Text(text)) => return Some(text.as_str().to_owned()),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let reason: String = reason.chars().take(120).collect();
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}
