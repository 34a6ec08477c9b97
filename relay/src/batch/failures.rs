//! Recording rejected events: a failed attempt with its retry time, or
//! dead on the last attempt, fenced by the leases of the batch.

use super::Dispatcher;
use crate::event::Fence;
use crate::event::{ClaimedEvent, FailedAttempt, Lease};

impl Dispatcher {
    pub(super) async fn record_rejections(
        &mut self,
        rejected: &[(ClaimedEvent, String)],
        leases: &[Lease],
    ) {
        let failures: Vec<FailedAttempt> = rejected
            .iter()
            .map(|(claimed, error)| {
                let failed_attempts = u32::try_from(claimed.event.attempts).unwrap_or(0) + 1;
                let retry_in = self.settings.retry.after_failure(failed_attempts);
                match retry_in {
                    Some(delay) => tracing::warn!(
                        event_id = %claimed.event.event_id,
                        topic = %claimed.event.topic,
                        attempt = failed_attempts,
                        retry_in_ms = delay.as_millis() as u64,
                        error = %error,
                        "publish rejected; will retry"
                    ),
                    None => tracing::error!(
                        event_id = %claimed.event.event_id,
                        topic = %claimed.event.topic,
                        attempts = failed_attempts,
                        error = %error,
                        "publish rejected on the last attempt; event is dead"
                    ),
                }
                FailedAttempt {
                    id: claimed.event.id,
                    partition_no: claimed.partition_no,
                    error: error.clone(),
                    retry_in,
                }
            })
            .collect();
        let dead = failures
            .iter()
            .filter(|failure| failure.retry_in.is_none())
            .count() as u64;
        match self
            .store
            .record_failures(
                Fence {
                    relay_id: self.leases.relay_id(),
                    partition_count: self.partition_count,
                    leases,
                },
                &failures,
            )
            .await
        {
            Ok(updated) => {
                self.totals.failed += updated;
                self.totals.dead += dead.min(updated);
                for ((claimed, _), failure) in rejected.iter().zip(&failures) {
                    if failure.retry_in.is_some() {
                        self.metrics.record_retried(&claimed.event.topic);
                    } else {
                        self.metrics.record_dead_lettered(&claimed.event.topic);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "recording failed attempts failed; the events stay pending")
            }
        }
    }
}
