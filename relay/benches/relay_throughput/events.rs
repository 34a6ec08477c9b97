//! The events the bench enqueues and publishes, and their CloudEvents
//! attributes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use outbox_relay::OutboundEvent;
use uuid::Uuid;

use crate::support::events::{self, AGGREGATE_TYPE, EVENT_TYPE, SOURCE};
use crate::{ENQUEUE_CHUNK, Settings};

/// The JSON payload of event `sequence`, padded to `bytes`.
pub(crate) fn payload(sequence: u64, aggregates: u64, bytes: usize) -> String {
    events::payload(&aggregate_id(sequence, aggregates), sequence, bytes)
}

pub(crate) fn aggregate_id(sequence: u64, aggregates: u64) -> String {
    format!("s-{}", sequence % aggregates)
}

pub(crate) fn message(settings: &Settings, topic: &str, sequence: u64) -> outbox::OutboxMessage {
    let raw = serde_json::value::RawValue::from_string(payload(
        sequence,
        settings.aggregates,
        settings.payload_bytes,
    ))
    .expect("payload is JSON");
    outbox::OutboxMessage::new(
        EVENT_TYPE,
        SOURCE,
        AGGREGATE_TYPE,
        aggregate_id(sequence, settings.aggregates),
        topic,
        raw,
    )
}

/// An event as the relay would have fetched it, for timing a publisher
/// directly.
pub(crate) fn outbound(settings: &Settings, topic: &str, sequence: u64) -> OutboundEvent {
    OutboundEvent {
        id: sequence as i64 + 1,
        event_id: Uuid::now_v7(),
        event_type: EVENT_TYPE.to_owned(),
        event_version: 1,
        source: SOURCE.to_owned(),
        aggregate_type: AGGREGATE_TYPE.to_owned(),
        aggregate_id: aggregate_id(sequence, settings.aggregates),
        topic: topic.to_owned(),
        payload: payload(sequence, settings.aggregates, settings.payload_bytes).into(),
        headers: BTreeMap::new(),
        created_at: chrono::Utc::now(),
        attempts: 0,
        replay: false,
    }
}

/// Fill a fresh database with `settings.events` pending events.
pub(crate) async fn enqueue_all(settings: &Settings, pool: &sqlx::PgPool, topic: &str) -> Duration {
    let started = Instant::now();
    let mut sequence = 0;
    while sequence < settings.events {
        let end = (sequence + ENQUEUE_CHUNK).min(settings.events);
        let messages: Vec<_> = (sequence..end)
            .map(|sequence| message(settings, topic, sequence))
            .collect();
        let mut tx = pool.begin().await.expect("begin");
        outbox::OutboxWriter::new()
            .enqueue_messages(&mut tx, messages)
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
        sequence = end;
    }
    sqlx::query("ANALYZE outbox_events")
        .execute(pool)
        .await
        .expect("analyze");
    started.elapsed()
}
