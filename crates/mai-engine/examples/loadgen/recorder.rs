//! The event recorder: the first time each (task, status) was seen, and every send. Owns the
//! subscription it starts; must not act on the engine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mai_core::task::{TaskId, TaskStatus};
use mai_engine::Engine;
use mai_engine::TaskEvent;
use tokio::sync::{Notify, broadcast};

#[derive(Default)]
pub struct Seen {
    pub status: HashMap<(TaskId, TaskStatus), (Instant, DateTime<Utc>)>,
    pub sent: usize,
    pub last_sent: Option<Instant>,
    /// The first task seen failing, with its reason: a benchmark whose tasks fail measures
    /// nothing, so every wait ends with it.
    pub failed: Option<String>,
}

pub struct Recorder {
    pub seen: Mutex<Seen>,
    changed: Notify,
    lagged: AtomicU64,
}

impl Recorder {
    /// Starts recording `engine`'s events (subscribed before this returns).
    pub fn start(engine: &Engine) -> Arc<Recorder> {
        let recorder = Arc::new(Recorder {
            seen: Mutex::new(Seen::default()),
            changed: Notify::new(),
            lagged: AtomicU64::new(0),
        });
        let mut events = engine.subscribe();
        let me = recorder.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(TaskEvent::Status {
                        task_id,
                        status,
                        reason,
                    }) => {
                        let at = (Instant::now(), Utc::now());
                        let mut seen = me.seen.lock().unwrap();
                        seen.status.entry((task_id, status)).or_insert(at);
                        if status == TaskStatus::Failed && seen.failed.is_none() {
                            seen.failed = Some(format!("task {task_id} failed: {reason}"));
                        }
                        drop(seen);
                        me.changed.notify_waiters();
                    }
                    Ok(TaskEvent::Sent { .. }) => {
                        let mut seen = me.seen.lock().unwrap();
                        seen.sent += 1;
                        seen.last_sent = Some(Instant::now());
                        drop(seen);
                        me.changed.notify_waiters();
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        me.lagged.fetch_add(n, Ordering::Relaxed);
                        me.changed.notify_waiters();
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        recorder
    }

    /// Waits (bounded) until `done` holds for what was seen; a failed task ends the wait.
    pub async fn wait_until(&self, what: &str, done: impl Fn(&Seen) -> bool) {
        tokio::time::timeout(Duration::from_secs(300), async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                {
                    let seen = self.seen.lock().unwrap();
                    if let Some(failed) = &seen.failed {
                        panic!("{failed} (while waiting for {what}); the figures would be wrong");
                    }
                    if done(&seen) {
                        return;
                    }
                }
                if self.lagged.load(Ordering::Relaxed) > 0 {
                    panic!("the event recorder lagged; figures would be wrong ({what})");
                }
                changed.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }
}
