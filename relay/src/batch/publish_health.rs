//! [`PublishHealth`]: whether this relay instance can publish, for
//! `/readyz` and for handing partitions over.
//!
//! The batch loop reports every batch: one that published or was answered
//! by the broker (even with a rejection) clears the failure; one that the
//! broker could not take at all starts or extends it. A relay whose
//! publishes have failed for longer than `handover_after` is not ready.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Shared between the batch loop and the HTTP endpoint.
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::PublishHealth;
///
/// let health = PublishHealth::new(Duration::from_secs(90));
/// assert_eq!(health.not_ready_reason(), None);
/// ```
#[derive(Debug)]
pub struct PublishHealth {
    handover_after: Duration,
    state: Mutex<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    /// When the first batch of the current run of failures failed.
    failing_since: Option<Instant>,
    /// The broker's error for the latest failed batch.
    last_error: String,
    /// Whether the partitions were handed over to other instances.
    standing_by: bool,
}

impl PublishHealth {
    /// Health of a relay that hands over after `handover_after` of failures.
    pub fn new(handover_after: Duration) -> Self {
        PublishHealth {
            handover_after,
            state: Mutex::new(HealthState::default()),
        }
    }

    /// How long publishes may fail before the relay is not ready.
    pub fn handover_after(&self) -> Duration {
        self.handover_after
    }

    fn lock(&self) -> MutexGuard<'_, HealthState> {
        // Every write replaces whole fields: a poisoned lock holds no torn state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The broker took or answered a batch: publishing works.
    pub(crate) fn record_success(&self) {
        let mut state = self.lock();
        state.failing_since = None;
        state.standing_by = false;
    }

    /// The broker could not take a batch at all; returns for how long
    /// publishes have been failing.
    pub(crate) fn record_unavailable(&self, error: &str) -> Duration {
        let mut state = self.lock();
        let since = *state.failing_since.get_or_insert_with(Instant::now);
        error.clone_into(&mut state.last_error);
        since.elapsed()
    }

    /// Nothing was there to publish: nothing is held back.
    pub(crate) fn record_idle(&self) {
        let mut state = self.lock();
        if !state.standing_by {
            state.failing_since = None;
        }
    }

    /// Whether the failure has lasted past `handover_after`.
    pub(crate) fn is_stalled(&self) -> bool {
        self.lock()
            .failing_since
            .is_some_and(|since| since.elapsed() >= self.handover_after)
    }

    /// The partitions were handed over; the relay stands by.
    pub(crate) fn record_standing_by(&self) {
        self.lock().standing_by = true;
    }

    /// The relay rejoined after standing by: it is given a fresh
    /// `handover_after` to publish before it is not ready again.
    pub(crate) fn record_rejoined(&self) {
        let mut state = self.lock();
        state.standing_by = false;
        if state.failing_since.is_some() {
            state.failing_since = Some(Instant::now());
        }
    }

    /// Why the relay is not ready, when publishes have failed for longer
    /// than `handover_after` or it stands by.
    pub fn not_ready_reason(&self) -> Option<String> {
        let state = self.lock();
        let failing_for = state.failing_since.map(|since| since.elapsed())?;
        if state.standing_by {
            return Some(format!(
                "standing by: partitions handed to other relays after publishes failed for {} s: {}",
                failing_for.as_secs(),
                state.last_error
            ));
        }
        (failing_for >= self.handover_after).then(|| {
            format!(
                "every publish failed for {} s: {}",
                failing_for.as_secs(),
                state.last_error
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEVER: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn failures_within_the_bound_keep_the_relay_ready() {
        let health = PublishHealth::new(NEVER);
        health.record_unavailable("down");
        assert!(!health.is_stalled());
        assert_eq!(health.not_ready_reason(), None);
    }

    #[test]
    fn failures_past_the_bound_make_the_relay_not_ready_until_a_success() {
        let health = PublishHealth::new(Duration::ZERO);
        assert_eq!(health.not_ready_reason(), None);
        health.record_unavailable("down");
        health.record_unavailable("ProducerFenced");
        assert!(health.is_stalled());
        let reason = health.not_ready_reason().expect("not ready");
        assert!(reason.contains("ProducerFenced"), "{reason}");
        health.record_standing_by();
        health.record_idle();
        let reason = health.not_ready_reason().expect("standing by");
        assert!(reason.starts_with("standing by"), "{reason}");
        health.record_success();
        assert_eq!(health.not_ready_reason(), None);
        assert!(!health.is_stalled());
    }

    #[test]
    fn an_idle_spell_clears_a_failure() {
        let health = PublishHealth::new(Duration::ZERO);
        health.record_unavailable("down");
        health.record_idle();
        assert!(!health.is_stalled());
        assert_eq!(health.not_ready_reason(), None);
    }

    #[test]
    fn a_rejoined_relay_gets_a_fresh_bound() {
        let health = PublishHealth::new(NEVER);
        health.record_unavailable("down");
        health.record_standing_by();
        assert!(health.not_ready_reason().is_some());
        health.record_rejoined();
        assert!(!health.is_stalled());
        assert_eq!(health.not_ready_reason(), None);
    }
}
