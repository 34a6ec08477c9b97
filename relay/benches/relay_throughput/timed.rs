//! A store and a publisher that time the relay's calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use outbox_relay::event::{ClaimedEvent, FailedAttempt, Fence, FetchRequest, Lease};
use outbox_relay::leases::{LeaseStore, Leased};
use outbox_relay::publish::{PublishFailure, Publisher};
use outbox_relay::source::{EventSource, OutboxStore};
use outbox_relay::store::{
    DeadEvent, DeadSelector, OperatorStore, OutboxBacklog, OutboxStatus, ReplayWindow,
};
use outbox_relay::{Error, OutboundEvent};
use uuid::Uuid;

#[derive(Default)]
pub(crate) struct Phases {
    pub(crate) fetch_calls: AtomicU64,
    pub(crate) fetch_rows: AtomicU64,
    pub(crate) fetch_nanos: AtomicU64,
    pub(crate) mark_calls: AtomicU64,
    pub(crate) mark_rows: AtomicU64,
    pub(crate) mark_nanos: AtomicU64,
    pub(crate) publish_calls: AtomicU64,
    pub(crate) publish_events: AtomicU64,
    pub(crate) publish_nanos: AtomicU64,
    /// Per fetch: (duration, rows returned), in call order.
    pub(crate) fetches: Mutex<Vec<(Duration, u64)>>,
    /// Per mark: duration, in call order.
    pub(crate) marks: Mutex<Vec<Duration>>,
    /// Marked total to wait for, and when it was reached.
    pub(crate) target: AtomicU64,
    pub(crate) reached: Mutex<Option<Instant>>,
    pub(crate) first_fetch: Mutex<Option<Instant>>,
}

impl Phases {
    pub(crate) fn new(target: u64) -> Arc<Phases> {
        let phases = Phases::default();
        phases.target.store(target, Ordering::Relaxed);
        Arc::new(phases)
    }

    pub(crate) fn reached(&self) -> Option<Instant> {
        *self.reached.lock().unwrap()
    }

    pub(crate) async fn wait_reached(&self, timeout: Duration) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(at) = self.reached() {
                return Some(at);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    pub(crate) fn secs(nanos: &AtomicU64) -> f64 {
        nanos.load(Ordering::Relaxed) as f64 / 1e9
    }

    pub(crate) fn report(&self, wall: Duration) -> String {
        let fetch_calls = self.fetch_calls.load(Ordering::Relaxed).max(1);
        let mark_calls = self.mark_calls.load(Ordering::Relaxed).max(1);
        let publish_calls = self.publish_calls.load(Ordering::Relaxed).max(1);
        let fetches = self.fetches.lock().unwrap();
        let marks = self.marks.lock().unwrap();
        let quarter = (fetches.len() / 4).max(1);
        let mean_ms = |items: &[(Duration, u64)]| {
            if items.is_empty() {
                return 0.0;
            }
            items.iter().map(|(d, _)| d.as_secs_f64()).sum::<f64>() * 1e3 / items.len() as f64
        };
        let first = mean_ms(&fetches[..quarter.min(fetches.len())]);
        let last = mean_ms(&fetches[fetches.len().saturating_sub(quarter)..]);
        let mark_quarter = (marks.len() / 4).max(1);
        let mark_mean = |items: &[Duration]| {
            if items.is_empty() {
                return 0.0;
            }
            items.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / items.len() as f64
        };
        let mark_first = mark_mean(&marks[..mark_quarter.min(marks.len())]);
        let mark_last = mark_mean(&marks[marks.len().saturating_sub(mark_quarter)..]);
        format!(
            "    phases over {:.2} s of wall time (fetch and publish run in the batch loop; mark runs in the background, overlapped with the next fetch+publish):\n\
             \x20     fetch_pending : {} calls, {:.2} s total, {:.2} ms/call (first quarter {:.2} ms, last quarter {:.2} ms), {:.0} rows returned/call\n\
             \x20     publish       : {} calls, {:.2} s total, {:.2} ms/call, {:.0} events/call\n\
             \x20     mark_published: {} calls, {:.2} s total, {:.2} ms/call (first quarter {:.2} ms, last quarter {:.2} ms), {:.0} rows/call\n\
             \x20     batch loop not in fetch or publish (waiting for the previous mark, pauses, bookkeeping): {:.2} s",
            wall.as_secs_f64(),
            self.fetch_calls.load(Ordering::Relaxed),
            Phases::secs(&self.fetch_nanos),
            Phases::secs(&self.fetch_nanos) * 1e3 / fetch_calls as f64,
            first,
            last,
            self.fetch_rows.load(Ordering::Relaxed) as f64 / fetch_calls as f64,
            self.publish_calls.load(Ordering::Relaxed),
            Phases::secs(&self.publish_nanos),
            Phases::secs(&self.publish_nanos) * 1e3 / publish_calls as f64,
            self.publish_events.load(Ordering::Relaxed) as f64 / publish_calls as f64,
            self.mark_calls.load(Ordering::Relaxed),
            Phases::secs(&self.mark_nanos),
            Phases::secs(&self.mark_nanos) * 1e3 / mark_calls as f64,
            mark_first,
            mark_last,
            self.mark_rows.load(Ordering::Relaxed) as f64 / mark_calls as f64,
            (wall.as_secs_f64()
                - Phases::secs(&self.fetch_nanos)
                - Phases::secs(&self.publish_nanos))
            .max(0.0),
        )
    }
}

pub(crate) fn add(counter: &AtomicU64, elapsed: Duration) {
    counter.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
}

/// Delegates to the relay's store, timing `fetch_pending` and
/// `mark_published`.
pub(crate) struct TimedStore {
    pub(crate) inner: Arc<dyn OutboxStore>,
    pub(crate) phases: Arc<Phases>,
}

impl LeaseStore for TimedStore {
    fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>> {
        self.inner.partition_count()
    }

    fn heartbeat<'a>(
        &'a self,
        relay_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<i64, Error>> {
        self.inner.heartbeat(relay_id, ttl)
    }

    fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        self.inner.deregister(relay_id)
    }

    fn renew_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
        ttl: Duration,
    ) -> Leased<'a> {
        self.inner.renew_leases(relay_id, leases, ttl)
    }

    fn acquire_leases<'a>(&'a self, relay_id: &'a str, limit: i64, ttl: Duration) -> Leased<'a> {
        self.inner.acquire_leases(relay_id, limit, ttl)
    }

    fn release_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        self.inner.release_leases(relay_id, leases)
    }
}

impl EventSource for TimedStore {
    fn fetch_pending<'a>(
        &'a self,
        request: FetchRequest<'a>,
    ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>> {
        let FetchRequest {
            partition_count,
            partitions,
            exclude,
            hold_dead,
            limit,
        } = request;
        Box::pin(async move {
            let started = Instant::now();
            let result = self
                .inner
                .fetch_pending(FetchRequest {
                    partition_count,
                    partitions,
                    exclude,
                    hold_dead,
                    limit,
                })
                .await;
            let elapsed = started.elapsed();
            let rows = result.as_ref().map_or(0, |rows| rows.len() as u64);
            if rows > 0 {
                self.phases
                    .first_fetch
                    .lock()
                    .unwrap()
                    .get_or_insert(started);
                self.phases.fetch_calls.fetch_add(1, Ordering::Relaxed);
                self.phases.fetch_rows.fetch_add(rows, Ordering::Relaxed);
                add(&self.phases.fetch_nanos, elapsed);
                self.phases.fetches.lock().unwrap().push((elapsed, rows));
            }
            result
        })
    }

    fn mark_published<'a>(
        &'a self,
        fence: Fence<'a>,
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        let Fence {
            relay_id,
            partition_count,
            leases,
        } = fence;
        Box::pin(async move {
            let started = Instant::now();
            let result = self
                .inner
                .mark_published(
                    Fence {
                        relay_id,
                        partition_count,
                        leases,
                    },
                    ids,
                )
                .await;
            let now = Instant::now();
            let elapsed = now - started;
            self.phases.mark_calls.fetch_add(1, Ordering::Relaxed);
            add(&self.phases.mark_nanos, elapsed);
            self.phases.marks.lock().unwrap().push(elapsed);
            if let Ok(marked) = &result {
                let total = self.phases.mark_rows.fetch_add(*marked, Ordering::Relaxed) + marked;
                if total >= self.phases.target.load(Ordering::Relaxed) {
                    self.phases.reached.lock().unwrap().get_or_insert(now);
                }
            }
            result
        })
    }

    fn record_failures<'a>(
        &'a self,
        fence: Fence<'a>,
        failures: &'a [FailedAttempt],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        let Fence {
            relay_id,
            partition_count,
            leases,
        } = fence;
        self.inner.record_failures(
            Fence {
                relay_id,
                partition_count,
                leases,
            },
            failures,
        )
    }
}

impl OperatorStore for TimedStore {
    fn migrate(&self) -> BoxFuture<'_, Result<(), Error>> {
        self.inner.migrate()
    }

    fn delete_published(
        &self,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, Error>> {
        self.inner.delete_published(older_than, limit)
    }

    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>> {
        self.inner.status()
    }

    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>> {
        self.inner.backlog()
    }

    fn database_time(&self) -> BoxFuture<'_, Result<chrono::DateTime<chrono::Utc>, Error>> {
        self.inner.database_time()
    }

    fn topic_exists<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        self.inner.topic_exists(topic)
    }

    fn fetch_published<'a>(
        &'a self,
        window: &'a ReplayWindow,
        after_id: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>> {
        self.inner.fetch_published(window, after_id, limit)
    }

    fn list_dead<'a>(
        &'a self,
        selector: &'a DeadSelector,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<DeadEvent>, Error>> {
        self.inner.list_dead(selector, limit)
    }

    fn retry_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        self.inner.retry_dead(selector)
    }

    fn discard_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        self.inner.discard_dead(selector)
    }
}

/// When each event was acknowledged, by event id.
pub(crate) type Stamps = Arc<Mutex<HashMap<Uuid, Instant>>>;

/// Delegates to the relay's publisher, timing `publish` and stamping the
/// acknowledgement time of every event it published.
pub(crate) struct TimedPublisher {
    pub(crate) inner: Arc<dyn Publisher>,
    pub(crate) phases: Arc<Phases>,
    pub(crate) acks: Option<Stamps>,
    pub(crate) failures: AtomicU64,
}

impl Publisher for TimedPublisher {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(async move {
            let started = Instant::now();
            let results = self.inner.publish(events).await;
            let now = Instant::now();
            self.phases.publish_calls.fetch_add(1, Ordering::Relaxed);
            self.phases
                .publish_events
                .fetch_add(events.len() as u64, Ordering::Relaxed);
            add(&self.phases.publish_nanos, now - started);
            let failed = results.iter().filter(|result| result.is_err()).count() as u64;
            if failed > 0 {
                self.failures.fetch_add(failed, Ordering::Relaxed);
                if let Some(Err(failure)) = results.iter().find(|result| result.is_err()) {
                    eprintln!("    ! {failed} event(s) of a batch failed, e.g.: {failure}");
                }
            }
            if let Some(acks) = &self.acks {
                let mut acks = acks.lock().unwrap();
                for (event, result) in events.iter().zip(&results) {
                    if result.is_ok() {
                        acks.entry(event.event_id).or_insert(now);
                    }
                }
            }
            results
        })
    }

    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }
}
