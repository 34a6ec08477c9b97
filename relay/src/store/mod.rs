//! The relay's database side: [`OutboxStore`] and one implementation per
//! backend, each with its SQL in `store/sql/<backend>/`.
//!
//! Every write the relay makes for a partition is fenced: it names the
//! partition's lease token as acquired, and matches nothing once another
//! instance has taken the partition over (or the lease has expired).

mod mysql;
mod returning;

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::Serialize;

pub use mysql::MySqlStore;
pub use returning::{PostgresStore, SqliteStore};

use crate::{Error, OutboundEvent};

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
/// [`OutboxStore::backlog`]: cheap statements only, whatever the size of the
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

/// The statements the relay needs from a database.
///
/// Time is the database's clock (`now()`), never the relay's, so instances
/// on different hosts agree on lease expiry. Durations are passed in.
pub trait OutboxStore: Send + Sync {
    /// Apply the outbox migrations.
    fn migrate(&self) -> BoxFuture<'_, Result<(), Error>>;

    /// How many partitions the table is split into (rows of
    /// `outbox_partitions`).
    fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>>;

    /// Record that `relay_id` is alive for `ttl`, forget relays dead for a
    /// while, and return the number of live relays (this one included).
    fn heartbeat<'a>(
        &'a self,
        relay_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<i64, Error>>;

    /// Forget `relay_id` (on shutdown).
    fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>>;

    /// Extend `leases` by `ttl` where they are still held; returns the leases
    /// that were extended. A lease missing from the result is lost.
    fn renew_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<Lease>, Error>>;

    /// Take up to `limit` partitions whose lease is free or expired, bumping
    /// their tokens; returns the new leases. Concurrent callers never take
    /// the same partition.
    fn acquire_leases<'a>(
        &'a self,
        relay_id: &'a str,
        limit: i64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<Lease>, Error>>;

    /// Give up `leases` (still fenced: a lease already lost is untouched).
    fn release_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
    ) -> BoxFuture<'a, Result<u64, Error>>;

    /// Pending events of `partitions` that are due, in id order, at most
    /// `limit`, leaving out the ids in `exclude` (published, not yet
    /// marked). An event is also left out while an earlier event of its
    /// aggregate waits for a retry, or is dead and `hold_dead` is set.
    fn fetch_pending<'a>(
        &'a self,
        partition_count: i32,
        partitions: &'a [i32],
        exclude: &'a [i64],
        hold_dead: bool,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>>;

    /// Mark `ids` published, only where the lease of the row's partition is
    /// one of `leases`, held by `relay_id` and unexpired. Returns the rows
    /// marked; fewer than `ids.len()` means a lease was lost.
    fn mark_published<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<u64, Error>>;

    /// Record failed attempts, fenced like [`OutboxStore::mark_published`].
    /// Returns the rows updated.
    fn record_failures<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        failures: &'a [FailedAttempt],
    ) -> BoxFuture<'a, Result<u64, Error>>;

    /// Delete at most `limit` published events published more than
    /// `older_than` ago. Pending and dead events are never deleted.
    fn delete_published(
        &self,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, Error>>;

    /// Counts, per-topic counts and live leases for `outbox-relay status`.
    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>>;

    /// Pending and dead counts and the oldest pending event, for the
    /// `/metrics` gauges. Unlike [`OutboxStore::status`] it never counts
    /// published rows.
    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>>;

    /// The database's clock.
    fn database_time(&self) -> BoxFuture<'_, Result<DateTime<Utc>, Error>>;

    /// Whether any event, in any state, has `topic`.
    fn topic_exists<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<bool, Error>>;

    /// Published events in `window` with an id above `after_id`, in id
    /// order, at most `limit`: one page of a replay. Reads only.
    fn fetch_published<'a>(
        &'a self,
        window: &'a ReplayWindow,
        after_id: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>>;

    /// Dead events matching `selector`, in id order, at most `limit`.
    fn list_dead<'a>(
        &'a self,
        selector: &'a DeadSelector,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<DeadEvent>, Error>>;

    /// Make matching dead events pending again with a fresh attempt count.
    fn retry_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>>;

    /// Delete matching dead events.
    fn discard_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>>;
}

/// The three optional filters of the dead-event statements.
pub(crate) fn selector_binds(
    selector: &DeadSelector,
) -> (Option<&str>, Option<&str>, Option<&str>) {
    match selector {
        DeadSelector::EventId(event_id) => (Some(event_id.as_str()), None, None),
        DeadSelector::Aggregate {
            aggregate_type,
            aggregate_id,
        } => (
            None,
            Some(aggregate_type.as_str()),
            Some(aggregate_id.as_str()),
        ),
        DeadSelector::All => (None, None, None),
    }
}

/// JSON array of leases, the form the fenced statements take them in.
pub(crate) fn leases_json(leases: &[Lease]) -> String {
    serde_json::to_string(leases).unwrap_or_else(|_| "[]".to_owned())
}

/// JSON array of integers (ids or partition numbers).
pub(crate) fn integers_json<T: Serialize>(values: &[T]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".to_owned())
}

/// Parse the `headers` column; a malformed value is logged and treated as
/// empty rather than blocking the event.
pub(crate) fn parse_headers(
    event_id: &str,
    text: &str,
) -> std::collections::BTreeMap<String, String> {
    match serde_json::from_str::<std::collections::BTreeMap<String, serde_json::Value>>(text) {
        Ok(map) => map
            .into_iter()
            .map(|(name, value)| match value {
                serde_json::Value::String(text) => (name, text),
                other => (name, other.to_string()),
            })
            .collect(),
        Err(error) => {
            tracing::warn!(event_id, %error, "headers column is not a JSON object; publishing without headers");
            std::collections::BTreeMap::new()
        }
    }
}

/// Seconds as a float, the form the SQL takes durations in.
pub(crate) fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}
