//! Raw producer rates: the broker clients alone (`support::raw`), and the
//! relay's publisher called directly.

use std::time::Instant;

use outbox_relay::OutboundEvent;
use outbox_relay::publish::Publisher;

use crate::events::{aggregate_id, outbound, payload};
use crate::support::cpu;
use crate::support::raw::{self, RawRecord};
use crate::targets::warm_up;
use crate::{AMQP_WINDOW, KAFKA_PROCESSES, PUBLISHER_CHUNK, RABBITMQ_PROCESSES, Settings};

/// The records of a raw run: the drain's keys and payloads.
fn records(settings: &Settings) -> Vec<RawRecord> {
    (0..settings.events)
        .map(|sequence| RawRecord {
            key: aggregate_id(sequence, settings.aggregates),
            payload: payload(sequence, settings.aggregates, settings.payload_bytes),
        })
        .collect()
}

/// Plain rdkafka with the relay's producer settings.
pub(crate) async fn raw_rdkafka(settings: &Settings, topic: &str) -> (f64, u64, cpu::CpuSpent) {
    let measured = raw::raw_rdkafka(
        &settings.kafka_brokers,
        topic,
        &records(settings),
        KAFKA_PROCESSES,
    )
    .await;
    (measured.rate, measured.acknowledged, measured.cpu)
}

/// The relay's own publisher, called directly with big batches.
pub(crate) async fn raw_publisher(
    settings: &Settings,
    publisher: &dyn Publisher,
    topic: &str,
) -> (f64, u64) {
    warm_up(publisher, settings, topic).await;
    let events: Vec<OutboundEvent> = (0..settings.events)
        .map(|sequence| outbound(settings, topic, sequence))
        .collect();
    let started = Instant::now();
    let mut acknowledged = 0u64;
    for chunk in events.chunks(PUBLISHER_CHUNK) {
        let results = publisher.publish(chunk).await;
        for result in results {
            match result {
                Ok(()) => acknowledged += 1,
                Err(failure) => panic!("publisher: {failure}"),
            }
        }
    }
    let elapsed = started.elapsed();
    (acknowledged as f64 / elapsed.as_secs_f64(), acknowledged)
}

/// Plain lapin: publisher confirms, mandatory, persistent, the relay's
/// properties and headers; at most `AMQP_WINDOW` confirms outstanding.
pub(crate) async fn raw_lapin(settings: &Settings, exchange: &str) -> (f64, u64, cpu::CpuSpent) {
    let measured = raw::raw_lapin(
        &settings.amqp_url,
        exchange,
        &records(settings),
        AMQP_WINDOW,
        RABBITMQ_PROCESSES,
    )
    .await;
    (measured.rate, measured.acknowledged, measured.cpu)
}
