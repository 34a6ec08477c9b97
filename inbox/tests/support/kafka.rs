//! The Kafka side of the inbox tests: messages as the relay writes them
//! (CloudEvents binary mode, `ce_*` headers, key = aggregate id). Topics,
//! the producer and the consumer group's offsets are in
//! `outbox_testkit::kafka`.

use outbox::Event;
use outbox_testkit::kafka::Outgoing;

/// `event` as the relay publishes it, with CloudEvents id `id`.
pub fn cloud_event<E: Event>(event: &E, id: &str) -> Outgoing {
    let payload = event.payload().expect("payload").get().as_bytes().to_vec();
    Outgoing {
        key: event.aggregate_id(),
        headers: vec![
            ("ce_specversion".to_owned(), "1.0".to_owned()),
            ("ce_id".to_owned(), id.to_owned()),
            ("ce_source".to_owned(), E::SOURCE.to_owned()),
            ("ce_type".to_owned(), E::EVENT_TYPE.to_owned()),
            ("ce_time".to_owned(), "2025-01-01T00:00:00Z".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
            ("ce_aggregatetype".to_owned(), E::AGGREGATE_TYPE.to_owned()),
            ("ce_eventversion".to_owned(), E::EVENT_VERSION.to_string()),
            ("ce_partitionkey".to_owned(), event.aggregate_id()),
        ],
        value: payload,
    }
}
