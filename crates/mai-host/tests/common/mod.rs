//! Shared fixtures: a host on a real SQLite file in a temp dir — or, in the `postgres::` copy of
//! a test written with [`on_both_backends!`], in a database of a throwaway PostgreSQL cluster —
//! a fixed clock, a recording channel and a message builder.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use mai_core::clock::Clock;
use mai_core::host::{Delivery, HostError, StreamInfo};
use mai_host::{ChannelSender, EmbeddedConfig, EmbeddedHost, IncomingMessage};
use tempfile::TempDir;

#[path = "../../../../testing/postgres.rs"]
pub mod pg_cluster;

pub struct TestHost {
    pub host: EmbeddedHost,
    pub dir: TempDir,
    /// The cluster the host's database is in (PostgreSQL runs); dropped last.
    pub cluster: Option<pg_cluster::PgCluster>,
}

/// Set by the `postgres::` copy of a test: the hosts it makes are on PostgreSQL.
static ON_POSTGRES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes this test process's hosts live in PostgreSQL; `false` (after SKIP, or a failure under
/// CI=true) when PostgreSQL is not installed.
pub fn use_postgres() -> bool {
    let installed = pg_cluster::installed();
    ON_POSTGRES.store(installed, std::sync::atomic::Ordering::SeqCst);
    installed
}

/// Writes each test twice: `sqlite::NAME` on a SQLite file and `postgres::NAME` on a throwaway
/// PostgreSQL cluster — one conformance suite of host behaviour for both backends.
#[macro_export]
macro_rules! on_both_backends {
    ($(async fn $name:ident() $body:block)*) => {
        mod sqlite {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() $body
            )*
        }
        mod postgres {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if !common::use_postgres() {
                        return;
                    }
                    $body
                }
            )*
        }
    };
}

pub async fn host() -> TestHost {
    host_with(EmbeddedConfig::default()).await
}

pub async fn host_with(config: EmbeddedConfig) -> TestHost {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock(at(2024, 6, 1, 12, 0)));
    if ON_POSTGRES.load(std::sync::atomic::Ordering::SeqCst) {
        let cluster = pg_cluster::PgCluster::start().unwrap();
        let pool = mai_store::connect_pool(&cluster.database(), &mai_store::PgOptions::default())
            .await
            .unwrap();
        let host = EmbeddedHost::on(mai_store::Backend::Postgres(pool), config)
            .await
            .unwrap()
            .with_clock(clock);
        return TestHost {
            host,
            dir,
            cluster: Some(cluster),
        };
    }
    let host = EmbeddedHost::open(dir.path().join("data/host.db"), config)
        .await
        .unwrap()
        .with_clock(clock);
    TestHost {
        host,
        dir,
        cluster: None,
    }
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
