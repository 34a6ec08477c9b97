//! Events to enqueue, and the checks every delivery test makes.

use std::collections::{HashMap, HashSet};

use outbox_testkit::Received;
use serde::Serialize;

/// The payload of the events the end-to-end tests publish; the topic is
/// chosen per test, so events are enqueued as `OutboxMessage`s.
#[derive(Serialize, Clone)]
pub struct ShipmentMoved {
    pub shipment: String,
    pub sequence: u64,
}

/// Enqueue `count` events spread round-robin over `aggregates` aggregates
/// on `topic`, in transactions of `per_transaction`. Returns the event ids
/// in enqueue (id) order.
pub async fn enqueue_events<DB: outbox::Backend>(
    pool: &sqlx::Pool<DB>,
    topic: &str,
    count: u64,
    aggregates: u64,
    per_transaction: u64,
) -> Vec<uuid::Uuid> {
    let mut event_ids = Vec::with_capacity(count as usize);
    let mut sequence = 0;
    while sequence < count {
        let mut messages = Vec::new();
        for _ in 0..per_transaction.min(count - sequence) {
            let event = ShipmentMoved {
                shipment: format!("s-{}", sequence % aggregates),
                sequence,
            };
            let message = outbox::OutboxMessage::new(
                "shipment.moved",
                "/shipments",
                "shipment",
                event.shipment.clone(),
                topic,
                serde_json::value::to_raw_value(&event).expect("payload"),
            );
            messages.push(message);
            sequence += 1;
        }
        let mut tx = pool.begin().await.expect("begin");
        let ids = outbox::OutboxWriter::new()
            .enqueue_messages(&mut tx, messages)
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
        event_ids.extend(ids);
    }
    event_ids
}

/// Check that every enqueued event arrived and that each aggregate's first
/// occurrences arrived in enqueue order. Returns the number of duplicates.
pub fn check_delivery(enqueued: &[uuid::Uuid], received: &[Received]) -> usize {
    let position: HashMap<String, usize> = enqueued
        .iter()
        .enumerate()
        .map(|(index, id)| (id.to_string(), index))
        .collect();
    let mut seen = HashSet::new();
    let mut last_first_position: HashMap<String, usize> = HashMap::new();
    let mut duplicates = 0;
    for message in received {
        let Some(&index) = position.get(&message.ce_id) else {
            panic!(
                "received an event that was never enqueued: {}",
                message.ce_id
            );
        };
        if !seen.insert(message.ce_id.clone()) {
            duplicates += 1;
            continue;
        }
        if let Some(&previous) = last_first_position.get(&message.aggregate_id) {
            assert!(
                previous < index,
                "aggregate {} published out of order: event #{index} first arrived after #{previous}",
                message.aggregate_id
            );
        }
        last_first_position.insert(message.aggregate_id.clone(), index);
    }
    let missing: Vec<_> = enqueued
        .iter()
        .filter(|id| !seen.contains(&id.to_string()))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} events never arrived, e.g. {missing:?}",
        enqueued.len() - seen.len(),
        enqueued.len()
    );
    duplicates
}
