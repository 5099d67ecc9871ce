//! The OneBot v11 channel (see docs/design.md, "Hosts and bridges"): QQ through NapCat,
//! Lagrange, go-cqhttp and other implementations, over their forward WebSocket, with this
//! process as the client.
//!
//! It owns one connection (kept open with reconnects), the mapping of OneBot message events to
//! [`IncomingMessage`]s, and the [`ChannelSender`](crate::ChannelSender) registered for its
//! platform on the [`EmbeddedHost`]. It does **not** store messages or run commands: every
//! received message goes to the `inbound` queue given to [`OneBotChannel::start`], whose
//! consumer ingests it, runs `/maitask` and wakes waiting tasks. See docs/channels.md.
//!
//! - [`protocol`]: the JSON shapes (events, CQ codes, `send_msg`, action answers);
//! - [`connection`]: the client loop (connect, read, write, reconnect);
//! - [`sender`]: the sender and the echo correlation it shares with the loop.

mod connection;
pub(crate) mod protocol;
mod sender;

use std::sync::Arc;
use std::time::Duration;

use mai_core::config::OneBotConfig;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::embedded::EmbeddedHost;
use crate::ingest::IncomingMessage;
use connection::Settings;
use sender::{Link, OneBotSender};

/// Where the connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneBotState {
    /// The first connection attempt is under way.
    Connecting,
    /// Connected: sends go out, events come in.
    Connected,
    /// The connection dropped or was refused; the next attempt comes after a backoff delay.
    /// Sends fail meanwhile.
    Reconnecting,
    /// [`OneBotHandle::shutdown`] ran (or the handle was dropped).
    Stopped,
}

/// The channel's state and why it is not connected, if it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneBotStatus {
    pub state: OneBotState,
    /// What ended the last connection or failed the last attempt; cleared on connecting.
    pub last_error: Option<String>,
}

/// Starts OneBot channels.
#[derive(Debug)]
pub struct OneBotChannel {
    _private: (),
}

impl OneBotChannel {
    /// Registers the channel's sender for `config.platform` on `host` and starts connecting to
    /// `config.url` in the background (on the current Tokio runtime), reconnecting until the
    /// returned handle is shut down or dropped. Received messages go to `inbound`, in order.
    /// The caller decides whether `config.enabled`; this starts the channel regardless.
    pub fn start(
        config: OneBotConfig,
        host: Arc<EmbeddedHost>,
        inbound: mpsc::Sender<IncomingMessage>,
    ) -> OneBotHandle {
        let link = Arc::new(Link::new(
            config.url.clone(),
            Duration::from_secs(config.send_timeout_secs.max(1)),
        ));
        host.register_channel(
            &config.platform,
            Arc::new(OneBotSender::new(Arc::clone(&link))),
        );
        let cancel = CancellationToken::new();
        let (events, queued) = mpsc::unbounded_channel();
        let forwarder = tokio::spawn(forward_events(queued, inbound, cancel.clone()));
        let settings = Settings {
            url: config.url,
            access_token: config.access_token,
            platform: config.platform.clone(),
            reconnect_initial: Duration::from_millis(config.reconnect_initial_ms),
            reconnect_max: Duration::from_secs(config.reconnect_max_secs),
            tls: None,
        };
        let client = tokio::spawn(connection::run(
            settings,
            Arc::clone(&link),
            events,
            cancel.clone(),
        ));
        OneBotHandle {
            link,
            cancel,
            tasks: Some((client, forwarder)),
            host,
            platform: config.platform,
        }
    }
}

/// A running OneBot channel. Dropping it stops the channel without waiting; prefer
/// [`shutdown`](Self::shutdown).
pub struct OneBotHandle {
    link: Arc<Link>,
    cancel: CancellationToken,
    tasks: Option<(JoinHandle<()>, JoinHandle<()>)>,
    host: Arc<EmbeddedHost>,
    platform: String,
}

impl std::fmt::Debug for OneBotHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneBotHandle")
            .field("url", &self.link.url())
            .field("platform", &self.platform)
            .field("status", &self.link.status())
            .finish_non_exhaustive()
    }
}

impl OneBotHandle {
    /// The current state and last error.
    pub fn status(&self) -> OneBotStatus {
        self.link.status()
    }

    /// Every status change, for health reporting (and tests waiting for `Connected`).
    pub fn watch_status(&self) -> watch::Receiver<OneBotStatus> {
        self.link.watch_status()
    }

    /// Closes the connection, stops reconnecting and unregisters the sender; returns when the
    /// loop has ended. Sends still waiting fail; messages not yet taken from the hand-off
    /// queue are dropped.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some((client, forwarder)) = self.tasks.take() {
            for task in [client, forwarder] {
                if let Err(error) = task.await {
                    tracing::warn!(%error, "a OneBot channel task ended abnormally");
                }
            }
        }
        self.host.unregister_channel(&self.platform);
    }
}

impl Drop for OneBotHandle {
    fn drop(&mut self) {
        if self.tasks.is_some() {
            self.cancel.cancel();
            self.host.unregister_channel(&self.platform);
        }
    }
}

/// Moves messages from the connection loop's unbounded hand-off queue to `inbound`. Keeps
/// the loop reading answers while the consumer is busy (it may be waiting on a send whose
/// answer the loop has yet to read); the backlog is bounded by how fast people chat.
async fn forward_events(
    mut queued: mpsc::UnboundedReceiver<IncomingMessage>,
    inbound: mpsc::Sender<IncomingMessage>,
    cancel: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            () = cancel.cancelled() => return,
            message = queued.recv() => match message {
                Some(message) => message,
                None => return,
            },
        };
        let delivered = tokio::select! {
            () = cancel.cancelled() => return,
            delivered = inbound.send(message) => delivered.is_ok(),
        };
        if !delivered {
            tracing::warn!("the OneBot inbound queue is closed; received messages are dropped");
            // Keep draining so the connection loop never holds a growing backlog.
            while queued.recv().await.is_some() {}
            return;
        }
    }
}
