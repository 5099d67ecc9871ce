//! Outbound channels: the per-platform senders `send_text` hands the bot's messages to.
//!
//! The host owns no connection itself; a channel (console, webhook, OneBot) registers a
//! [`ChannelSender`] for its platform. A platform without one gets `Delivery::Rejected` — a
//! message is never reported as sent when nothing could carry it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use mai_core::host::{Delivery, HostError, StreamInfo};

/// Delivers the bot's text to a stream on one platform.
#[async_trait]
pub trait ChannelSender: Send + Sync + 'static {
    /// Sends `text` to `stream`. `Ok(Delivery::Rejected(why))` when the channel answered but
    /// did not deliver; `Err` when it could not be reached.
    async fn send(&self, stream: &StreamInfo, text: &str) -> Result<Delivery, HostError>;

    /// Sends `text` to `stream` mentioning the person `user_id` of this channel's platform
    /// first; a channel that cannot mention sends the text alone.
    async fn send_mentioning(
        &self,
        stream: &StreamInfo,
        _user_id: &str,
        text: &str,
    ) -> Result<Delivery, HostError> {
        self.send(stream, text).await
    }
}

/// The registered senders, by platform.
#[derive(Default)]
pub(crate) struct Channels {
    by_platform: RwLock<HashMap<String, Arc<dyn ChannelSender>>>,
}

impl Channels {
    /// Registers (or replaces) the sender of `platform`.
    pub(crate) fn register(&self, platform: &str, sender: Arc<dyn ChannelSender>) {
        self.by_platform
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(platform.to_owned(), sender);
    }

    /// Removes the sender of `platform` (its connection closed); true when there was one.
    pub(crate) fn unregister(&self, platform: &str) -> bool {
        self.by_platform
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(platform)
            .is_some()
    }

    pub(crate) fn get(&self, platform: &str) -> Option<Arc<dyn ChannelSender>> {
        self.by_platform
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(platform)
            .cloned()
    }
}

/// What a send to a platform without a channel reports.
pub(crate) fn no_channel(platform: &str) -> Delivery {
    Delivery::Rejected(format!("no channel connected for platform {platform}"))
}
