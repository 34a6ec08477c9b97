//! [`OutboundEvent`]: one pending row of `outbox_events`, as the relay publishes it.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A committed event read from `outbox_events`, ready to be published.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundEvent {
    /// Database order (`outbox_events.id`).
    pub id: i64,
    /// CloudEvents `id`; identical on every publication of the event.
    pub event_id: Uuid,
    /// CloudEvents `type`.
    pub event_type: String,
    /// Schema version of the payload.
    pub event_version: i32,
    /// CloudEvents `source`.
    pub source: String,
    /// Kind of business entity.
    pub aggregate_type: String,
    /// Entity id: the ordering key and the Kafka message key.
    pub aggregate_id: String,
    /// Kafka topic or RabbitMQ exchange.
    pub topic: String,
    /// The payload's JSON text, as stored, passed to the broker as it is:
    /// the relay never parses it (only `--broker stdout` embeds it as
    /// JSON). Shared, so that the batch, the event source's buffer and the
    /// publisher hold one copy between them.
    pub payload: Arc<str>,
    /// Extra attributes (the `headers` column), published as CloudEvents
    /// extension attributes.
    pub headers: BTreeMap<String, String>,
    /// CloudEvents `time`: when the event was enqueued.
    pub created_at: DateTime<Utc>,
    /// Failed attempts before this one.
    pub attempts: i32,
    /// Whether this publication re-publishes an event that was already
    /// published (`outbox-relay replay`): it then carries the `outboxreplay`
    /// extension attribute. `false` on the relay's own publications.
    pub replay: bool,
}
