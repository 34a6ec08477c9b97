//! The batch loop: fetch due events of the leased partitions, publish them
//! in waves, mark the acknowledged ones published (overlapped with the next
//! batch) and record the failures.
//!
//! The broker's acknowledgements of a batch are not awaited before the
//! next batch is fetched and sent (when the publisher keeps order across
//! sends, see [`Publisher::send`]): batches stay in flight while the next
//! ones are fetched and handed over, so neither the database nor the
//! broker waits for the other, and a pause in the broker's confirms does
//! not hold up new events. An event may then be acknowledged although an
//! earlier event of its aggregate failed in a batch in flight before it:
//! both were sent before the failure was known. That is the only
//! reordering; it is logged and counted
//! (`outbox_relay_events_published_out_of_order_total`), and the failed
//! event goes out again later. Events not yet sent when a failure is known
//! stay held.
//!
//! - `mod.rs`: [`Dispatcher`] and its loop.
//! - `publish.rs`: one batch, wave by wave, and what became of each event.
//! - `in_flight.rs`: the batches in flight, and landing them: their
//!   acknowledgements, failures and marks, and the loop's reaction to an
//!   outage.
//! - `waves.rs`: how a batch splits into waves that keep each aggregate's
//!   order.
//! - `byte_budget.rs`: the payload bytes a fetch and the batches in flight
//!   may hold.
//! - `fetch.rs`: fetching, and fetching the next batch while one is sent,
//!   with the ids left out kept few.
//! - `marker.rs`: marks in flight, overlapped with the next batches.
//! - `failures.rs`: recording rejected events for retry or as dead.
//! - `commit_order.rs`: noticing events committed out of id order.
//! - `handover.rs`: handing partitions over when publishing stalls.
//! - `quiet.rs`: keeping producers' commit notifications quiet while the
//!   loop polls on its own.

mod byte_budget;
mod commit_order;
mod failures;
mod fetch;
mod handover;
mod in_flight;
mod marker;
mod metrics;
mod publish;
mod publish_health;
mod quiet;
mod retry;
pub(crate) mod waves;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::event::{AggregateKey, ClaimedEvent, Lease, Wakeup};
use crate::leases::{LeaseKeeper, Rebalanced, Release};
use crate::publish::Publisher;
use crate::source::EventSource;
use crate::tasks::Tasks;
use marker::MarkInFlight;
use publish::SentBatch;

pub use metrics::{METRICS_CONTENT_TYPE, RelayMetrics};
pub use publish_health::PublishHealth;
pub use retry::RetryPolicy;

/// Settings of the batch loop.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DispatchSettings {
    /// Events fetched per batch.
    pub batch_size: i64,
    /// Payload bytes one fetch and the batches in flight hold together
    /// (`max_batch_bytes`); a fetch returns at least one event whatever its
    /// size.
    pub max_batch_bytes: i64,
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
    /// Whether acknowledged events are deleted rather than marked
    /// published ([`EventSource::delete_acknowledged`]): the mark of
    /// `retention.published = "0s"`.
    pub delete_acknowledged: bool,
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
    /// Batches sent whose last acknowledgements are still to come, oldest
    /// first (see `in_flight.rs`).
    in_flight: VecDeque<SentBatch>,
    /// Batches landed so far.
    landed_count: u64,
    /// Per landed batch still of interest (by its landing number), the
    /// aggregates with an event that failed or stayed unsent: an event of
    /// theirs acknowledged in a batch sent before it landed went out of
    /// order.
    landed_failures: VecDeque<(u64, HashSet<AggregateKey>)>,
    /// The next batch, being fetched while the previous one is sent.
    prefetched: Option<fetch::Prefetched>,
    /// While a fetch runs, or its batch waits: how many batches had landed
    /// when it started (it must not return events of aggregates that failed
    /// since).
    fetch_started_after: Option<u64>,
    /// Highest id published per aggregate, to notice events committed out
    /// of id order (see [`Dispatcher::note_commit_order`]).
    last_published: HashMap<AggregateKey, i64>,
    /// While publishes keep failing: when the next handover check is due.
    next_stall_check: Option<Instant>,
    /// Until when producers need not notify this relay of commits: it
    /// polls on its own meanwhile (see `quiet.rs`).
    quiet_until: Option<Instant>,
    /// Whether an event was accounted unavailable while later ones may
    /// still be in flight: every outcome accounted after it counts as not
    /// sent, and nothing new is sent before the batches in flight have
    /// landed (see `publish.rs`, `Dispatcher::after_a_loss`).
    stream_lost: bool,
    /// The payload bytes per event of the last batch fetched
    /// (`byte_budget.rs`).
    bytes_per_event: Option<usize>,
    /// Whether the last batch fetched filled its limit: more may be
    /// waiting, so the next one is fetched at once.
    more_waiting: bool,
    /// Where the marks and the fetch ahead run.
    tasks: Tasks,
}

impl Dispatcher {
    /// A dispatcher over the partitions of `leases`; nothing runs until
    /// [`Dispatcher::run`].
    pub fn new(
        store: Arc<dyn EventSource>,
        publisher: Arc<dyn Publisher>,
        leases: Arc<LeaseKeeper>,
        wakeup: Wakeup,
        settings: DispatchSettings,
        metrics: Arc<RelayMetrics>,
        health: Arc<PublishHealth>,
    ) -> Self {
        let partition_count = leases.partition_count();
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
            in_flight: VecDeque::new(),
            landed_count: 0,
            landed_failures: VecDeque::new(),
            prefetched: None,
            fetch_started_after: None,
            last_published: HashMap::new(),
            next_stall_check: None,
            quiet_until: None,
            stream_lost: false,
            bytes_per_event: None,
            more_waiting: false,
            tasks: Tasks::new(),
        }
    }

    /// Spawn the marks and the fetch ahead on `tasks` rather than on a
    /// tracker of the dispatcher's own.
    pub fn with_tasks(mut self, tasks: Tasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// Run batches until `stop` is cancelled, then finish the batch in hand
    /// and its marks. Leases are not released here.
    pub async fn run(mut self, stop: CancellationToken) -> DispatchTotals {
        let mut state = LoopState {
            idle_delay: self.settings.poll_interval_min,
            outage_delay: Duration::ZERO,
            next_rebalance: Instant::now(),
        };
        while !stop.is_cancelled() {
            self.rebalance_if_due(&mut state, &stop).await;
            let snapshot = self.leases.snapshot();
            self.metrics.set_leases_held(snapshot.leases.len());
            // Holding no lease, the relay has nothing to be told of: it
            // fetches as soon as a rebalance gives it partitions.
            self.keep_notifications_quiet(snapshot.leases.is_empty())
                .await;
            if snapshot.leases.is_empty() || !snapshot.valid_for(self.settings.publish_timeout) {
                self.drop_prefetched();
                self.land_all(&mut state, &stop).await;
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
            let full_batch = self.more_waiting;
            // Send this batch behind the ones in flight and land those the
            // broker has answered for, fetching the next batch meanwhile
            // when more is waiting.
            if full_batch {
                self.prefetch_after(&snapshot.leases, &fetched).await;
            }
            let outage = self
                .send_and_land(fetched, snapshot.leases, &mut state, &stop)
                .await;
            if !full_batch && !outage {
                self.pause(&stop, self.settings.poll_interval_min).await;
            }
        }
        self.drop_prefetched();
        let in_flight: Vec<SentBatch> = self.in_flight.drain(..).collect();
        self.land_together(in_flight).await;
        self.finish_marking().await;
        self.totals
    }

    /// Send `batch` behind the batches in flight, then land those the
    /// broker has answered for; when the batch cannot stay in flight (a
    /// failure is known already, or the publisher does not keep order
    /// across sends), land everything, this batch too. True when the loop
    /// backed off after an outage.
    async fn send_and_land(
        &mut self,
        batch: Vec<ClaimedEvent>,
        leases: Vec<Lease>,
        state: &mut LoopState,
        stop: &CancellationToken,
    ) -> bool {
        let sent = self.send_batch(batch, leases, stop).await;
        let keep_sending = sent.may_stay_in_flight() && !stop.is_cancelled();
        self.in_flight.push_back(sent);
        if keep_sending {
            self.land_answered(state, stop).await
        } else {
            self.land_all(state, stop).await
        }
    }

    /// Rebalance the leases every renewal interval, between batches. The
    /// batches in flight and the marks are fenced by the leases they were
    /// fetched under: they are settled before a lease is given up, and
    /// only then. Settling waits for the broker's slowest acknowledgement
    /// (a RabbitMQ queue confirms persistent messages on its disk sync,
    /// up to 200 ms apart), so doing it at every rebalance stalled the
    /// events committed meanwhile.
    async fn rebalance_if_due(&mut self, state: &mut LoopState, stop: &CancellationToken) {
        if Instant::now() < state.next_rebalance {
            return;
        }
        state.next_rebalance = Instant::now() + self.leases.renew_interval();
        let rebalanced = match self.leases.rebalance(Release::Deferred).await {
            Ok(Rebalanced::MustSettleFirst) => {
                self.drop_prefetched();
                self.land_all(state, stop).await;
                self.finish_marking().await;
                self.leases.rebalance(Release::Now).await
            }
            other => other,
        };
        if let Err(error) = rebalanced {
            tracing::warn!(%error, "lease rebalance failed; retrying");
        }
    }

    /// The next batch of the partitions of `leases`. `None` when there is
    /// nothing to publish (after landing the batch in flight, or a pause)
    /// or the fetch failed (after a pause).
    async fn take_batch(
        &mut self,
        state: &mut LoopState,
        leases: &[Lease],
        stop: &CancellationToken,
    ) -> Option<Vec<ClaimedEvent>> {
        let fetched = match self.fetch(leases, state, stop).await {
            Ok(fetched) => fetched,
            Err(error) => {
                tracing::warn!(%error, "fetching pending events failed");
                self.land_all(state, stop).await;
                self.pause(stop, self.settings.poll_interval_max).await;
                return None;
            }
        };
        if fetched.is_empty() && !self.in_flight.is_empty() {
            // Caught up: wait for the broker's answers or for new events,
            // then look again.
            self.wait_for_answers(state, stop).await;
            return None;
        }
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
        // A batch fetched ahead would be stale after the pause.
        self.drop_prefetched();
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
            self.handle_stall(stop, error, failing_for).await;
            state.next_rebalance = Instant::now();
            state.outage_delay = Duration::ZERO;
            return;
        }
        // New events do not bring the broker back: a producer's commit
        // notification (or a streamed transaction) must not cut the pause
        // short, or a steady writer would have the loop fetch, encode and
        // resend the same batch at its commit rate for the whole outage.
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(state.outage_delay) => {}
        }
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
