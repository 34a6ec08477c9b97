//! [`Dispatcher`]: the batch loop. Fetch due events of the leased
//! partitions, publish them in waves, mark the acknowledged ones published
//! (overlapped with the next batch) and record the failures.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::Error;
use crate::leases::{Handover, LeaseKeeper};
use crate::metrics::RelayMetrics;
use crate::publish::{PublishFailure, Publisher};
use crate::publish_health::PublishHealth;
use crate::retry::RetryPolicy;
use crate::store::{ClaimedEvent, FailedAttempt, Lease, PendingEvents};
use crate::wakeup::Wakeup;
use crate::waves::{AggregateKey, aggregate_key, split_into_waves};

/// Settings of the batch loop.
#[derive(Debug, Clone)]
pub struct DispatchSettings {
    /// Events fetched per batch.
    pub batch_size: i64,
    /// Longest wait for one wave's acknowledgements; a lease must stay valid
    /// at least this long for a wave to be sent.
    pub publish_timeout: Duration,
    /// Retry schedule of failed events.
    pub retry: RetryPolicy,
    /// Whether a dead event holds the later events of its aggregate.
    pub hold_dead: bool,
    /// Shortest pause between two polls of an idle table.
    pub poll_interval_min: Duration,
    /// Longest pause between two polls of an idle table.
    pub poll_interval_max: Duration,
    /// How long every publish may fail with the broker unavailable before
    /// the broker client is rebuilt and the partitions are handed to other
    /// live relays.
    pub handover_after: Duration,
}

/// Totals of one relay run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchTotals {
    /// Events acknowledged by the broker and marked published.
    pub published: u64,
    /// Failed attempts recorded (broker rejections).
    pub failed: u64,
    /// Events moved to dead.
    pub dead: u64,
    /// Acknowledged events whose mark matched no row (lease lost).
    pub stale_marks: u64,
}

/// What happened to the events of one batch.
#[derive(Default)]
struct BatchOutcome {
    published: Vec<i64>,
    rejected: Vec<(ClaimedEvent, String)>,
    unavailable: usize,
    /// The broker's error for the first event it could not take.
    first_unavailable: Option<String>,
    /// Aggregates with an event that failed or was left unsent: their later
    /// events must wait for the next fetch, which sees why.
    blocked: HashSet<AggregateKey>,
}

/// A mark in flight: the ids it was given and its task, which returns the
/// rows it marked.
type MarkInFlight = (Vec<i64>, JoinHandle<Result<u64, Error>>);

/// A batch fetched ahead, and the leases it was fetched under: it is used
/// only while exactly those leases are held.
struct Prefetched {
    leases: Vec<Lease>,
    events: Vec<ClaimedEvent>,
}

/// The batch loop of one relay instance.
pub struct Dispatcher {
    store: Arc<dyn PendingEvents>,
    publisher: Arc<dyn Publisher>,
    leases: Arc<LeaseKeeper>,
    wakeup: Wakeup,
    settings: DispatchSettings,
    partition_count: i32,
    metrics: Arc<RelayMetrics>,
    health: Arc<PublishHealth>,
    totals: DispatchTotals,
    /// Published, not yet marked: left out of the next fetch.
    unmarked: HashSet<i64>,
    /// Marks in flight, oldest first.
    marking: VecDeque<MarkInFlight>,
    /// Highest id published per aggregate, to notice events committed out
    /// of id order (see [`Dispatcher::note_commit_order`]).
    last_published: HashMap<AggregateKey, i64>,
    /// While publishes keep failing: when the next handover check is due.
    next_stall_check: Option<Instant>,
}

/// Marks of earlier batches that may run while the next batch publishes:
/// each is one fenced `UPDATE`, so several overlap on the database.
const MAX_MARKS_IN_FLIGHT: usize = 3;

/// Aggregates remembered for the commit-order check before the memory is
/// cleared.
const COMMIT_ORDER_MEMORY: usize = 100_000;

/// Longest wait between two recovery attempts of a relay standing by, in
/// lease durations.
const MAX_STANDBY_LEASES: u32 = 8;

impl Dispatcher {
    /// A dispatcher; nothing runs until [`Dispatcher::run`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn PendingEvents>,
        publisher: Arc<dyn Publisher>,
        leases: Arc<LeaseKeeper>,
        wakeup: Wakeup,
        settings: DispatchSettings,
        partition_count: i32,
        metrics: Arc<RelayMetrics>,
        health: Arc<PublishHealth>,
    ) -> Self {
        Dispatcher {
            store,
            publisher,
            leases,
            wakeup,
            settings,
            partition_count,
            metrics,
            health,
            totals: DispatchTotals::default(),
            unmarked: HashSet::new(),
            marking: VecDeque::new(),
            last_published: HashMap::new(),
            next_stall_check: None,
        }
    }

    /// Run batches until `stop` is cancelled, then finish the batch in hand
    /// and its marks. Leases are not released here.
    pub async fn run(mut self, stop: CancellationToken) -> DispatchTotals {
        let mut idle_delay = self.settings.poll_interval_min;
        let mut outage_delay = Duration::ZERO;
        let mut next_rebalance = Instant::now();
        // The next batch, fetched while the previous one was publishing.
        let mut prefetched: Option<Prefetched> = None;
        while !stop.is_cancelled() {
            if Instant::now() >= next_rebalance {
                // Marks in flight are fenced by the leases they were fetched
                // under: settle them before any lease is given up.
                prefetched = None;
                self.finish_marking().await;
                if let Err(error) = self.leases.rebalance().await {
                    tracing::warn!(%error, "lease rebalance failed; retrying");
                }
                next_rebalance = Instant::now() + self.leases.renew_interval();
            }
            let snapshot = self.leases.snapshot();
            self.metrics.set_leases_held(snapshot.leases.len());
            if snapshot.leases.is_empty() || !snapshot.valid_for(self.settings.publish_timeout) {
                prefetched = None;
                self.pause(
                    &stop,
                    self.settings
                        .poll_interval_max
                        .min(self.leases.renew_interval()),
                )
                .await;
                continue;
            }
            let partitions = snapshot.partitions();
            let fetched = match prefetched.take() {
                Some(next) if next.leases == snapshot.leases => next.events,
                _ => match self.fetch(&partitions).await {
                    Ok(fetched) => fetched,
                    Err(error) => {
                        tracing::warn!(%error, "fetching pending events failed");
                        self.pause(&stop, self.settings.poll_interval_max).await;
                        continue;
                    }
                },
            };
            if fetched.is_empty() {
                self.health.record_idle();
                self.pause(&stop, idle_delay).await;
                idle_delay = (idle_delay * 2).min(self.settings.poll_interval_max);
                continue;
            }
            idle_delay = self.settings.poll_interval_min;
            let full_batch = fetched.len() as i64 >= self.settings.batch_size;
            let fetched_count = fetched.len();
            let (outcome, next) = if full_batch {
                // More is waiting: fetch the next batch while this one
                // publishes, leaving out this batch and the unmarked ones.
                let prefetch = self.prefetch(snapshot.leases.clone(), &fetched);
                tokio::join!(
                    self.publish_batch(fetched, &snapshot.leases, &stop),
                    prefetch
                )
            } else {
                (
                    self.publish_batch(fetched, &snapshot.leases, &stop).await,
                    None,
                )
            };
            let all_unavailable = outcome.unavailable == fetched_count;
            let unavailable_error = outcome.first_unavailable.clone();
            if let Some(mut next) = next.filter(|_| !all_unavailable) {
                // The prefetch ran before this batch's failures were recorded:
                // hold back what follows a failed or unsent event here.
                next.events
                    .retain(|claimed| !outcome.blocked.contains(&aggregate_key(claimed)));
                prefetched = Some(next).filter(|next| !next.events.is_empty());
            }
            self.settle(outcome, snapshot.leases).await;
            if all_unavailable {
                let error = unavailable_error.unwrap_or_else(|| "no event was sent".to_owned());
                let failing_for = self.health.record_unavailable(&error);
                outage_delay = next_outage_delay(outage_delay, self.settings.poll_interval_max);
                tracing::warn!(
                    events = fetched_count,
                    error = %error,
                    failing_for_s = failing_for.as_secs(),
                    retry_in_ms = outage_delay.as_millis() as u64,
                    "broker unavailable for the whole batch; backing off"
                );
                if self.stall_check_due() {
                    prefetched = None;
                    self.handle_stall(&stop, &error, failing_for).await;
                    next_rebalance = Instant::now();
                    outage_delay = Duration::ZERO;
                    continue;
                }
                self.pause(&stop, outage_delay).await;
            } else {
                self.health.record_success();
                self.next_stall_check = None;
                outage_delay = Duration::ZERO;
                if !full_batch {
                    self.pause(&stop, self.settings.poll_interval_min).await;
                }
            }
        }
        self.finish_marking().await;
        self.totals
    }

    /// Whether publishes have failed past `handover_after` and the stall
    /// was not handled in the last `handover_after`.
    fn stall_check_due(&mut self) -> bool {
        if !self.health.is_stalled() {
            return false;
        }
        let now = Instant::now();
        match self.next_stall_check {
            Some(due) if now < due => false,
            _ => {
                self.next_stall_check = Some(now + self.settings.handover_after);
                true
            }
        }
    }

    /// Every publish has failed for `handover_after`: rebuild the broker
    /// client and, when other relays are live, hand them the partitions and
    /// stand by until the client reaches the broker again. A relay that is
    /// alone keeps its partitions and goes on trying.
    async fn handle_stall(&mut self, stop: &CancellationToken, error: &str, failing_for: Duration) {
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

    /// Wait for a wake-up, the delay, or the stop.
    async fn pause(&self, stop: &CancellationToken, delay: Duration) {
        tokio::select! {
            () = stop.cancelled() => {}
            () = self.wakeup.wait(delay) => {}
        }
    }

    /// Fetch a batch, leaving out events published but not yet marked.
    async fn fetch(&self, partitions: &[i32]) -> Result<Vec<ClaimedEvent>, Error> {
        let unmarked: Vec<i64> = self.unmarked.iter().copied().collect();
        self.store
            .fetch_pending(
                self.partition_count,
                partitions,
                &unmarked,
                self.settings.hold_dead,
                self.settings.batch_size,
            )
            .await
    }

    /// A future fetching the batch after `current`, owning what it needs so
    /// it can run beside [`Dispatcher::publish_batch`]. A failed prefetch is
    /// logged and yields nothing; the loop then fetches as usual.
    fn prefetch(
        &self,
        leases: Vec<Lease>,
        current: &[ClaimedEvent],
    ) -> impl std::future::Future<Output = Option<Prefetched>> + use<> {
        let store = Arc::clone(&self.store);
        let partitions: Vec<i32> = leases.iter().map(|lease| lease.partition_no).collect();
        let exclude: Vec<i64> = self
            .unmarked
            .iter()
            .copied()
            .chain(current.iter().map(|claimed| claimed.event.id))
            .collect();
        let partition_count = self.partition_count;
        let hold_dead = self.settings.hold_dead;
        let limit = self.settings.batch_size;
        async move {
            match store
                .fetch_pending(partition_count, &partitions, &exclude, hold_dead, limit)
                .await
            {
                Ok(events) => Some(Prefetched { leases, events }),
                Err(error) => {
                    tracing::warn!(%error, "prefetching the next batch failed");
                    None
                }
            }
        }
    }

    /// Publish a batch in its own `batch` span, which records the batch's
    /// counts once it is done.
    async fn publish_batch(
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
        let waves = split_into_waves(batch);
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
            let acknowledged_at = chrono::Utc::now();
            let mut wave_unavailable = 0;
            for (claimed, result) in wave.into_iter().zip(results) {
                match result {
                    Ok(()) => {
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
                    }
                    Err(failure) => {
                        self.metrics.record_failed(&claimed.event.topic);
                        outcome.blocked.insert(aggregate_key(&claimed));
                        match failure {
                            PublishFailure::Unavailable(message) => {
                                wave_unavailable += 1;
                                if outcome.first_unavailable.is_none() {
                                    outcome.first_unavailable = Some(message.clone());
                                }
                                tracing::debug!(event_id = %claimed.event.event_id, error = %message, "broker unavailable");
                            }
                            PublishFailure::Rejected(message) => {
                                outcome.rejected.push((claimed, message))
                            }
                        }
                    }
                }
            }
            outcome.unavailable += wave_unavailable;
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

    /// Warn about an event whose aggregate already had a later event
    /// published: its transaction committed after that later one's, which
    /// happens when producers write one aggregate from concurrent
    /// transactions without serializing them. The relay cannot restore the
    /// order; producers must serialize writes to one aggregate.
    fn note_commit_order(&mut self, wave: &[ClaimedEvent]) {
        if self.last_published.len() > COMMIT_ORDER_MEMORY {
            self.last_published.clear();
        }
        for claimed in wave {
            // A retried event (attempts > 0) was held back on purpose.
            if claimed.event.attempts == 0
                && let Some(&later) = self.last_published.get(&aggregate_key(claimed))
                && later > claimed.event.id
            {
                tracing::warn!(
                    aggregate_type = %claimed.event.aggregate_type,
                    aggregate_id = %claimed.event.aggregate_id,
                    event_id = %claimed.event.event_id,
                    id = claimed.event.id,
                    later_published_id = later,
                    "event committed after a later event of its aggregate was published; \
                     serialize the producer's writes to one aggregate"
                );
            }
        }
    }

    /// Record failures now; mark successes in the background, overlapped
    /// with the next batches.
    async fn settle(&mut self, outcome: BatchOutcome, leases: Vec<Lease>) {
        if !outcome.rejected.is_empty() {
            self.record_rejections(&outcome.rejected, &leases).await;
        }
        if outcome.published.is_empty() {
            return;
        }
        while self.marking.len() >= MAX_MARKS_IN_FLIGHT {
            self.settle_oldest_mark().await;
        }
        self.unmarked.extend(outcome.published.iter().copied());
        let store = Arc::clone(&self.store);
        let relay_id = self.leases.relay_id().to_owned();
        let partition_count = self.partition_count;
        let ids = outcome.published;
        let task_ids = ids.clone();
        let task = tokio::spawn(async move {
            store
                .mark_published(&relay_id, partition_count, &leases, &task_ids)
                .await
        });
        self.marking.push_back((ids, task));
    }

    /// Wait for every mark in flight and account for it.
    async fn finish_marking(&mut self) {
        while !self.marking.is_empty() {
            self.settle_oldest_mark().await;
        }
    }

    /// Wait for the oldest mark in flight and account for it.
    async fn settle_oldest_mark(&mut self) {
        let Some((ids, task)) = self.marking.pop_front() else {
            return;
        };
        for id in &ids {
            self.unmarked.remove(id);
        }
        match task.await {
            Ok(Ok(marked)) => {
                self.totals.published += marked;
                let stale = ids.len() as u64 - marked.min(ids.len() as u64);
                if stale > 0 {
                    self.totals.stale_marks += stale;
                    self.metrics.record_stale_marks(stale);
                    tracing::warn!(
                        stale,
                        "published events not marked: their partition lease was lost (they will be published again)"
                    );
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, events = ids.len(), "marking published events failed; they will be published again");
            }
            Err(error) => {
                tracing::error!(%error, events = ids.len(), "the marking task failed; the events will be published again");
            }
        }
    }

    async fn record_rejections(&mut self, rejected: &[(ClaimedEvent, String)], leases: &[Lease]) {
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
                self.leases.relay_id(),
                self.partition_count,
                leases,
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

/// The next pause while the broker is down: doubling from 100 ms, capped at
/// 5 s (or the idle poll ceiling, when that is longer), so the relay neither
/// hammers a broker that is down nor waits long once it is back.
fn next_outage_delay(previous: Duration, poll_interval_max: Duration) -> Duration {
    let cap = Duration::from_secs(5).max(poll_interval_max);
    if previous.is_zero() {
        Duration::from_millis(100)
    } else {
        (previous * 2).min(cap)
    }
}
