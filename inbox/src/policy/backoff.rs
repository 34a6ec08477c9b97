//! [`RetrySchedule`]: how often a message is attempted and how long the
//! consumer waits between two tries.

use std::time::Duration;

use outbox::backoff::{Backoff, Jitter};

/// Attempts and backoff of the delivery policy, from an adapter's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetrySchedule {
    /// Handler attempts per message before it is dead-lettered; at least 1.
    pub(crate) max_attempts: u32,
    /// The pause after the first failure; it doubles per failure.
    pub(crate) base_delay: Duration,
    /// The longest pause.
    pub(crate) max_delay: Duration,
}

impl RetrySchedule {
    /// Why these settings cannot work, naming the adapter's fields.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".to_owned());
        }
        if self.base_delay > self.max_delay {
            return Err("retry_base_delay must not exceed retry_max_delay".to_owned());
        }
        Ok(())
    }

    /// The pause after the `failures`th failure in a row (1-based):
    /// `base_delay * 2^(failures - 1)`, at most `max_delay`, with jitter
    /// between half and all of it so that consumers failing together do not
    /// retry together ([`Jitter::HalfToFull`]). The doubling stops after 31
    /// of them, however many failures there are.
    pub(crate) fn delay(&self, failures: u32) -> Duration {
        Backoff {
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            jitter: Jitter::HalfToFull,
        }
        .delay(failures.clamp(1, 32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(base_ms: u64, max_ms: u64) -> RetrySchedule {
        RetrySchedule {
            max_attempts: 5,
            base_delay: Duration::from_millis(base_ms),
            max_delay: Duration::from_millis(max_ms),
        }
    }

    #[test]
    fn backs_off_exponentially_within_bounds() {
        let schedule = schedule(100, 1_000);
        for failures in 1..40 {
            let full = (Duration::from_millis(100) * 2_u32.pow(failures.min(20) - 1))
                .min(Duration::from_millis(1_000));
            let delay = schedule.delay(failures);
            assert!(delay >= full / 2 && delay <= full, "{failures}: {delay:?}");
        }
    }

    #[test]
    fn a_zero_base_never_waits() {
        assert_eq!(schedule(0, 0).delay(3), Duration::ZERO);
    }

    #[test]
    fn refuses_settings_that_cannot_work() {
        assert!(schedule(100, 1_000).check().is_ok());
        assert!(schedule(2_000, 1_000).check().is_err());
        let never = RetrySchedule {
            max_attempts: 0,
            ..schedule(100, 1_000)
        };
        assert!(never.check().is_err());
    }
}
