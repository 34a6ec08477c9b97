//! [`RetryPolicy`]: when a failed event is tried again, and when it is dead.

use std::time::Duration;

use outbox::backoff::{Backoff, Jitter};

/// Exponential backoff with jitter for failed events, bounded in attempts.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Delay after the first failure.
    pub base_delay: Duration,
    /// Longest delay between two attempts.
    pub max_delay: Duration,
    /// Attempts in all, the first included; after the last one fails the
    /// event is dead.
    pub max_attempts: u32,
    /// Spread delays randomly so failed events do not retry in lockstep.
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(300),
            max_attempts: 10,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// What to do after an event's attempt number `failed_attempts` (1 for
    /// the first) failed: `Some(delay)` to retry after `delay`, `None` when
    /// the attempts are used up and the event is dead.
    pub fn after_failure(&self, failed_attempts: u32) -> Option<Duration> {
        if failed_attempts >= self.max_attempts {
            return None;
        }
        Some(self.delay(failed_attempts))
    }

    /// The `n`-th delay (1-based) of the exponential sequence.
    pub fn delay(&self, n: u32) -> Duration {
        if n == 0 {
            return self.max_delay;
        }
        let jitter = if self.jitter {
            Jitter::UpToDouble
        } else {
            Jitter::None
        };
        Backoff {
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            jitter,
        }
        .delay(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_attempts_run_out() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
            max_attempts: 4,
            jitter: false,
        };
        // backon computes in floating point: compare whole milliseconds.
        let millis = |failed: u32| policy.after_failure(failed).map(|delay| delay.as_millis());
        assert_eq!(millis(1), Some(100));
        assert_eq!(millis(2), Some(200));
        assert_eq!(millis(3), Some(400));
        assert_eq!(millis(4), None, "the fourth failure is the last attempt");
        assert_eq!(policy.delay(10).as_millis(), 500);
    }

    #[test]
    fn jitter_stays_within_one_extra_delay() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            max_attempts: 10,
            jitter: true,
        };
        for _ in 0..100 {
            let delay = policy.delay(2);
            assert!(
                delay >= Duration::from_millis(200) && delay <= Duration::from_millis(400),
                "{delay:?}"
            );
        }
    }
}
