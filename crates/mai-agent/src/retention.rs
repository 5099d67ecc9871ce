//! Retention, run by `serve` in the background: stored chat messages older than `[storage]
//! keep_messages_days` and finished tasks older than `keep_finished_days` (with their history)
//! are deleted — at start-up, then every [`EVERY`]. 0 keeps them forever. Usage records are
//! never deleted (docs/backup.md, "Retention").
//!
//! Must not: decide what a finished task is (the store's `prune_finished` does) or delete
//! anything else.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use mai_core::clock::Clock;
use mai_core::config::StorageConfig;
use mai_host::EmbeddedHost;
use mai_store::Store;
use tokio_util::sync::CancellationToken;

/// How often the job runs after the first run at start-up.
const EVERY: Duration = Duration::from_secs(60 * 60);

/// What one run deleted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub messages: u64,
    pub tasks: u64,
}

/// What the job works on.
pub struct Retention {
    pub store: Store,
    pub host: Arc<EmbeddedHost>,
    pub storage: StorageConfig,
}

impl Retention {
    /// Runs the job until `stop`; `None` when both settings keep everything.
    pub fn spawn(
        self,
        clock: Arc<dyn Clock>,
        stop: CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        if self.storage.keep_messages_days == 0 && self.storage.keep_finished_days == 0 {
            return None;
        }
        Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                match self.prune(clock.now()).await {
                    Ok(pruned) if pruned != Pruned::default() => tracing::info!(
                        "retention: deleted {} stored chat message(s) and {} finished task(s) \
                         ([storage] keep_messages_days = {}, keep_finished_days = {})",
                        pruned.messages,
                        pruned.tasks,
                        self.storage.keep_messages_days,
                        self.storage.keep_finished_days
                    ),
                    Ok(_) => {}
                    Err(error) => tracing::warn!("retention: {error:#}; trying again later"),
                }
            }
        }))
    }

    /// One run as of `now`: deletes what is older than the settings allow.
    pub async fn prune(&self, now: DateTime<Utc>) -> Result<Pruned> {
        let mut pruned = Pruned::default();
        if let Some(before) = cutoff(now, self.storage.keep_messages_days) {
            pruned.messages = self
                .host
                .prune_messages(before)
                .await
                .context("cannot delete old chat messages")?;
        }
        if let Some(before) = cutoff(now, self.storage.keep_finished_days) {
            pruned.tasks = self
                .store
                .prune_finished(before)
                .await
                .context("cannot delete old finished tasks")?;
        }
        Ok(pruned)
    }
}

/// `days` before `now`; `None` for 0 (keep forever).
fn cutoff(now: DateTime<Utc>, days: u32) -> Option<DateTime<Utc>> {
    (days > 0).then(|| now - chrono::Duration::days(days.into()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use chrono::TimeZone;
    use mai_core::host::Host;
    use mai_core::ids::{Owner, StreamId};
    use mai_core::store::TaskStore;
    use mai_core::task::{NewTask, TaskLevel, TaskRecord, TaskStatus, Trigger};
    use mai_host::IncomingMessage;
    use mai_store::{Database, SqliteOptions};

    fn day(n: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap() + chrono::Duration::days(n)
    }

    fn said(text: &str, at: DateTime<Utc>) -> IncomingMessage {
        IncomingMessage {
            platform: "qq".into(),
            group_id: Some("100".into()),
            user_id: "10001".into(),
            text: text.into(),
            at,
            ..IncomingMessage::default()
        }
    }

    fn completed_on(at: DateTime<Utc>) -> TaskRecord {
        let mut task = TaskRecord::new(
            NewTask {
                title: "t".into(),
                intent: "do t".into(),
                level: TaskLevel::Agent,
                owner: "qq:10001".parse::<Owner>().unwrap(),
                stream_id: StreamId::new("qq:group:100").unwrap(),
                platform: "qq".into(),
                reply_stream_id: None,
                trigger: Trigger::Now,
                priority: 0,
                max_runtime_min: 0,
            },
            TaskStatus::Pending,
            "qq:10001",
            at,
        );
        task.transition(TaskStatus::Running, "scheduler", "dispatched", at)
            .unwrap();
        task.transition(TaskStatus::Completed, "scheduler", "answered", at)
            .unwrap();
        task
    }

    #[tokio::test]
    async fn a_run_deletes_messages_and_finished_tasks_older_than_the_settings_as_of_now() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path().join("mai-agent.db"), &SqliteOptions::default())
            .await
            .unwrap();
        let store = Store::Sqlite(mai_store::SqliteStore::on(db.clone()).await.unwrap());
        let host = Arc::new(
            EmbeddedHost::with_database(db, mai_host::EmbeddedConfig::default())
                .await
                .unwrap(),
        );
        let stream = host.ingest_message(&said("old", day(0))).await.unwrap();
        host.ingest_message(&said("new", day(95))).await.unwrap();
        let (old, new) = (completed_on(day(0)), completed_on(day(95)));
        store.insert(&old).await.unwrap();
        store.insert(&new).await.unwrap();
        let mut retention = Retention {
            store: store.clone(),
            host: host.clone(),
            storage: StorageConfig::default(),
        };

        // Defaults: messages 90 days, finished tasks 30 days; "now" is day 100.
        let pruned = retention.prune(day(100)).await.unwrap();
        assert_eq!(
            pruned,
            Pruned {
                messages: 1,
                tasks: 1
            }
        );
        let left = host.recent_messages(&stream.stream_id, 10).await.unwrap();
        let texts: Vec<&str> = left.iter().map(|line| line.text.as_str()).collect();
        assert_eq!(texts, ["new"]);
        assert!(store.get(old.id).await.unwrap().is_none());
        assert!(store.get(new.id).await.unwrap().is_some());

        // 0 keeps everything forever, however old.
        retention.storage.keep_messages_days = 0;
        retention.storage.keep_finished_days = 0;
        assert_eq!(
            retention.prune(day(10_000)).await.unwrap(),
            Pruned::default()
        );
        assert!(store.get(new.id).await.unwrap().is_some());
    }
}
