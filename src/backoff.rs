//! Exponential backoff with jitter, computed by `backon`: the inbox's
//! retries of a failed handler, database or dead letter, and the sequence
//! of the relay's retries of a failed event (`RetryPolicy` of
//! `outbox-relay`, whose jitter is [`Jitter::UpToDouble`]).
//!
//! ```
//! use std::time::Duration;
//! use outbox::backoff::{Backoff, Jitter};
//!
//! let backoff = Backoff {
//!     base_delay: Duration::from_millis(100),
//!     max_delay: Duration::from_secs(1),
//!     jitter: Jitter::None,
//! };
//! // backon computes in floating point: compare whole milliseconds.
//! assert_eq!(backoff.delay(1).as_millis(), 100);
//! assert_eq!(backoff.delay(3).as_millis(), 400);
//! assert_eq!(backoff.delay(10), Duration::from_secs(1));
//!
//! let spread = Backoff { jitter: Jitter::HalfToFull, ..backoff };
//! let delay = spread.delay(3);
//! assert!(delay >= Duration::from_millis(200) && delay <= Duration::from_millis(400));
//! ```

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// How a delay is spread, so that clients failing together do not retry
/// together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// No spread: the delay of the sequence itself.
    None,
    /// Up to one more of the delay: from the delay to twice it (`backon`'s
    /// own jitter), so a delay at `max_delay` may reach twice that. The
    /// jitter of the relay's retries.
    UpToDouble,
    /// Between half and all of the delay, so a delay never exceeds
    /// `max_delay`. The jitter of the inbox's retries.
    HalfToFull,
}

/// Exponential backoff: `base_delay` after the first failure, doubling with
/// every failure after it, at most `max_delay`, spread by `jitter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub base_delay: Duration,
    /// The longest delay of the sequence, before the jitter.
    pub max_delay: Duration,
    /// How each delay is spread.
    pub jitter: Jitter,
}

/// Steps after which the sequence no longer changes: from any base delay
/// above zero, 2^94 ns is past `Duration::MAX`, so it has reached
/// `max_delay` by then. Bounds the work of a large failure count.
const STEPS_TO_THE_CAP: u32 = 128;

impl Backoff {
    /// The delay after the `failures`th failure in a row (1-based; 0 counts
    /// as 1): `base_delay * 2^(failures - 1)`, at most `max_delay`, spread
    /// by the jitter. `backon` computes in floating point (`f32` seconds),
    /// so a delay may be off by a few nanoseconds.
    pub fn delay(&self, failures: u32) -> Duration {
        // Half to full is backon's jitter (one to twice) on half the delay.
        let (base_delay, max_delay) = match self.jitter {
            Jitter::None | Jitter::UpToDouble => (self.base_delay, self.max_delay),
            Jitter::HalfToFull => (self.base_delay / 2, self.max_delay / 2),
        };
        let mut builder = ExponentialBuilder::default()
            .with_min_delay(base_delay)
            .with_max_delay(max_delay)
            .with_factor(2.0)
            .without_max_times();
        if self.jitter != Jitter::None {
            builder = builder.with_jitter();
        }
        let step = failures.clamp(1, STEPS_TO_THE_CAP) - 1;
        builder.build().nth(step as usize).unwrap_or(self.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff(base_ms: u64, max_ms: u64, jitter: Jitter) -> Backoff {
        Backoff {
            base_delay: Duration::from_millis(base_ms),
            max_delay: Duration::from_millis(max_ms),
            jitter,
        }
    }

    /// `base * 2^(failures - 1)`, at most `max`, exactly.
    fn full(base_ms: u64, max_ms: u64, failures: u32) -> Duration {
        Duration::from_millis(base_ms)
            .saturating_mul(1 << failures.clamp(1, 32).saturating_sub(1).min(31))
            .min(Duration::from_millis(max_ms))
    }

    #[test]
    fn doubles_up_to_the_cap() {
        let backoff = backoff(100, 1_000, Jitter::None);
        for failures in 0..200 {
            assert_eq!(
                backoff.delay(failures).as_millis(),
                full(100, 1_000, failures).as_millis(),
                "{failures}"
            );
        }
    }

    #[test]
    fn up_to_double_adds_at_most_one_delay() {
        let backoff = backoff(100, 1_000, Jitter::UpToDouble);
        for failures in 1..40 {
            let full = full(100, 1_000, failures);
            let delay = backoff.delay(failures);
            assert!(delay >= full && delay <= full * 2, "{failures}: {delay:?}");
        }
    }

    #[test]
    fn half_to_full_stays_within_the_delay() {
        let backoff = backoff(100, 1_000, Jitter::HalfToFull);
        for _ in 0..50 {
            for failures in 1..40 {
                let full = full(100, 1_000, failures);
                let delay = backoff.delay(failures);
                assert!(delay >= full / 2 && delay <= full, "{failures}: {delay:?}");
            }
        }
    }

    #[test]
    fn a_zero_base_never_waits() {
        for jitter in [Jitter::None, Jitter::UpToDouble, Jitter::HalfToFull] {
            assert_eq!(backoff(0, 0, jitter).delay(3), Duration::ZERO);
        }
    }

    #[test]
    fn a_huge_failure_count_is_the_cap() {
        let backoff = Backoff {
            base_delay: Duration::from_nanos(1),
            max_delay: Duration::MAX,
            jitter: Jitter::None,
        };
        assert_eq!(backoff.delay(u32::MAX), Duration::MAX);
    }
}
