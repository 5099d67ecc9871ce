//! The outbound half of the OneBot channel: the [`ChannelSender`] the host calls, and the
//! [`Link`] it shares with the connection loop — the live connection (if any), the actions
//! waiting for their `echo`-correlated answers, and the published status.
//!
//! It owns echo allocation and answer correlation. It must not touch the socket itself (the
//! connection loop is the only reader and writer) and must never report a message as sent
//! without the implementation's answer: no connection, a lost connection or a timeout is an
//! `Err`, a failed retcode is `Delivery::Rejected`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use mai_core::host::{Delivery, HostError, StreamInfo};
use tokio::sync::{mpsc, oneshot, watch};

use super::protocol::{ActionResponse, send_msg_mentioning};
use super::{OneBotState, OneBotStatus};
use crate::channels::ChannelSender;

/// What the connection loop and the senders share.
pub(crate) struct Link {
    url: String,
    send_timeout: Duration,
    current: RwLock<Option<Arc<Live>>>,
    status: watch::Sender<OneBotStatus>,
    /// Echoes are `<prefix>-<n>`: the prefix differs per channel start, so an answer meant for
    /// an earlier process or channel instance can never be taken for one of ours.
    echo_prefix: String,
    next_echo: AtomicU64,
}

impl Link {
    pub(crate) fn new(url: String, send_timeout: Duration) -> Self {
        let (status, _) = watch::channel(OneBotStatus {
            state: OneBotState::Connecting,
            last_error: None,
        });
        Link {
            url,
            send_timeout,
            current: RwLock::new(None),
            status,
            echo_prefix: format!("mai-{:08x}", rand::random::<u32>()),
            next_echo: AtomicU64::new(1),
        }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn status(&self) -> OneBotStatus {
        self.status.borrow().clone()
    }

    pub(crate) fn watch_status(&self) -> watch::Receiver<OneBotStatus> {
        self.status.subscribe()
    }

    pub(crate) fn set_status(&self, state: OneBotState, last_error: Option<String>) {
        self.status.send_replace(OneBotStatus { state, last_error });
    }

    /// Makes `live` the connection sends go to (`None`: there is none).
    pub(crate) fn set_current(&self, live: Option<Arc<Live>>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = live;
    }

    fn current(&self) -> Option<Arc<Live>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn next_echo(&self) -> String {
        let n = self.next_echo.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.echo_prefix)
    }

    /// Why sends fail right now.
    fn down(&self) -> String {
        let status = self.status();
        let state = match status.state {
            OneBotState::Stopped => "the OneBot channel is shut down",
            _ => "the OneBot connection is down (reconnecting)",
        };
        match status.last_error {
            Some(error) => format!("{state}; last error: {error}"),
            None => state.to_owned(),
        }
    }
}

/// One open WebSocket connection as the senders see it: where to queue frames, and the
/// actions waiting for an answer on it. Answers never cross connections: OneBot answers an
/// action on the connection that carried it, so closing drops every waiter.
pub(crate) struct Live {
    outgoing: mpsc::Sender<String>,
    /// `None` once closed: nothing may wait on a connection that is gone.
    waiting: Mutex<Option<HashMap<String, oneshot::Sender<ActionResponse>>>>,
}

impl Live {
    pub(crate) fn new(outgoing: mpsc::Sender<String>) -> Self {
        Live {
            outgoing,
            waiting: Mutex::new(Some(HashMap::new())),
        }
    }

    fn register(&self, echo: &str) -> Option<oneshot::Receiver<ActionResponse>> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let (answer, receiver) = oneshot::channel();
        waiting.as_mut()?.insert(echo.to_owned(), answer);
        Some(receiver)
    }

    fn forget(&self, echo: &str) {
        if let Some(waiting) = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            waiting.remove(echo);
        }
    }

    /// Hands `response` to the send waiting for `echo`; false when none is (it timed out, or
    /// the echo is not ours).
    pub(crate) fn answer(&self, echo: &str, response: ActionResponse) -> bool {
        let waiter = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .and_then(|waiting| waiting.remove(echo));
        waiter.is_some_and(|waiter| waiter.send(response).is_ok())
    }

    /// The connection is gone: every waiting send learns it now.
    pub(crate) fn close(&self) {
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(waiting);
    }
}

/// The [`ChannelSender`] registered for the channel's platform.
pub(crate) struct OneBotSender {
    link: Arc<Link>,
}

impl OneBotSender {
    pub(crate) fn new(link: Arc<Link>) -> Self {
        OneBotSender { link }
    }
}

#[async_trait]
impl ChannelSender for OneBotSender {
    async fn send(&self, stream: &StreamInfo, text: &str) -> Result<Delivery, HostError> {
        self.send_message(stream, None, text).await
    }

    async fn send_mentioning(
        &self,
        stream: &StreamInfo,
        user_id: &str,
        text: &str,
    ) -> Result<Delivery, HostError> {
        self.send_message(stream, Some(user_id), text).await
    }
}

impl OneBotSender {
    /// One `send_msg`, correlated by its `echo`, mentioning `mention` first in a group.
    async fn send_message(
        &self,
        stream: &StreamInfo,
        mention: Option<&str>,
        text: &str,
    ) -> Result<Delivery, HostError> {
        let action = format!("send to {} through OneBot", stream.stream_id);
        let fail = |detail: String| HostError::new(action.clone(), detail);
        let Some(live) = self.link.current() else {
            return Err(fail(self.link.down()));
        };
        let echo = self.link.next_echo();
        // Registered before the frame is queued, so an answer cannot outrun its waiter.
        let Some(answer) = live.register(&echo) else {
            return Err(fail(self.link.down()));
        };
        let frame = send_msg_mentioning(&stream.target, mention, text, &echo).to_string();
        let exchange = async {
            live.outgoing
                .send(frame)
                .await
                .map_err(|_| "the OneBot connection closed before the message was sent")?;
            answer.await.map_err(|_| {
                "the OneBot connection closed before the implementation answered; the message \
                 may or may not have been delivered"
            })
        };
        match tokio::time::timeout(self.link.send_timeout, exchange).await {
            Ok(Ok(response)) if response.succeeded() => Ok(Delivery::Sent),
            Ok(Ok(response)) => Ok(Delivery::Rejected(response.failure())),
            Ok(Err(lost)) => Err(fail(lost.to_owned())),
            Err(_) => {
                live.forget(&echo);
                Err(fail(format!(
                    "no answer from OneBot ({}) within {} s; the message may or may not have \
                     been delivered",
                    self.link.url,
                    self.link.send_timeout.as_secs_f32()
                )))
            }
        }
    }
}
