//! The recent history behind the dashboard's health charts (`GET /v1/health/history`): every
//! [`INTERVAL`] a sample of the active tasks per state (the queue is `pending`), read through the
//! engine's facade like the `mai_tasks` gauge, and the server's metrics' running totals
//! ([`Metrics::trend_figures`]): the tasks finished so far (`mai_tasks_finished_total`) and the
//! model calls so far (count, failures, total latency — the metering behind
//! `mai_model_request_duration_seconds`); the last [`KEEP`] samples (one hour) are kept in memory.
//!
//! Samples are cumulative figures; rates (tasks per minute, error rate, mean latency) are the
//! differences between two samples, which the page computes. The history starts when `serve`
//! starts and is lost when it stops — it is not stored. Must not: reach the store directly (it
//! reads through the engine's facade), count anything itself (the metrics do), or keep more
//! than [`KEEP`] samples.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use mai_engine::{Engine, EngineError};

use crate::health::ModelTotals;
use crate::metrics::Metrics;

/// How often a sample is taken.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// How many samples are kept: one hour.
pub const KEEP: usize = 360;

/// One sample: figures at `at`, cumulative since start where they count something.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub at: DateTime<Utc>,
    /// Active tasks per state (`scheduled`, `pending`, `running`, `waiting_input`, `paused`).
    pub active: BTreeMap<&'static str, u64>,
    /// Tasks that reached a terminal state since start (`mai_tasks_finished_total`).
    pub finished: u64,
    pub model: ModelTotals,
}

/// The sampled history; cheap to clone, all clones share it.
#[derive(Clone, Default)]
pub struct Trend {
    samples: Arc<Mutex<VecDeque<Sample>>>,
}

impl Trend {
    /// Starts sampling `engine` and `metrics` every [`INTERVAL`] until `shutdown` (when a tokio
    /// runtime is running; otherwise the history stays empty and only [`Trend::now`] answers).
    pub fn start(engine: Arc<Engine>, metrics: Metrics, shutdown: CancellationToken) -> Trend {
        let trend = Trend::default();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(trend.clone().run(engine, metrics, shutdown));
        }
        trend
    }

    async fn run(self, engine: Arc<Engine>, metrics: Metrics, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => match self.now(&engine, &metrics).await {
                    Ok(sample) => {
                        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
                        if samples.len() == KEEP {
                            samples.pop_front();
                        }
                        samples.push_back(sample);
                    }
                    Err(error) => tracing::warn!(%error, "could not sample the health history"),
                },
            }
        }
    }

    /// A sample taken now (not kept).
    pub async fn now(&self, engine: &Engine, metrics: &Metrics) -> Result<Sample, EngineError> {
        let active = crate::metrics::active_counts(engine)
            .await?
            .into_iter()
            .map(|(state, count)| (state.as_str(), count))
            .collect();
        let (finished, model) = metrics.trend_figures().await;
        Ok(Sample {
            at: Utc::now(),
            active,
            finished,
            model,
        })
    }

    /// The kept samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples.iter().cloned().collect()
    }
}
