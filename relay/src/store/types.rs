//! The values the operator reads of the store: status, backlog, live
//! leases, replay windows and dead events.

use chrono::{DateTime, Utc};
use serde::Serialize;

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
