//! The events the bench enqueues and publishes, and their CloudEvents
//! attributes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use outbox_relay::OutboundEvent;
use uuid::Uuid;

use crate::{AGGREGATE_TYPE, ENQUEUE_CHUNK, EVENT_TYPE, SOURCE, Settings};

/// A database, topic or exchange name of the bench's own.
pub(crate) fn unique_name(prefix: &str) -> String {
    format!("outbox-bench-{prefix}-{}", Uuid::now_v7().simple())
}

/// The JSON payload of event `sequence`, padded to `bytes`.
pub(crate) fn payload(sequence: u64, aggregates: u64, bytes: usize) -> String {
    let shipment = format!("s-{}", sequence % aggregates);
    let bare = serde_json::json!({ "shipment": shipment, "sequence": sequence, "note": "" });
    let pad = bytes.saturating_sub(bare.to_string().len());
    serde_json::json!({ "shipment": shipment, "sequence": sequence, "note": "x".repeat(pad) })
        .to_string()
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
        payload: payload(sequence, settings.aggregates, settings.payload_bytes),
        headers: BTreeMap::new(),
        created_at: chrono::Utc::now(),
        attempts: 0,
        replay: false,
    }
}

/// The CloudEvents attributes the relay sends (binary mode), for the raw
/// clients, so that their records are as large as the relay's.
pub(crate) fn attributes(event_id: &Uuid, aggregate_id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("specversion", "1.0".to_owned()),
        ("id", event_id.to_string()),
        ("source", SOURCE.to_owned()),
        ("type", EVENT_TYPE.to_owned()),
        (
            "time",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        ),
        ("aggregatetype", AGGREGATE_TYPE.to_owned()),
        ("eventversion", "1".to_owned()),
        ("partitionkey", aggregate_id.to_owned()),
    ]
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
