//! One batch, published wave by wave: after a failure the later events of
//! the same aggregate stay unsent; after a wave the broker could not take
//! at all, nothing more is sent. The last wave's acknowledgements may be
//! awaited later ([`SentBatch`]), so the next batch is sent meanwhile.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Dispatcher;
use super::byte_budget::payload_bytes;
use super::waves::{split_into_topic_runs, split_into_waves};
use crate::event::{AggregateKey, aggregate_key};
use crate::event::{ClaimedEvent, Lease};
use crate::publish::{PendingAcknowledgements, PublishFailure};

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

impl BatchOutcome {
    /// Add the outcome of a later batch to this one.
    pub(super) fn absorb(&mut self, later: BatchOutcome) {
        self.published.extend(later.published);
        self.rejected.extend(later.rejected);
        self.unavailable += later.unavailable;
        if self.first_unavailable.is_none() {
            self.first_unavailable = later.first_unavailable;
        }
        self.blocked.extend(later.blocked);
    }
}

/// A batch whose waves were sent: the outcome of the waves already
/// acknowledged, and the last wave, its acknowledgements perhaps still to
/// come.
pub(super) struct SentBatch {
    /// Every id of the batch: left out of fetches until the batch lands.
    pub(super) ids: Vec<i64>,
    /// The payload bytes of the batch, counted against `max_batch_bytes`
    /// until it lands (`byte_budget.rs`).
    bytes: usize,
    /// The leases the batch was fetched under.
    pub(super) leases: Vec<Lease>,
    /// What became of the waves already acknowledged.
    outcome: BatchOutcome,
    /// The last wave sent, with its acknowledgements.
    tail: Option<(Vec<ClaimedEvent>, Tail)>,
    /// Whether the tail was handed to the broker in order with no failure
    /// known, so a later batch may be sent behind it.
    tail_in_order: bool,
    /// How many batches had landed when this one was sent: an event
    /// acknowledged here may follow a failed one of a batch that landed
    /// later.
    pub(super) landed_before_send: u64,
    wave_count: usize,
    started: Instant,
    /// How long handing the waves to the broker took.
    handed_over_in: Duration,
    /// The age of its oldest event when the batch was sent: from the
    /// commit (or `created_at`) to the send, the wait for a wake-up or
    /// poll and the fetch.
    oldest_age: Duration,
    span: tracing::Span,
}

/// The acknowledgements of a batch's last wave.
enum Tail {
    /// Still to come. (The mutex only makes the batch `Sync`, as the
    /// dispatcher must be; the future is polled through `get_mut`.)
    Pending(Mutex<PendingAcknowledgements>),
    /// Every one arrived.
    Answered(Vec<Result<(), PublishFailure>>),
}

impl SentBatch {
    /// Wait until the broker has answered for every event sent. Cancel
    /// safe: dropped before the end, the batch keeps waiting where it was.
    pub(super) async fn answered(&mut self) {
        if let Some((_, Tail::Pending(acknowledgements))) = &mut self.tail {
            let acknowledgements = acknowledgements
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            let results = acknowledgements.await;
            if let Some((_, tail)) = &mut self.tail {
                *tail = Tail::Answered(results);
            }
        }
    }

    /// Whether the broker has answered for every event sent, without
    /// waiting.
    pub(super) fn is_answered(&mut self) -> bool {
        if let Some((_, Tail::Pending(acknowledgements))) = &mut self.tail {
            let acknowledgements = acknowledgements
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            match acknowledgements.now_or_never() {
                Some(results) => {
                    if let Some((_, tail)) = &mut self.tail {
                        *tail = Tail::Answered(results);
                    }
                }
                None => return false,
            }
        }
        true
    }

    /// Events in the batch.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Payload bytes of the batch.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the next batch may be sent before this one's
    /// acknowledgements: its last wave is in flight in order, and no event
    /// of it has failed or been left unsent.
    pub(super) fn may_stay_in_flight(&self) -> bool {
        self.tail.is_some()
            && self.tail_in_order
            && self.outcome.blocked.is_empty()
            && self.outcome.rejected.is_empty()
            && self.outcome.unavailable == 0
    }
}

impl Dispatcher {
    /// Send a batch wave by wave, in its own `batch` span. Every wave but
    /// the last is acknowledged before the next is sent; the last one's
    /// acknowledgements are left to [`Dispatcher::land_batch`], so the next
    /// batch can be fetched and sent meanwhile. After a failure, the later
    /// events of the same aggregate stay unsent; after a wave the broker
    /// could not take at all, nothing more is sent.
    pub(super) async fn send_batch(
        &mut self,
        batch: Vec<ClaimedEvent>,
        leases: Vec<Lease>,
        stop: &CancellationToken,
    ) -> SentBatch {
        let span = tracing::info_span!(
            "batch",
            events = batch.len(),
            leases = leases.len(),
            published = tracing::field::Empty,
            rejected = tracing::field::Empty,
            unavailable = tracing::field::Empty,
        );
        let started = Instant::now();
        if self.in_flight.is_empty() {
            // Every event sent before a loss has been accounted for.
            self.stream_lost = false;
        }
        let ids = batch.iter().map(|claimed| claimed.event.id).collect();
        let oldest_age = oldest_age(&batch);
        let mut sent = SentBatch {
            ids,
            bytes: payload_bytes(&batch),
            leases,
            outcome: BatchOutcome::default(),
            tail: None,
            tail_in_order: false,
            landed_before_send: self.landed_count,
            wave_count: 0,
            started,
            handed_over_in: Duration::ZERO,
            oldest_age,
            span: span.clone(),
        };
        self.send_waves(batch, &mut sent, stop)
            .instrument(span)
            .await;
        sent.handed_over_in = started.elapsed();
        sent
    }

    /// Send the waves of `batch` into `sent`.
    async fn send_waves(
        &mut self,
        batch: Vec<ClaimedEvent>,
        sent: &mut SentBatch,
        stop: &CancellationToken,
    ) {
        let waves = if self.publisher.keeps_order() {
            split_into_topic_runs(batch)
        } else {
            split_into_waves(batch)
        };
        sent.wave_count = waves.len();
        let last_wave = waves.len().saturating_sub(1);
        let outcome = &mut sent.outcome;
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
            if wave_index < last_wave && !self.in_flight.is_empty() {
                // This wave's acknowledgements are accounted for before the
                // next wave is sent: first account for the batches sent
                // before it, so outcomes are accounted in send order.
                let earlier: Vec<SentBatch> = self.in_flight.drain(..).collect();
                self.land_together(earlier).await;
            }
            if self.stream_lost {
                tracing::debug!(
                    wave_index,
                    "an event sent earlier was lost; leaving the rest of the batch for later"
                );
                block_unsent(&mut outcome.blocked, &wave, waves);
                break;
            }
            self.note_commit_order(&wave);
            let events: Vec<_> = wave.iter().map(|claimed| claimed.event.clone()).collect();
            let handed = Arc::clone(&self.publisher).send(events).await;
            if wave_index == last_wave && handed.in_order_in_flight {
                sent.tail = Some((wave, Tail::Pending(Mutex::new(handed.acknowledgements))));
                sent.tail_in_order = true;
                break;
            }
            let results = handed.acknowledgements.await;
            let wave_unavailable = self.account_for_wave(wave, results, outcome, &HashSet::new());
            if wave_unavailable > 0 {
                // The broker client lost events or cannot reach the broker:
                // what would follow counts as not sent anyway.
                block_unsent(&mut outcome.blocked, &[], waves);
                break;
            }
        }
    }

    /// Await the acknowledgements of a sent batch's last wave and return
    /// what became of all its events. `failed_before` are the aggregates
    /// with an event that failed or stayed unsent in the batches that
    /// landed after this one was sent: an event of theirs acknowledged here
    /// went out of order.
    pub(super) async fn land_batch(
        &mut self,
        mut sent: SentBatch,
        failed_before: &HashSet<AggregateKey>,
    ) -> BatchOutcome {
        let batch_size = sent.ids.len();
        let span = sent.span.clone();
        sent.answered().instrument(span).await;
        let mut outcome = std::mem::take(&mut sent.outcome);
        if let Some((wave, Tail::Answered(results))) = sent.tail.take() {
            self.account_for_wave(wave, results, &mut outcome, failed_before);
        }
        // Events never sent (blocked or after an outage) count as unavailable
        // when nothing else happened, so the caller backs off.
        let handled = outcome.published.len() + outcome.rejected.len() + outcome.unavailable;
        if outcome.published.is_empty() && outcome.rejected.is_empty() && outcome.unavailable > 0 {
            outcome.unavailable += batch_size - handled;
        }
        self.metrics.observe_batch_publish(sent.started.elapsed());
        sent.span.record("published", outcome.published.len());
        sent.span.record("rejected", outcome.rejected.len());
        sent.span.record("unavailable", outcome.unavailable);
        tracing::debug!(
            parent: &sent.span,
            events = batch_size,
            waves = sent.wave_count,
            published = outcome.published.len(),
            rejected = outcome.rejected.len(),
            unavailable = outcome.unavailable,
            leases = sent.leases.len(),
            oldest_age_ms = sent.oldest_age.as_millis() as u64,
            handed_over_us = sent.handed_over_in.as_micros() as u64,
            elapsed_ms = sent.started.elapsed().as_millis() as u64,
            "batch published"
        );
        outcome
    }
}

impl Dispatcher {
    /// Count and sort what the broker answered for each event of a wave;
    /// returns how many events it could not take.
    ///
    /// `failed_before` are aggregates with an event that failed in the
    /// batch sent before this one, while this one was already in flight.
    fn account_for_wave(
        &mut self,
        wave: Vec<ClaimedEvent>,
        results: Vec<Result<(), PublishFailure>>,
        outcome: &mut BatchOutcome,
        failed_before: &HashSet<AggregateKey>,
    ) -> usize {
        let acknowledged_at = chrono::Utc::now();
        let mut unavailable = 0;
        for (claimed, result) in wave.into_iter().zip(results) {
            let result = self.after_a_loss(result);
            let key = aggregate_key(&claimed);
            let Err(failure) = result else {
                if outcome.blocked.contains(&key) || failed_before.contains(&key) {
                    self.note_published_out_of_order(&claimed);
                }
                self.metrics.record_published(&claimed.event.topic, 1);
                let committed_at = claimed.committed_at.unwrap_or(claimed.event.created_at);
                self.metrics
                    .observe_commit_to_ack(committed_at, acknowledged_at);
                let published_id = claimed.event.id;
                let highest = self.last_published.entry(key).or_insert(published_id);
                *highest = (*highest).max(published_id);
                outcome.published.push(published_id);
                continue;
            };
            let failed_earlier = failed_before.contains(&key);
            let follows_a_failure = !outcome.blocked.insert(key) || failed_earlier;
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

impl Dispatcher {
    /// The outcome to account for an event whose broker outcome is
    /// `result`, in send order. Once an event went unacknowledged for want
    /// of the broker ([`PublishFailure::Unavailable`]: a confirm or delivery
    /// report that did not come, a connection or producer lost), the
    /// client may have lost it and everything sent after it: every later
    /// outcome, acknowledged or refused, counts as not sent until nothing
    /// sent before the loss is left in flight. Those events stay pending
    /// and go out again behind the lost one, in id order.
    fn after_a_loss(&mut self, result: Result<(), PublishFailure>) -> Result<(), PublishFailure> {
        match result {
            Err(PublishFailure::Unavailable(message)) => {
                self.stream_lost = true;
                Err(PublishFailure::Unavailable(message))
            }
            Err(PublishFailure::Held(message)) => Err(PublishFailure::Held(message)),
            _ if self.stream_lost => Err(PublishFailure::Unavailable(
                "sent after an event the broker did not acknowledge; counts as not sent".to_owned(),
            )),
            other => other,
        }
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

/// How long ago the oldest event of `batch` committed (or was created,
/// where the source does not know its commit).
fn oldest_age(batch: &[ClaimedEvent]) -> Duration {
    let now = chrono::Utc::now();
    batch
        .iter()
        .map(|claimed| claimed.committed_at.unwrap_or(claimed.event.created_at))
        .min()
        .and_then(|oldest| (now - oldest).to_std().ok())
        .unwrap_or_default()
}
