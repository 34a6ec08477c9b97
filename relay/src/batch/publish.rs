//! One batch, published wave by wave: after a failure the later events of
//! the same aggregate stay unsent; after a wave the broker could not take
//! at all, nothing more is sent.

use std::collections::HashSet;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Dispatcher;
use super::waves::{AggregateKey, aggregate_key, split_into_topic_runs, split_into_waves};
use crate::publish::PublishFailure;
use crate::store::{ClaimedEvent, Lease};

/// What happened to the events of one batch.
#[derive(Default)]
pub(super) struct BatchOutcome {
    pub(super) published: Vec<i64>,
    pub(super) rejected: Vec<(ClaimedEvent, String)>,
    pub(super) unavailable: usize,
    /// The broker's error for the first event it could not take.
    pub(super) first_unavailable: Option<String>,
    /// Aggregates with an event that failed or was left unsent: their later
    /// events must wait for the next fetch, which sees why.
    pub(super) blocked: HashSet<AggregateKey>,
}

impl Dispatcher {
    /// Publish a batch in its own `batch` span, which records the batch's
    /// counts once it is done.
    pub(super) async fn publish_batch(
        &mut self,
        batch: Vec<ClaimedEvent>,
        leases: &[Lease],
        stop: &CancellationToken,
    ) -> BatchOutcome {
        let span = tracing::info_span!(
            "batch",
            events = batch.len(),
            leases = leases.len(),
            published = tracing::field::Empty,
            rejected = tracing::field::Empty,
            unavailable = tracing::field::Empty,
        );
        let started = Instant::now();
        let outcome = self
            .publish_waves(batch, leases, stop)
            .instrument(span.clone())
            .await;
        self.metrics.observe_batch_publish(started.elapsed());
        span.record("published", outcome.published.len());
        span.record("rejected", outcome.rejected.len());
        span.record("unavailable", outcome.unavailable);
        outcome
    }

    /// Publish a batch wave by wave. After a failure, the later events of
    /// the same aggregate stay unsent; after a wave the broker could not
    /// take at all, nothing more is sent.
    async fn publish_waves(
        &mut self,
        batch: Vec<ClaimedEvent>,
        leases: &[Lease],
        stop: &CancellationToken,
    ) -> BatchOutcome {
        let batch_size = batch.len();
        let started = Instant::now();
        let mut outcome = BatchOutcome::default();
        let waves = if self.publisher.keeps_order() {
            split_into_topic_runs(batch)
        } else {
            split_into_waves(batch)
        };
        let wave_count = waves.len();
        let mut waves = waves.into_iter().enumerate();
        while let Some((wave_index, wave)) = waves.next() {
            let wave: Vec<ClaimedEvent> = wave
                .into_iter()
                .filter(|claimed| !outcome.blocked.contains(&aggregate_key(claimed)))
                .collect();
            if wave.is_empty() {
                continue;
            }
            if stop.is_cancelled() {
                // Unsent waves stay pending; the next owner sends them in order.
                tracing::debug!(
                    wave_index,
                    "stop requested; leaving the rest of the batch for later"
                );
                block_unsent(&mut outcome.blocked, &wave, waves);
                break;
            }
            if !self
                .leases
                .snapshot()
                .valid_for(self.settings.publish_timeout)
            {
                tracing::warn!(
                    wave_index,
                    "lease too close to expiry; leaving the rest of the batch for later"
                );
                block_unsent(&mut outcome.blocked, &wave, waves);
                break;
            }
            self.note_commit_order(&wave);
            let events: Vec<_> = wave.iter().map(|claimed| claimed.event.clone()).collect();
            let results = self.publisher.publish(&events).await;
            let wave_unavailable = self.account_for_wave(wave, results, &mut outcome);
            if wave_unavailable > 0 && outcome.published.is_empty() && outcome.rejected.is_empty() {
                block_unsent(&mut outcome.blocked, &[], waves);
                break;
            }
        }
        // Events never sent (blocked or after an outage) count as unavailable
        // when nothing else happened, so the caller backs off.
        let handled = outcome.published.len() + outcome.rejected.len() + outcome.unavailable;
        if outcome.published.is_empty() && outcome.rejected.is_empty() && outcome.unavailable > 0 {
            outcome.unavailable += batch_size - handled;
        }
        tracing::debug!(
            events = batch_size,
            waves = wave_count,
            published = outcome.published.len(),
            rejected = outcome.rejected.len(),
            unavailable = outcome.unavailable,
            leases = leases.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "batch published"
        );
        outcome
    }
}

impl Dispatcher {
    /// Count and sort what the broker answered for each event of a wave;
    /// returns how many events it could not take.
    fn account_for_wave(
        &mut self,
        wave: Vec<ClaimedEvent>,
        results: Vec<Result<(), PublishFailure>>,
        outcome: &mut BatchOutcome,
    ) -> usize {
        let acknowledged_at = chrono::Utc::now();
        let mut unavailable = 0;
        for (claimed, result) in wave.into_iter().zip(results) {
            let Err(failure) = result else {
                if outcome.blocked.contains(&aggregate_key(&claimed)) {
                    self.note_published_out_of_order(&claimed);
                }
                self.metrics.record_published(&claimed.event.topic, 1);
                self.metrics
                    .observe_commit_to_ack(claimed.event.created_at, acknowledged_at);
                let published_id = claimed.event.id;
                let highest = self
                    .last_published
                    .entry(aggregate_key(&claimed))
                    .or_insert(published_id);
                *highest = (*highest).max(published_id);
                outcome.published.push(published_id);
                continue;
            };
            let follows_a_failure = !outcome.blocked.insert(aggregate_key(&claimed));
            if let PublishFailure::Held(_) = failure {
                // Never sent: it waits for the failed event before it.
                continue;
            }
            if follows_a_failure && matches!(failure, PublishFailure::Rejected(_)) {
                // Sent with an earlier event of its aggregate that failed:
                // it waits for that one, its own attempts untouched, and
                // meets the broker again in its turn.
                tracing::debug!(
                    event_id = %claimed.event.event_id,
                    error = %failure,
                    "rejected behind a failed event of its aggregate; held for its turn"
                );
                continue;
            }
            self.metrics.record_failed(&claimed.event.topic);
            match failure {
                PublishFailure::Unavailable(message) => {
                    unavailable += 1;
                    tracing::debug!(event_id = %claimed.event.event_id, error = %message, "broker unavailable");
                    outcome.first_unavailable.get_or_insert(message);
                }
                PublishFailure::Rejected(message) => outcome.rejected.push((claimed, message)),
                PublishFailure::Held(_) => {}
            }
        }
        outcome.unavailable += unavailable;
        unavailable
    }
}

/// Block the aggregates of events that stay unsent: `wave` and every wave
/// after it.
fn block_unsent(
    blocked: &mut HashSet<AggregateKey>,
    wave: &[ClaimedEvent],
    later_waves: impl Iterator<Item = (usize, Vec<ClaimedEvent>)>,
) {
    blocked.extend(wave.iter().map(aggregate_key));
    for (_, later) in later_waves {
        blocked.extend(later.iter().map(aggregate_key));
    }
}
