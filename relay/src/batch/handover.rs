//! Handing partitions over when publishing stalls: after `handover_after`
//! of failures, rebuild the broker client and, when other relays are live,
//! release the leases and stand by until the client reaches the broker.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Dispatcher;
use crate::leases::Handover;

/// Longest wait between two recovery attempts of a relay standing by, in
/// lease durations.
const MAX_STANDBY_LEASES: u32 = 8;

impl Dispatcher {
    /// Whether publishes have failed past `handover_after` and the stall
    /// was not handled in the last `handover_after`.
    pub(super) fn stall_check_due(&mut self) -> bool {
        if !self.health.is_stalled() {
            return false;
        }
        let now = Instant::now();
        match self.next_stall_check {
            Some(due) if now < due => false,
            _ => {
                self.next_stall_check = Some(now + self.health.handover_after());
                true
            }
        }
    }

    /// Every publish has failed for `handover_after`: rebuild the broker
    /// client and, when other relays are live, hand them the partitions and
    /// stand by until the client reaches the broker again. A relay that is
    /// alone keeps its partitions and goes on trying.
    pub(super) async fn handle_stall(
        &mut self,
        stop: &CancellationToken,
        error: &str,
        failing_for: Duration,
    ) {
        // Marks are fenced by the leases about to be released.
        self.finish_marking().await;
        if let Err(failure) = self.publisher.recover().await {
            tracing::warn!(error = %failure, "rebuilding the broker client failed");
        }
        match self.leases.hand_over().await {
            Ok(Handover::Alone) => {
                tracing::warn!(
                    failing_for_s = failing_for.as_secs(),
                    error = %error,
                    "every publish failed past handover_after; no other relay is live, so this \
                     relay keeps its partitions and goes on trying"
                );
            }
            Ok(Handover::HandedOver {
                released,
                other_relays,
            }) => {
                tracing::warn!(
                    failing_for_s = failing_for.as_secs(),
                    error = %error,
                    released,
                    other_relays,
                    "every publish failed past handover_after; handed the partitions to the \
                     other relays and standing by"
                );
            }
            Err(store_error) => {
                tracing::warn!(
                    error = %store_error,
                    "handing the partitions over failed; they expire on their own"
                );
            }
        }
        if self.leases.is_standing_by() {
            self.metrics.set_leases_held(0);
            self.health.record_standing_by();
            self.stand_by(stop).await;
        }
    }

    /// Stand by without leases, rebuilding the broker client now and then
    /// (every lease duration, doubling up to [`MAX_STANDBY_LEASES`]), and
    /// rejoin once it reaches the broker.
    async fn stand_by(&mut self, stop: &CancellationToken) {
        let lease = self.leases.lease_duration();
        let mut wait = lease;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            match self.publisher.recover().await {
                Ok(()) => {
                    tracing::info!("the broker client reaches the broker again; rejoining");
                    self.leases.rejoin();
                    self.health.record_rejoined();
                    self.next_stall_check = None;
                    return;
                }
                Err(failure) => {
                    self.health.record_unavailable(failure.message());
                    wait = (wait * 2).min(lease * MAX_STANDBY_LEASES);
                    tracing::warn!(
                        error = %failure,
                        retry_in_ms = wait.as_millis() as u64,
                        "standing by: the broker client still cannot reach the broker"
                    );
                }
            }
        }
    }
}
