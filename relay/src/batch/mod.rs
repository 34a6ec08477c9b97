//! The batch loop: fetch due events of the leased partitions, publish them
//! in waves, mark the acknowledged ones published (overlapped with the next
//! batch) and record the failures.
//!
//! - `mod.rs`: [`Dispatcher`] and its loop.
//! - `publish.rs`: one batch, wave by wave, and what became of each event.
//! - `waves.rs`: how a batch splits into waves that keep each aggregate's
//!   order.
//! - `prefetch.rs`: fetching, and fetching the next batch while one
//!   publishes, with the ids left out kept few.
//! - `marker.rs`: marks in flight, overlapped with the next batches.
//! - `failures.rs`: recording rejected events for retry or as dead.
//! - `commit_order.rs`: noticing events committed out of id order.
//! - `handover.rs`: handing partitions over when publishing stalls.
//! - `quiet.rs`: keeping producers' commit notifications quiet while the
//!   loop polls on its own.

mod commit_order;
mod failures;
mod handover;
mod marker;
mod prefetch;
mod publish;
mod quiet;
pub(crate) mod waves;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::leases::LeaseKeeper;
use crate::metrics::RelayMetrics;
use crate::publish::Publisher;
use crate::publish_health::PublishHealth;
use crate::retry::RetryPolicy;
use crate::store::{ClaimedEvent, EventSource, Lease};
use crate::wakeup::Wakeup;
use marker::MarkInFlight;
use prefetch::Prefetched;
use waves::{AggregateKey, aggregate_key};

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
    /// live relays: the bound of the relay's default [`PublishHealth`]; the
    /// loop reads it from the health it reports to.
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

/// What the loop carries from one batch to the next.
struct LoopState {
    /// The next pause of an idle loop, growing while nothing comes.
    idle_delay: Duration,
    /// The next pause after a batch the broker took nothing of.
    outage_delay: Duration,
    /// When the leases are rebalanced next.
    next_rebalance: Instant,
    /// The next batch, fetched while the previous one was publishing.
    prefetched: Option<Prefetched>,
}

/// The batch loop of one relay instance.
pub struct Dispatcher {
    store: Arc<dyn EventSource>,
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
    /// Until when producers need not notify this relay of commits: it
    /// polls on its own meanwhile (see `quiet.rs`).
    quiet_until: Option<Instant>,
}

impl Dispatcher {
    /// A dispatcher; nothing runs until [`Dispatcher::run`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn EventSource>,
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
            quiet_until: None,
        }
    }

    /// Run batches until `stop` is cancelled, then finish the batch in hand
    /// and its marks. Leases are not released here.
    pub async fn run(mut self, stop: CancellationToken) -> DispatchTotals {
        let mut state = LoopState {
            idle_delay: self.settings.poll_interval_min,
            outage_delay: Duration::ZERO,
            next_rebalance: Instant::now(),
            prefetched: None,
        };
        while !stop.is_cancelled() {
            self.rebalance_if_due(&mut state).await;
            let snapshot = self.leases.snapshot();
            self.metrics.set_leases_held(snapshot.leases.len());
            // Holding no lease, the relay has nothing to be told of: it
            // fetches as soon as a rebalance gives it partitions.
            self.keep_notifications_quiet(snapshot.leases.is_empty())
                .await;
            if snapshot.leases.is_empty() || !snapshot.valid_for(self.settings.publish_timeout) {
                state.prefetched = None;
                let wait = self
                    .settings
                    .poll_interval_max
                    .min(self.leases.renew_interval());
                self.pause(&stop, wait).await;
                continue;
            }
            let Some(fetched) = self.take_batch(&mut state, &snapshot.leases, &stop).await else {
                continue;
            };
            let full_batch = fetched.len() as i64 >= self.settings.batch_size;
            let fetched_count = fetched.len();
            let (outcome, next) = if full_batch {
                // More is waiting: fetch the next batch while this one
                // publishes, leaving out this batch and the unmarked ones.
                let prefetch = self.prefetch(snapshot.leases.clone(), &fetched);
                let (outcome, (next, settled)) = tokio::join!(
                    self.publish_batch(fetched, &snapshot.leases, &stop),
                    prefetch
                );
                self.account_for_marks(settled);
                (outcome, next)
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
                state.prefetched = Some(next).filter(|next| !next.events.is_empty());
            }
            self.settle(outcome, snapshot.leases).await;
            if all_unavailable {
                let error = unavailable_error.unwrap_or_else(|| "no event was sent".to_owned());
                self.back_off_after_outage(&mut state, &stop, &error, fetched_count)
                    .await;
            } else {
                self.health.record_success();
                self.next_stall_check = None;
                state.outage_delay = Duration::ZERO;
                self.keep_notifications_quiet(fetched_count >= quiet::QUIET_AFTER_BATCH)
                    .await;
                if !full_batch {
                    self.pause(&stop, self.settings.poll_interval_min).await;
                }
            }
        }
        self.finish_marking().await;
        self.totals
    }

    /// Rebalance the leases every renewal interval, between batches.
    async fn rebalance_if_due(&mut self, state: &mut LoopState) {
        if Instant::now() < state.next_rebalance {
            return;
        }
        // Marks in flight are fenced by the leases they were fetched under:
        // settle them before any lease is given up.
        state.prefetched = None;
        self.finish_marking().await;
        if let Err(error) = self.leases.rebalance().await {
            tracing::warn!(%error, "lease rebalance failed; retrying");
        }
        state.next_rebalance = Instant::now() + self.leases.renew_interval();
    }

    /// The next batch: the prefetched one when it was fetched under the
    /// leases held now, else a fresh fetch. `None` (after a pause) when
    /// there is nothing to publish or the fetch failed.
    async fn take_batch(
        &mut self,
        state: &mut LoopState,
        leases: &[Lease],
        stop: &CancellationToken,
    ) -> Option<Vec<ClaimedEvent>> {
        let fetched = match state.prefetched.take() {
            Some(next) if next.leases == leases => next.events,
            _ => {
                let partitions: Vec<i32> = leases.iter().map(|lease| lease.partition_no).collect();
                match self.fetch(&partitions).await {
                    Ok(fetched) => fetched,
                    Err(error) => {
                        tracing::warn!(%error, "fetching pending events failed");
                        self.pause(stop, self.settings.poll_interval_max).await;
                        return None;
                    }
                }
            }
        };
        if fetched.is_empty() {
            self.health.record_idle();
            if self.polls_on_its_own() {
                // Producers may not be notifying: poll again soon.
                self.pause(stop, self.settings.poll_interval_min).await;
                state.idle_delay = self.settings.poll_interval_min;
            } else {
                self.pause(stop, state.idle_delay).await;
                state.idle_delay = (state.idle_delay * 2).min(self.settings.poll_interval_max);
            }
            return None;
        }
        state.idle_delay = self.settings.poll_interval_min;
        Some(fetched)
    }

    /// The broker took nothing of a batch: back off as a whole, and hand the
    /// partitions over once publishes have failed for `handover_after`.
    async fn back_off_after_outage(
        &mut self,
        state: &mut LoopState,
        stop: &CancellationToken,
        error: &str,
        events: usize,
    ) {
        let failing_for = self.health.record_unavailable(error);
        state.outage_delay = next_outage_delay(state.outage_delay, self.settings.poll_interval_max);
        tracing::warn!(
            events,
            error = %error,
            failing_for_s = failing_for.as_secs(),
            retry_in_ms = state.outage_delay.as_millis() as u64,
            "broker unavailable for the whole batch; backing off"
        );
        if self.stall_check_due() {
            state.prefetched = None;
            self.handle_stall(stop, error, failing_for).await;
            state.next_rebalance = Instant::now();
            state.outage_delay = Duration::ZERO;
            return;
        }
        self.pause(stop, state.outage_delay).await;
    }

    /// Wait for a wake-up, the delay, or the stop.
    async fn pause(&self, stop: &CancellationToken, delay: Duration) {
        tokio::select! {
            () = stop.cancelled() => {}
            () = self.wakeup.wait(delay) => {}
        }
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
