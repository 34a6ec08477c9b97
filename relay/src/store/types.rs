//! The values the stores read and write: leases, fetched events, failed
//! attempts and what the operator commands report.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::OutboundEvent;

/// A partition lease held by this instance: the partition and the fencing
/// token it was acquired with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Lease {
    /// Partition number, `0..partition count`.
    pub partition_no: i32,
    /// Fencing token: bumped on every acquisition of the partition.
    pub lease_token: i64,
}

/// An event fetched for publishing, with the partition it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedEvent {
    /// `partition_key % partition count`.
    pub partition_no: i32,
    /// The event itself.
    pub event: OutboundEvent,
    /// When its transaction committed, where the source knows it: the
    /// logical source reads it from the WAL's commit record. The commit →
    /// acknowledgement histogram measures from it, else from `created_at`
    /// (the transaction's start).
    pub committed_at: Option<DateTime<Utc>>,
}

impl ClaimedEvent {
    /// The bytes of its payload: what `max_batch_bytes` counts.
    pub fn payload_bytes(&self) -> usize {
        self.event.payload.len()
    }
}

#[cfg(test)]
impl ClaimedEvent {
    /// Event `id` of aggregate `order/aggregate_id`, to `topic`, for tests.
    pub(crate) fn for_test(id: i64, aggregate_id: &str, topic: &str) -> ClaimedEvent {
        ClaimedEvent {
            partition_no: 0,
            event: OutboundEvent {
                id,
                event_id: uuid::Uuid::now_v7(),
                event_type: "t".to_owned(),
                event_version: 1,
                source: "/s".to_owned(),
                aggregate_type: "order".to_owned(),
                aggregate_id: aggregate_id.to_owned(),
                topic: topic.to_owned(),
                payload: "{}".into(),
                headers: Default::default(),
                created_at: chrono::Utc::now(),
                attempts: 0,
                replay: false,
            },
            committed_at: None,
        }
    }
}

/// How much one fetch may return: at most `events` events, whose payloads
/// add up to at most `bytes`, except that a fetch returns its first event
/// whatever the size of its payload (so an event larger than the cap goes
/// out alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchLimit {
    /// Most events.
    pub events: i64,
    /// Most payload bytes in all (the first event comes whatever its size).
    pub bytes: i64,
}

impl FetchLimit {
    /// At most `events` events, whatever their size.
    pub fn events(events: i64) -> Self {
        FetchLimit {
            events,
            bytes: i64::MAX,
        }
    }

    /// At most `events` events and `bytes` payload bytes.
    pub fn new(events: i64, bytes: i64) -> Self {
        FetchLimit { events, bytes }
    }
}

/// A failed publish attempt to record.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedAttempt {
    /// `outbox_events.id`.
    pub id: i64,
    /// Partition of the event, to find the lease that fences the write.
    pub partition_no: i32,
    /// The broker's error, stored in `last_error`.
    pub error: String,
    /// When to try again; `None` moves the event to the dead state.
    pub retry_in: Option<Duration>,
}

/// What `outbox-relay status` reports; `status --json` prints it with these
/// field names, which are stable.
///
/// Every time is UTC and every comparison with "now" uses the database's
/// clock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxStatus {
    /// Events waiting to be published (including those waiting to retry).
    pub pending: i64,
    /// Pending events that failed at least once (waiting for their retry
    /// time, or due again).
    pub retrying: i64,
    /// Pending events that are due now (not waiting for a retry) in a
    /// partition held by a live lease: what the relays are publishing now or
    /// will fetch next. Events held back behind a failed event of their
    /// aggregate are counted too. Due events outside this count wait for a
    /// relay to lease their partition.
    pub in_flight: i64,
    /// Events that exhausted their attempts.
    pub dead: i64,
    /// Published events not yet removed by retention.
    pub published: i64,
    /// Creation time of the oldest pending event.
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// Age of the oldest pending event in whole seconds.
    pub oldest_pending_age_seconds: Option<i64>,
    /// Partitions with a live lease.
    pub leased_partitions: i64,
    /// Partitions in all.
    pub partitions: i64,
    /// Relay instances with a live heartbeat.
    pub live_relays: i64,
    /// Counts per topic, by topic name; topics without rows are absent.
    pub topics: Vec<TopicStatus>,
    /// The live partition leases, by partition number.
    pub leases: Vec<LiveLease>,
}

/// The counts of one topic in [`OutboxStatus::topics`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopicStatus {
    /// Kafka topic or RabbitMQ exchange.
    pub topic: String,
    /// Pending events, those waiting to retry included.
    pub pending: i64,
    /// Pending events that failed at least once.
    pub retrying: i64,
    /// Dead events.
    pub dead: i64,
    /// Published events not yet removed by retention.
    pub published: i64,
}

/// The table gauges of the relay's `/metrics`, read on every scrape by
/// [`OperatorStore::backlog`](super::OperatorStore::backlog): cheap statements only, whatever the size of the
/// table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxBacklog {
    /// Events waiting to be published (including those waiting to retry).
    pub pending: i64,
    /// Dead events.
    pub dead: i64,
    /// Creation time of the pending event with the lowest id.
    pub oldest_pending_at: Option<DateTime<Utc>>,
}

/// A live partition lease in [`OutboxStatus::leases`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveLease {
    /// Partition number.
    pub partition_no: i32,
    /// The relay instance holding it (its `instance_id`).
    pub owner: String,
    /// Fencing token of the current acquisition.
    pub lease_token: i64,
    /// When the lease runs out unless renewed.
    pub expires_at: DateTime<Utc>,
}

/// The published events `outbox-relay replay` re-publishes: those of one
/// topic created in `[since, until)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    /// Topic (or exchange) of the events.
    pub topic: String,
    /// Created at or after this time.
    pub since: DateTime<Utc>,
    /// Created before this time.
    pub until: DateTime<Utc>,
}

/// A dead event, for `outbox-relay dead list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadEvent {
    /// `outbox_events.id`.
    pub id: i64,
    /// CloudEvents id.
    pub event_id: String,
    /// CloudEvents type.
    pub event_type: String,
    /// Aggregate kind.
    pub aggregate_type: String,
    /// Aggregate id.
    pub aggregate_id: String,
    /// Destination topic or exchange.
    pub topic: String,
    /// Failed attempts.
    pub attempts: i32,
    /// The last error.
    pub last_error: Option<String>,
}

/// Which dead events an operator command applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadSelector {
    /// One event, by its CloudEvents id.
    EventId(String),
    /// Every dead event of one aggregate.
    Aggregate {
        /// Aggregate kind.
        aggregate_type: String,
        /// Aggregate id.
        aggregate_id: String,
    },
    /// Every dead event.
    All,
}
