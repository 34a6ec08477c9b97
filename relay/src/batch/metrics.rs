//! [`RelayMetrics`]: the relay's Prometheus metrics.
//!
//! Counters and histograms are updated by the batch loop as events are
//! acknowledged, rejected or dead-lettered. The gauges describing the
//! table (pending events, the oldest one's age, dead events) are refreshed
//! from the database when `/metrics` is scraped, so they hold for the whole
//! table, whichever relay instance is asked. Under the logical source they
//! count only events not yet published (see
//! [`BacklogSource`](crate::operator::BacklogSource)): its streamed rows stay
//! `pending` once published.

use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

use crate::error::Error;
use crate::store::OutboxBacklog;

/// Buckets of the batch publish histogram, in seconds.
const BATCH_PUBLISH_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Buckets of the commit-to-ack histogram, in seconds: every half
/// millisecond up to 5 ms (a relay woken by NOTIFY, or reading the WAL), so
/// that a p50 or p99 near the 5 ms target reads to about 0.5 ms; then 7.5,
/// 10, 15, 20, 25, 30 and 50 ms; then coarser up to ten minutes (events
/// waiting out retries). Every bound of the former, coarser buckets is kept.
const COMMIT_TO_ACK_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.0035, 0.004, 0.0045, 0.005, 0.0075, 0.01, 0.015,
    0.02, 0.025, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];

/// The relay's metrics, all prefixed `outbox_relay_`.
///
/// | metric | kind | meaning |
/// |---|---|---|
/// | `events_published_total{topic}` | counter | events the broker acknowledged |
/// | `events_failed_total{topic}` | counter | failed publish attempts: rejections and broker unavailability |
/// | `events_retried_total{topic}` | counter | rejections recorded with a retry scheduled |
/// | `events_dead_lettered_total{topic}` | counter | events moved to dead on their last attempt |
/// | `stale_marks_total` | counter | acknowledged events whose lease was lost before they were marked (they are published again) |
/// | `events_published_out_of_order_total{topic}` | counter | events the broker acknowledged although an earlier event of their aggregate, in flight with them, failed (see `docs/guarantees.md`) |
/// | `batch_publish_seconds` | histogram | one batch, from its first send until the relay lands its last acknowledgement (it may wait in flight behind earlier batches) |
/// | `commit_to_ack_seconds` | histogram | from an event's commit to its acknowledgement: the commit record's time on the logical source, `created_at` (the transaction's start) when polling |
/// | `pending_events` | gauge | events waiting to be published (refreshed on scrape): pending rows; `--source logical`: the table path's unpublished events and this instance's unsettled streamed ones |
/// | `oldest_pending_age_seconds` | gauge | age of the oldest of those events, 0 when none (refreshed on scrape) |
/// | `dead_events` | gauge | dead events in the table (refreshed on scrape) |
/// | `leases_held` | gauge | partitions this instance holds a lease on |
/// | `ready` | gauge | 1 when this instance is ready (the database answers, the broker client is connected, publishes have not failed past `handover_after`), else 0 (refreshed on scrape and on each `/readyz`) |
/// | `slot_lag_bytes` | gauge | `--source logical`: WAL written after the slot's confirmed position |
/// | `slot_retained_wal_bytes` | gauge | `--source logical`: WAL the slot keeps on disk |
/// | `slot_confirmed_lsn` | gauge | `--source logical`: the slot's confirmed position, as a byte offset |
/// | `stream_unsettled_events` | gauge | `--source logical`: events this instance streamed and has not settled |
/// | `slot_backlog_events` | gauge | `--source logical`: events committed before the slot existed and not published yet (handed to the table path or still to hand over) |
/// | `broker_client_rebuilds_total` | counter | broker clients rebuilt because their state was broken (fatal or fenced Kafka producer, RabbitMQ connection closed or stuck) (refreshed on scrape) |
///
/// ```
/// use outbox_relay::RelayMetrics;
///
/// let metrics = RelayMetrics::new();
/// metrics.record_published("orders", 3);
/// let text = metrics.encode().expect("text format");
/// assert!(text.contains("outbox_relay_events_published_total{topic=\"orders\"} 3"));
/// ```
#[derive(Clone)]
pub struct RelayMetrics {
    registry: Registry,
    published: IntCounterVec,
    failed: IntCounterVec,
    retried: IntCounterVec,
    dead_lettered: IntCounterVec,
    stale_marks: IntCounter,
    out_of_order: IntCounterVec,
    batch_publish: Histogram,
    commit_to_ack: Histogram,
    pending: IntGauge,
    oldest_pending_age: Gauge,
    dead: IntGauge,
    leases_held: IntGauge,
    ready: IntGauge,
    client_rebuilds: IntCounter,
    #[cfg_attr(not(feature = "logical"), allow(dead_code))]
    slot_lag: IntGauge,
    #[cfg_attr(not(feature = "logical"), allow(dead_code))]
    slot_retained_wal: IntGauge,
    #[cfg_attr(not(feature = "logical"), allow(dead_code))]
    slot_confirmed: IntGauge,
    slot_backlog: IntGauge,
    #[cfg_attr(not(feature = "logical"), allow(dead_code))]
    stream_unsettled: IntGauge,
}

impl std::fmt::Debug for RelayMetrics {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RelayMetrics")
            .finish_non_exhaustive()
    }
}

impl Default for RelayMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl RelayMetrics {
    /// A fresh set of metrics in its own registry.
    pub fn new() -> Self {
        // Registration fails only for an invalid or repeated metric name,
        // and these names are fixed: a failure is a bug in this file.
        Self::register().expect("the relay's metric names are valid and unique")
    }

    fn register() -> Result<Self, Error> {
        let registry = Registry::new_custom(Some("outbox_relay".to_owned()), None)?;
        let by_topic = |name: &str, help: &str| {
            added(
                &registry,
                IntCounterVec::new(Opts::new(name, help), &["topic"])?,
            )
        };
        let counter = |name: &str, help: &str| added(&registry, IntCounter::new(name, help)?);
        let gauge = |name: &str, help: &str| added(&registry, IntGauge::new(name, help)?);
        let histogram = |name: &str, help: &str, buckets: &[f64]| {
            let options = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            added(&registry, Histogram::with_opts(options)?)
        };
        let published = by_topic(
            "events_published_total",
            "Events the broker acknowledged, by topic.",
        )?;
        let failed = by_topic(
            "events_failed_total",
            "Failed publish attempts (broker rejections and unavailability), by topic.",
        )?;
        let retried = by_topic(
            "events_retried_total",
            "Rejected events recorded with a retry scheduled, by topic.",
        )?;
        let dead_lettered = by_topic(
            "events_dead_lettered_total",
            "Events moved to dead on their last attempt, by topic.",
        )?;
        let stale_marks = counter(
            "stale_marks_total",
            "Acknowledged events not marked published because their lease was lost; they are published again.",
        )?;
        let out_of_order = by_topic(
            "events_published_out_of_order_total",
            "Events acknowledged although an earlier event of their aggregate, sent in the same batch, failed; by topic.",
        )?;
        let batch_publish = histogram(
            "batch_publish_seconds",
            "Time to publish one batch, from its first send to its last acknowledgement.",
            BATCH_PUBLISH_BUCKETS,
        )?;
        let commit_to_ack = histogram(
            "commit_to_ack_seconds",
            "Time from an event's commit (logical source) or created_at (polling) to the broker's acknowledgement.",
            COMMIT_TO_ACK_BUCKETS,
        )?;
        let pending = gauge(
            "pending_events",
            "Events waiting to be published (logical source: not yet published by the stream or the table path).",
        )?;
        let oldest_pending_age = added(
            &registry,
            Gauge::new(
                "oldest_pending_age_seconds",
                "Age of the oldest event waiting to be published; 0 when there is none.",
            )?,
        )?;
        let dead = gauge("dead_events", "Dead events in the outbox table.")?;
        let leases_held = gauge(
            "leases_held",
            "Partitions this relay instance holds a lease on.",
        )?;
        let ready = gauge(
            "ready",
            "1 when this relay instance is ready (what /readyz answers 200 for), else 0.",
        )?;
        let client_rebuilds = counter(
            "broker_client_rebuilds_total",
            "Broker clients rebuilt because their state was broken: a fatal or fenced Kafka producer, a RabbitMQ connection closed by the broker or stuck.",
        )?;
        let slot_lag = gauge(
            "slot_lag_bytes",
            "Logical source: WAL written after the slot's confirmed position, in bytes.",
        )?;
        let slot_retained_wal = gauge(
            "slot_retained_wal_bytes",
            "Logical source: WAL the replication slot keeps on disk, in bytes.",
        )?;
        let slot_confirmed = gauge(
            "slot_confirmed_lsn",
            "Logical source: the slot's confirmed flush position, as a byte offset.",
        )?;
        let stream_unsettled = gauge(
            "stream_unsettled_events",
            "Logical source: streamed events neither acknowledged nor recorded as failed.",
        )?;
        let slot_backlog = gauge(
            "slot_backlog_events",
            "Logical source: events committed before the replication slot existed and not published yet.",
        )?;
        Ok(RelayMetrics {
            slot_backlog,
            registry,
            published,
            failed,
            retried,
            dead_lettered,
            stale_marks,
            out_of_order,
            batch_publish,
            commit_to_ack,
            pending,
            oldest_pending_age,
            dead,
            leases_held,
            ready,
            client_rebuilds,
            slot_lag,
            slot_retained_wal,
            slot_confirmed,
            stream_unsettled,
        })
    }

    /// `count` events of `topic` acknowledged by the broker.
    pub fn record_published(&self, topic: &str, count: u64) {
        self.published.with_label_values(&[topic]).inc_by(count);
    }

    /// One event's commit-to-ack latency: from its transaction's commit
    /// (or, where that is not known, its `created_at`) to the broker's
    /// acknowledgement.
    pub fn observe_commit_to_ack(
        &self,
        committed_at: DateTime<Utc>,
        acknowledged_at: DateTime<Utc>,
    ) {
        let seconds = (acknowledged_at - committed_at)
            .to_std()
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        self.commit_to_ack.observe(seconds);
    }

    /// A failed publish attempt of an event of `topic`.
    pub fn record_failed(&self, topic: &str) {
        self.failed.with_label_values(&[topic]).inc();
    }

    /// A rejected event of `topic` recorded with a retry scheduled.
    pub fn record_retried(&self, topic: &str) {
        self.retried.with_label_values(&[topic]).inc();
    }

    /// An event of `topic` moved to dead.
    pub fn record_dead_lettered(&self, topic: &str) {
        self.dead_lettered.with_label_values(&[topic]).inc();
    }

    /// `count` acknowledged events left unmarked by a lost lease.
    pub fn record_stale_marks(&self, count: u64) {
        self.stale_marks.inc_by(count);
    }

    /// An event of `topic` acknowledged past an earlier event of its
    /// aggregate that failed in the same batch.
    pub fn record_published_out_of_order(&self, topic: &str) {
        self.out_of_order.with_label_values(&[topic]).inc();
    }

    /// How long one batch took to publish.
    pub fn observe_batch_publish(&self, elapsed: Duration) {
        self.batch_publish.observe(elapsed.as_secs_f64());
    }

    /// Partitions this instance holds now.
    pub fn set_leases_held(&self, partitions: usize) {
        self.leases_held
            .set(i64::try_from(partitions).unwrap_or(i64::MAX));
    }

    /// Whether this instance is ready, as `/readyz` decides it.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// Bring the client rebuild counter up to `total`, the publisher's own
    /// count (it never goes down).
    pub fn set_client_rebuilds(&self, total: u64) {
        let recorded = self.client_rebuilds.get();
        if total > recorded {
            self.client_rebuilds.inc_by(total - recorded);
        }
    }

    /// Refresh the table gauges from a backlog read at `now`.
    pub fn set_backlog(&self, backlog: &OutboxBacklog, now: DateTime<Utc>) {
        self.pending.set(backlog.pending);
        self.dead.set(backlog.dead);
        let age = backlog
            .oldest_pending_at
            .and_then(|oldest| (now - oldest).to_std().ok())
            .unwrap_or(Duration::ZERO);
        self.oldest_pending_age.set(age.as_secs_f64());
    }

    /// Refresh the gauge of the slot's backlog still to publish.
    pub fn set_slot_backlog(&self, events: i64) {
        self.slot_backlog.set(events);
    }

    /// Refresh the gauges of the logical source's slot and stream.
    #[cfg(feature = "logical")]
    pub fn set_slot(&self, slot: &crate::source::logical::SlotStatus, unsettled_events: usize) {
        self.slot_lag.set(slot.lag_bytes);
        self.slot_retained_wal.set(slot.retained_wal_bytes);
        self.slot_confirmed
            .set(i64::try_from(slot.confirmed_position).unwrap_or(i64::MAX));
        self.stream_unsettled
            .set(i64::try_from(unsettled_events).unwrap_or(i64::MAX));
    }

    /// Every metric in the Prometheus text exposition format (0.0.4).
    ///
    /// # Errors
    /// [`Error::Metrics`] when encoding fails (a bug).
    pub fn encode(&self) -> Result<String, Error> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        String::from_utf8(buffer)
            .map_err(|error| Error::Metrics(format!("metrics text is not UTF-8: {error}")))
    }
}

/// The content type of [`RelayMetrics::encode`]'s output.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `metric`, registered in `registry`.
fn added<M: Collector + Clone + 'static>(registry: &Registry, metric: M) -> Result<M, Error> {
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

#[cfg(test)]
mod tests {
    use super::RelayMetrics;

    #[test]
    fn ready_gauge_follows_the_last_readiness_decision() {
        let metrics = RelayMetrics::new();
        let text = metrics.encode().expect("text format");
        assert!(text.contains("\noutbox_relay_ready 0\n"), "{text}");
        metrics.set_ready(true);
        let text = metrics.encode().expect("text format");
        assert!(text.contains("\noutbox_relay_ready 1\n"), "{text}");
        metrics.set_ready(false);
        let text = metrics.encode().expect("text format");
        assert!(text.contains("\noutbox_relay_ready 0\n"), "{text}");
    }
}
