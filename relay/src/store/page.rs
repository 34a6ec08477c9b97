//! What the operators' page (`/ui`) reads of the store, beyond
//! [`OperatorStore::status`](super::OperatorStore::status): per-topic
//! counts with the events in flight, the live relays with their leases,
//! dead events under the page's filters, one event in any state, and how
//! many events were published lately. The statements are the
//! `page_*.sql` files of each backend's folder.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::DeadEvent;
use super::rows::{StoreRow, dead_from_row, parse_headers};

/// The counts of one topic on the operators' page. `pending` counts every
/// event neither published nor dead; `retrying` and `in_flight` are parts
/// of it (see `page_topics.sql`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageTopic {
    /// Kafka topic, exchange, stream or subject.
    pub topic: String,
    /// Events neither published nor dead.
    pub pending: i64,
    /// Pending events due now in a partition held by a live lease.
    pub in_flight: i64,
    /// Pending events that failed at least once.
    pub retrying: i64,
    /// Dead events.
    pub dead: i64,
    /// Published events not yet removed by retention.
    pub published: i64,
}

/// One live lease of a relay on the operators' page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageLease {
    /// Partition number (-1: the logical stream's lease).
    pub partition: i64,
    /// The fencing token of the current acquisition.
    pub lease_token: i64,
    /// When the lease runs out unless renewed.
    pub lease_expires_at: DateTime<Utc>,
}

/// A live relay instance and the leases it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRelay {
    /// Its `instance_id`.
    pub relay_id: String,
    /// When its heartbeat runs out unless renewed.
    pub expires_at: DateTime<Utc>,
    /// Its live leases, by partition number.
    pub partitions: Vec<PageLease>,
}

/// The filters of the page's dead events; `None` filters nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadFilter {
    /// Only this topic.
    pub topic: Option<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this aggregate: its type and id.
    pub aggregate: Option<(String, String)>,
    /// Only events whose last error contains this text.
    pub error: Option<String>,
    /// Only events created at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only events created before this time.
    pub until: Option<DateTime<Utc>>,
}

/// A dead event read for the page: what `outbox-relay dead list` shows,
/// with its creation time and the start of its payload.
#[derive(Debug, Clone, PartialEq)]
pub struct PageDeadEvent {
    /// The event as `dead list` shows it.
    pub event: DeadEvent,
    /// When the producer wrote it.
    pub created_at: DateTime<Utc>,
    /// The payload's first 200 characters.
    pub payload_preview: String,
}

/// One event in any state, for the page's detail panel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageEvent {
    /// `outbox_events.id`.
    pub id: i64,
    /// CloudEvents id.
    pub event_id: String,
    /// CloudEvents type.
    pub event_type: String,
    /// Version of the event's schema.
    pub event_version: i32,
    /// CloudEvents source.
    pub source: String,
    /// Aggregate kind.
    pub aggregate_type: String,
    /// Aggregate id.
    pub aggregate_id: String,
    /// Destination.
    pub topic: String,
    /// The payload, JSON text.
    pub payload: String,
    /// The headers.
    pub headers: BTreeMap<String, String>,
    /// `pending`, `published` or `dead`.
    pub state: String,
    /// Failed attempts.
    pub attempts: i32,
    /// The last error.
    pub last_error: Option<String>,
    /// When the producer wrote it.
    pub created_at: DateTime<Utc>,
    /// When the broker acknowledged it.
    pub published_at: Option<DateTime<Utc>>,
    /// Its next attempt after a failure.
    pub next_attempt_at: Option<DateTime<Utc>>,
}

pub(crate) fn page_topic_from_row<R: StoreRow>(row: &R) -> Result<PageTopic, sqlx::Error> {
    Ok(PageTopic {
        topic: row.text("topic")?,
        pending: row.bigint("pending")?,
        in_flight: row.bigint("in_flight")?,
        retrying: row.bigint("retrying")?,
        dead: row.bigint("dead")?,
        published: row.bigint("published")?,
    })
}

/// The relays of `page_relays.sql`'s rows: one row per lease, in relay
/// order.
pub(crate) fn page_relays_from_rows<R: StoreRow>(
    rows: &[R],
) -> Result<Vec<PageRelay>, sqlx::Error> {
    let mut relays: Vec<PageRelay> = Vec::new();
    for row in rows {
        let relay_id = row.text("relay_id")?;
        if relays.last().is_none_or(|last| last.relay_id != relay_id) {
            relays.push(PageRelay {
                relay_id,
                expires_at: row.time("expires_at")?,
                partitions: Vec::new(),
            });
        }
        let partition = row.optional_bigint("partition_no")?;
        let lease_token = row.optional_bigint("lease_token")?;
        let lease_expires_at = row.optional_time("lease_expires_at")?;
        if let (Some(partition), Some(lease_token), Some(lease_expires_at), Some(relay)) =
            (partition, lease_token, lease_expires_at, relays.last_mut())
        {
            relay.partitions.push(PageLease {
                partition,
                lease_token,
                lease_expires_at,
            });
        }
    }
    Ok(relays)
}

pub(crate) fn page_dead_from_row<R: StoreRow>(row: &R) -> Result<PageDeadEvent, sqlx::Error> {
    Ok(PageDeadEvent {
        event: dead_from_row(row)?,
        created_at: row.time("created_at")?,
        payload_preview: row.text("payload_preview")?,
    })
}

pub(crate) fn page_event_from_row<R: StoreRow>(row: &R) -> Result<PageEvent, sqlx::Error> {
    let event_id = row.text("event_id")?;
    let headers = parse_headers(&event_id, &row.text("headers")?);
    Ok(PageEvent {
        id: row.bigint("id")?,
        event_type: row.text("event_type")?,
        event_version: row.int("event_version")?,
        source: row.text("source")?,
        aggregate_type: row.text("aggregate_type")?,
        aggregate_id: row.text("aggregate_id")?,
        topic: row.text("topic")?,
        payload: row.text("payload")?,
        headers,
        state: row.text("state")?,
        attempts: row.int("attempts")?,
        last_error: row.optional_text("last_error")?,
        created_at: row.time("created_at")?,
        published_at: row.optional_time("published_at")?,
        next_attempt_at: row.optional_time("next_attempt_at")?,
        event_id,
    })
}
