//! Shared fixtures: a host on a real SQLite file in a temp dir, a fixed clock, a recording
//! channel and a message builder.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use mai_core::clock::Clock;
use mai_core::host::{Delivery, HostError, StreamInfo};
use mai_host::{ChannelSender, EmbeddedConfig, EmbeddedHost, IncomingMessage};
use tempfile::TempDir;

pub struct TestHost {
    pub host: EmbeddedHost,
    pub dir: TempDir,
}

pub async fn host() -> TestHost {
    host_with(EmbeddedConfig::default()).await
}

pub async fn host_with(config: EmbeddedConfig) -> TestHost {
    let dir = tempfile::tempdir().unwrap();
    let host = EmbeddedHost::open(dir.path().join("data/host.db"), config)
        .await
        .unwrap()
        .with_clock(Arc::new(FixedClock(at(2024, 6, 1, 12, 0))));
    TestHost { host, dir }
}

/// A UTC time.
pub fn at(year: i32, month: u32, day: u32, hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(year, month, day, hour, minute, 0)
        .unwrap()
}

pub struct FixedClock(pub DateTime<Utc>);

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// A group message.
pub fn group_msg(
    group: &str,
    user: &str,
    name: &str,
    text: &str,
    when: DateTime<Utc>,
) -> IncomingMessage {
    IncomingMessage {
        platform: "qq".into(),
        group_id: Some(group.into()),
        user_id: user.into(),
        sender_name: name.into(),
        text: text.into(),
        at: when,
        ..IncomingMessage::default()
    }
}

/// A private message.
pub fn private_msg(user: &str, name: &str, text: &str, when: DateTime<Utc>) -> IncomingMessage {
    IncomingMessage {
        platform: "qq".into(),
        user_id: user.into(),
        sender_name: name.into(),
        text: text.into(),
        at: when,
        ..IncomingMessage::default()
    }
}

/// A channel that records what it was asked to send and answers `answer`.
pub struct RecordingChannel {
    pub sent: Mutex<Vec<(String, String)>>,
    pub answer: Delivery,
}

impl RecordingChannel {
    pub fn new(answer: Delivery) -> Arc<Self> {
        Arc::new(RecordingChannel {
            sent: Mutex::new(Vec::new()),
            answer,
        })
    }

    pub fn sent(&self) -> Vec<(String, String)> {
        self.sent.lock().unwrap().clone()
    }
}

#[async_trait]
impl ChannelSender for RecordingChannel {
    async fn send(&self, stream: &StreamInfo, text: &str) -> Result<Delivery, HostError> {
        self.sent
            .lock()
            .unwrap()
            .push((stream.stream_id.to_string(), text.to_owned()));
        Ok(self.answer.clone())
    }
}
