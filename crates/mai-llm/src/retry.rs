//! When to try a failed model call again and how long to wait first.
//!
//! Owns the retry decision (only errors `ModelError::is_retryable` accepts), exponential backoff
//! with jitter (backon), and honouring the server's `Retry-After` / `retry-after-ms`. Does not
//! sleep or send anything: the client asks `next_delay` and does the waiting, which keeps this
//! testable without time.

use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use mai_core::model::ModelError;

use mai_core::config::LlmConfig;

/// The retry settings of one client.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    backoff: ExponentialBuilder,
    max_retry_after: Duration,
}

impl RetryPolicy {
    pub(crate) fn from_config(config: &LlmConfig) -> Self {
        let min_delay = Duration::from_millis(config.retry_initial_delay_ms);
        let max_delay = Duration::from_secs(config.retry_max_delay_secs).max(min_delay);
        Self {
            backoff: ExponentialBuilder::new()
                .with_min_delay(min_delay)
                .with_max_delay(max_delay)
                .with_factor(2.0)
                .with_max_times(config.max_retries as usize)
                // Jitter spreads retries of many tasks hit by the same outage.
                .with_jitter(),
            max_retry_after: Duration::from_secs(config.max_retry_after_secs),
        }
    }

    /// A fresh schedule for one logical call.
    pub(crate) fn schedule(&self) -> RetrySchedule {
        RetrySchedule {
            backoff: self.backoff.build(),
            max_retry_after: self.max_retry_after,
        }
    }
}

/// The retries left for one call.
#[derive(Debug)]
pub(crate) struct RetrySchedule {
    backoff: ExponentialBackoff,
    max_retry_after: Duration,
}

impl RetrySchedule {
    /// How long to wait before retrying after `error`, or `None` to give up and return it.
    pub(crate) fn next_delay(&mut self, error: &ModelError) -> Option<Duration> {
        if !error.is_retryable() {
            return None;
        }
        let backoff = self.backoff.next()?;
        match error.retry_after() {
            // The server knows better than our backoff when it will accept us again.
            Some(wait) if wait <= self.max_retry_after => Some(wait),
            Some(_) => None,
            None => Some(backoff),
        }
    }
}

/// The wait a rate-limited answer asks for: `retry-after-ms` (OpenAI, Azure) first, then
/// `Retry-After` as seconds or as an HTTP date. Unparseable values are ignored (backoff applies).
pub(crate) fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: SystemTime,
) -> Option<Duration> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = retry_after?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let at = SystemTime::from(date.with_timezone(&chrono::Utc));
    // A date in the past means "now".
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: Option<Duration>) -> ModelError {
        ModelError::Status {
            url: "u".into(),
            model: "m".into(),
            status: code,
            reason: String::new(),
            detail: String::new(),
            retry_after,
        }
    }

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy::from_config(&LlmConfig {
            max_retries,
            retry_initial_delay_ms: 100,
            retry_max_delay_secs: 1,
            max_retry_after_secs: 10,
            ..LlmConfig::default()
        })
    }

    #[test]
    fn retries_are_bounded_and_grow_with_jitter() {
        let mut schedule = policy(3).schedule();
        let delays: Vec<Duration> = std::iter::from_fn(|| schedule.next_delay(&status(503, None)))
            .take(10)
            .collect();
        assert_eq!(delays.len(), 3, "{delays:?}");
        // Base delays 100, 200, 400 ms; jitter adds up to +100%.
        for (delay, base) in delays.iter().zip([100u64, 200, 400]) {
            let base = Duration::from_millis(base);
            assert!(
                *delay >= base && *delay <= base * 2,
                "{delay:?} vs {base:?}"
            );
        }
    }

    #[test]
    fn client_errors_are_never_retried() {
        let mut schedule = policy(3).schedule();
        for code in [400, 401, 403, 404, 422] {
            assert_eq!(schedule.next_delay(&status(code, None)), None, "{code}");
        }
        assert!(schedule.next_delay(&status(408, None)).is_some());
    }

    #[test]
    fn retry_after_replaces_backoff_unless_too_long() {
        let mut schedule = policy(3).schedule();
        let wait = Duration::from_secs(7);
        assert_eq!(schedule.next_delay(&status(429, Some(wait))), Some(wait));
        let too_long = Duration::from_secs(11);
        assert_eq!(schedule.next_delay(&status(429, Some(too_long))), None);
    }

    #[test]
    fn zero_retries_means_one_attempt() {
        let mut schedule = policy(0).schedule();
        assert_eq!(schedule.next_delay(&status(500, None)), None);
    }

    #[test]
    fn retry_after_header_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_470);
        assert_eq!(
            parse_retry_after(None, Some("2"), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            parse_retry_after(Some("1500"), Some("9"), now),
            Some(Duration::from_millis(1500))
        );
        // 2015-10-21T07:28:00Z is 10 s after `now`.
        assert_eq!(
            parse_retry_after(None, Some("Wed, 21 Oct 2015 07:28:00 GMT"), now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after(None, Some("Wed, 21 Oct 2015 07:00:00 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after(None, Some("soon"), now), None);
        assert_eq!(parse_retry_after(None, Some("-1"), now), None);
        assert_eq!(parse_retry_after(None, None, now), None);
    }
}
