//! Retention: deleting finished tasks (completed, failed, cancelled) that ended before a
//! cutoff, with their status log and agent history (triggers delete them with their task; on
//! PostgreSQL the foreign keys cascade). `serve` runs it in the background from
//! `[storage] keep_finished_days` (docs/backup.md, "Retention").
//!
//! A finished task is kept while a subtask it made is still unfinished (that subtask may still
//! read its parent). Deletes run in small batches, each its own write, so live writes queued
//! behind a batch wait milliseconds, not the whole prune. Must not: delete an unfinished task,
//! or anything but task rows and what cascades from them.

use chrono::{DateTime, Utc};
use mai_core::store::StoreError;

use crate::codec::time_text;
use crate::error::{db, write_failed};
use crate::sqlite::SqliteStore;

/// Tasks deleted per write.
pub(crate) const BATCH: i64 = 200;

const PRUNE: &str = "DELETE FROM tasks WHERE id IN (\
    SELECT t.id FROM tasks t \
    WHERE t.status IN ('completed', 'failed', 'cancelled') AND t.updated_at < ?1 \
    AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.created_by = t.id \
        AND c.status NOT IN ('completed', 'failed', 'cancelled')) \
    LIMIT ?2)";

impl SqliteStore {
    /// Deletes the finished tasks last changed before `before`; returns how many.
    pub async fn prune_finished(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        const DOING: &str = "deleting old finished tasks";
        let cutoff = time_text(before);
        let mut deleted = 0;
        loop {
            let cutoff = cutoff.clone();
            let batch = self
                .database()
                .write(move |connection| {
                    connection.execute(PRUNE, rusqlite::params![cutoff, BATCH])
                })
                .await
                .map_err(write_failed(DOING))?
                .map_err(db(DOING))?;
            deleted += batch as u64;
            if (batch as i64) < BATCH {
                return Ok(deleted);
            }
        }
    }
}
