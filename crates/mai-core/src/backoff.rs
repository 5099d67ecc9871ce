//! The one backoff policy for retrying a peer: reply sends, OneBot reconnects and MCP server
//! restarts all wait by it (the model client keeps backon's, which honours `Retry-After`).
//!
//! Capped exponential and deterministic: the `n`th wait is `initial × 2ⁿ`, never more than `max`.
//! No jitter, on purpose: each of these loops talks to one peer from one process (one host, one
//! OneBot server, one MCP child), so there is no crowd of clients to spread out, and a fixed
//! schedule keeps `max` a true bound and makes every wait testable. Owns the arithmetic only:
//! it sleeps nowhere and must not — each caller waits on its own clock and stop signal.

use std::time::Duration;

/// A capped exponential schedule of waits between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// Waits starting at `initial` (at least 1 ms), doubling up to `max` (at least `initial`).
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        Backoff {
            initial,
            max: max.max(initial),
        }
    }

    /// The wait before retry number `retry` (0 is the first retry): `initial × 2^retry`, capped.
    pub fn delay(&self, retry: u32) -> Duration {
        // 2^31 × 1 ms already exceeds any sane cap; beyond it the product would only overflow.
        let factor = 1u32 << retry.min(31);
        self.initial.saturating_mul(factor).min(self.max)
    }

    pub fn initial(&self) -> Duration {
        self.initial
    }

    pub fn max(&self) -> Duration {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn waits_start_at_initial_double_and_stop_at_the_cap() {
        let backoff = Backoff::new(ms(100), ms(700));
        let waits: Vec<Duration> = (0..6).map(|n| backoff.delay(n)).collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(700), ms(700), ms(700)]
        );
    }

    #[test]
    fn a_huge_retry_number_stays_at_the_cap_without_overflowing() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(30));
        let uncapped = Backoff::new(Duration::from_secs(1), Duration::MAX);
        assert_eq!(uncapped.delay(40), Duration::from_secs(1 << 31));
    }

    #[test]
    fn a_zero_initial_or_a_cap_below_it_is_raised() {
        let backoff = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(backoff.initial(), ms(1));
        assert_eq!(backoff.max(), ms(1));
        assert_eq!(backoff.delay(5), ms(1));
        assert_eq!(Backoff::new(ms(500), ms(10)).delay(0), ms(500));
    }
}
