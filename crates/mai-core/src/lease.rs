//! The vocabulary of several instances sharing one task store: who holds a running task (its
//! lease: an owner and a time it expires), how long a lease lasts and how often it is renewed,
//! what failover time that implies, the stop requests one instance leaves for the instance that
//! runs a task, and the wake-ups ([`Notice`]) a shared store sends when a task changes.
//!
//! Pure arithmetic and parsing: no clock, no I/O. The store keeps the leases (`mai-store`), the
//! engine renews and adopts them (`mai-engine`, cluster).

use std::fmt;
use std::time::Duration;

use crate::task::TaskId;

/// How long a lease lasts and how often its holder renews it (`[storage] lease_secs`,
/// `heartbeat_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// A lease not renewed for this long has expired: another instance may adopt the task.
    pub lease: Duration,
    /// How often an instance renews the leases of the tasks it runs, and sweeps for expired ones.
    pub heartbeat: Duration,
}

impl Default for LeaseTerms {
    fn default() -> Self {
        LeaseTerms {
            lease: Duration::from_secs(20),
            heartbeat: Duration::from_secs(5),
        }
    }
}

impl LeaseTerms {
    /// Terms from whole seconds, refused when a lease could expire between two renewals.
    pub fn from_secs(lease_secs: u64, heartbeat_secs: u64) -> Result<Self, String> {
        if heartbeat_secs == 0 {
            return Err("[storage] heartbeat_secs must be at least 1".to_owned());
        }
        if lease_secs < heartbeat_secs.saturating_mul(2) {
            return Err(format!(
                "[storage] lease_secs ({lease_secs}) must be at least twice heartbeat_secs \
                 ({heartbeat_secs}), so one late renewal does not hand a running task to another \
                 instance"
            ));
        }
        Ok(LeaseTerms {
            lease: Duration::from_secs(lease_secs),
            heartbeat: Duration::from_secs(heartbeat_secs),
        })
    }

    /// The longest a task of a dead instance waits before another instance resumes it: its
    /// lease runs out (at most `lease` after the last renewal), then the next sweep of a
    /// surviving instance (at most one `heartbeat` later) adopts it.
    pub fn failover_bound(&self) -> Duration {
        self.lease + self.heartbeat
    }
}

/// What a stop request asks of the task's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    Cancel,
    Pause,
}

impl StopKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StopKind::Cancel => "cancel",
            StopKind::Pause => "pause",
        }
    }
}

/// A stop left on a running task for the instance that runs it, with who asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRequest {
    pub kind: StopKind,
    pub actor: String,
}

impl StopRequest {
    /// The stored form: `cancel:<actor>` or `pause:<actor>`.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.actor)
    }

    /// Reads the stored form back; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let (kind, actor) = text.split_once(':')?;
        let kind = match kind {
            "cancel" => StopKind::Cancel,
            "pause" => StopKind::Pause,
            _ => return None,
        };
        Some(StopRequest {
            kind,
            actor: actor.to_owned(),
        })
    }
}

impl fmt::Display for StopRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// A wake-up from a shared store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The task was created, or its status (or, while it is scheduled or waiting, its record)
    /// changed: read it again.
    Changed(TaskId),
    /// A stop was requested for the running task.
    Stop(TaskId, StopRequest),
    /// An instruction was injected into the task's history.
    Injected(TaskId),
    /// Notices may have been lost (the listening connection was re-established): read every
    /// active task again.
    Resync,
}

impl Notice {
    /// Reads a notice's payload: `changed <id>`, `stop <id> <request>` or `inject <id>`, the id
    /// as 32 hex digits. `None` when it is none of these.
    pub fn parse(payload: &str) -> Option<Self> {
        let mut words = payload.splitn(3, ' ');
        let kind = words.next()?;
        let id = uuid::Uuid::try_parse(words.next()?).ok().map(TaskId)?;
        match (kind, words.next()) {
            ("changed", None) => Some(Notice::Changed(id)),
            ("inject", None) => Some(Notice::Injected(id)),
            ("stop", Some(request)) => StopRequest::parse(request).map(|r| Notice::Stop(id, r)),
            _ => None,
        }
    }
}

/// The name an instance gives itself when `[server] instance_id` is not set: its host name and
/// process id.
pub fn default_instance_id(host_name: &str, pid: u32) -> String {
    let host = host_name.trim();
    let host = if host.is_empty() { "localhost" } else { host };
    format!("{host}-{pid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_refuse_a_lease_shorter_than_two_heartbeats_and_bound_failover() {
        assert!(LeaseTerms::from_secs(9, 5).is_err());
        assert!(LeaseTerms::from_secs(10, 0).is_err());
        let terms = LeaseTerms::default();
        assert_eq!(terms, LeaseTerms::from_secs(20, 5).unwrap());
        assert_eq!(terms.failover_bound(), Duration::from_secs(25));
        assert!(terms.failover_bound() <= Duration::from_secs(30));
    }

    #[test]
    fn stop_requests_and_notices_read_back_what_was_written() {
        let request = StopRequest {
            kind: StopKind::Pause,
            actor: "qq:1 (via b)".to_owned(),
        };
        assert_eq!(StopRequest::parse(&request.encode()), Some(request.clone()));
        assert_eq!(StopRequest::parse("halt:x"), None);
        let id = TaskId::new();
        let key = id.0.simple().to_string();
        assert_eq!(
            Notice::parse(&format!("changed {key}")),
            Some(Notice::Changed(id))
        );
        assert_eq!(
            Notice::parse(&format!("inject {key}")),
            Some(Notice::Injected(id))
        );
        assert_eq!(
            Notice::parse(&format!("stop {key} {}", request.encode())),
            Some(Notice::Stop(id, request))
        );
        assert_eq!(Notice::parse("changed nope"), None);
        assert_eq!(Notice::parse(&format!("changed {key} extra")), None);
        assert_eq!(default_instance_id(" ", 7), "localhost-7");
        assert_eq!(default_instance_id("box", 42), "box-42");
    }
}
