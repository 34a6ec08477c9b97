//! Raw producer rates: the broker clients alone, and the relay's publisher
//! called directly.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use outbox_relay::OutboundEvent;
use outbox_relay::publish::Publisher;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use uuid::Uuid;

use crate::cpu;
use crate::events::{aggregate_id, attributes, outbound, payload};
use crate::targets::warm_up;
use crate::{
    AMQP_WINDOW, EVENT_TYPE, KAFKA_PROCESSES, PUBLISHER_CHUNK, RABBITMQ_PROCESSES, Settings,
};

/// Plain rdkafka: a FutureProducer with the relay's producer settings,
/// every record sent (pipelined), then every delivery report awaited.
pub(crate) async fn raw_rdkafka(settings: &Settings, topic: &str) -> (f64, u64, cpu::CpuSpent) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &settings.kafka_brokers)
        .set("client.id", "outbox-bench-raw")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "30000")
        .set("partitioner", "murmur2_random")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("producer");
    let records: Vec<(String, String, Uuid)> = (0..settings.events)
        .map(|sequence| {
            (
                aggregate_id(sequence, settings.aggregates),
                payload(sequence, settings.aggregates, settings.payload_bytes),
                Uuid::now_v7(),
            )
        })
        .collect();
    let headers = |event_id: &Uuid, key: &str| {
        let mut headers = OwnedHeaders::new_with_capacity(10);
        for (name, value) in attributes(event_id, key) {
            let name = format!("ce_{name}");
            headers = headers.insert(Header {
                key: name.as_str(),
                value: Some(value.as_str()),
            });
        }
        headers.insert(Header {
            key: "content-type",
            value: Some("application/json"),
        })
    };
    // Warm-up: producer id, connection, topic metadata.
    let warm_id = Uuid::now_v7();
    producer
        .send(
            FutureRecord::to(topic)
                .key("warm-up")
                .payload("{}")
                .headers(headers(&warm_id, "warm-up")),
            Duration::from_secs(30),
        )
        .await
        .expect("warm-up record");

    let cpu_before = cpu::sample(KAFKA_PROCESSES);
    let started = Instant::now();
    let mut in_flight: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut delivered = 0u64;
    let mut failed = 0u64;
    let mut settle = |outcome: Result<Result<_, _>, _>| match outcome {
        Ok(Ok(_)) => delivered += 1,
        _ => failed += 1,
    };
    for (key, value, event_id) in &records {
        let mut record = FutureRecord::to(topic)
            .key(key.as_str())
            .payload(value.as_str())
            .headers(headers(event_id, key));
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    in_flight.push_back(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    match in_flight.pop_front() {
                        Some(delivery) => settle(delivery.await),
                        None => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
                Err((error, _)) => panic!("send failed: {error}"),
            }
        }
    }
    while let Some(delivery) = in_flight.pop_front() {
        settle(delivery.await);
    }
    let elapsed = started.elapsed();
    let spent = cpu_before.until(&cpu::sample(KAFKA_PROCESSES));
    assert_eq!(failed, 0, "raw rdkafka: {failed} records failed");
    (delivered as f64 / elapsed.as_secs_f64(), delivered, spent)
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
    let connection = Connection::connect(&settings.amqp_url, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    let records: Vec<(String, String, Uuid)> = (0..settings.events)
        .map(|sequence| {
            (
                aggregate_id(sequence, settings.aggregates),
                payload(sequence, settings.aggregates, settings.payload_bytes),
                Uuid::now_v7(),
            )
        })
        .collect();
    let options = BasicPublishOptions {
        mandatory: true,
        immediate: false,
    };
    let properties = |event_id: &Uuid, key: &str| {
        let mut headers = FieldTable::default();
        for (name, value) in attributes(event_id, key) {
            headers.insert(
                ShortString::from(format!("cloudEvents:{name}")),
                AMQPValue::LongString(LongString::from(value)),
            );
        }
        headers.insert(
            ShortString::from("cloudEvents:datacontenttype"),
            AMQPValue::LongString(LongString::from("application/json")),
        );
        BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(event_id.to_string()))
            .with_type(ShortString::from(EVENT_TYPE))
            .with_timestamp(chrono::Utc::now().timestamp() as u64)
            .with_headers(headers)
    };
    // Warm-up.
    let warm_id = Uuid::now_v7();
    channel
        .basic_publish(
            exchange.into(),
            EVENT_TYPE.into(),
            options,
            b"{}",
            properties(&warm_id, "warm-up"),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");

    let cpu_before = cpu::sample(RABBITMQ_PROCESSES);
    let started = Instant::now();
    let mut confirms = VecDeque::new();
    let mut acknowledged = 0u64;
    let mut check = |confirmation: lapin::Confirmation| {
        assert!(
            !confirmation.is_nack() && confirmation.take_message().is_none(),
            "raw lapin: message nacked or returned"
        );
        acknowledged += 1;
    };
    for (key, value, event_id) in &records {
        let confirm = channel
            .basic_publish(
                exchange.into(),
                EVENT_TYPE.into(),
                options,
                value.as_bytes(),
                properties(event_id, key),
            )
            .await
            .expect("publish");
        confirms.push_back(confirm);
        if confirms.len() > AMQP_WINDOW
            && let Some(confirm) = confirms.pop_front()
        {
            check(confirm.await.expect("confirm"));
        }
    }
    while let Some(confirm) = confirms.pop_front() {
        check(confirm.await.expect("confirm"));
    }
    let elapsed = started.elapsed();
    let spent = cpu_before.until(&cpu::sample(RABBITMQ_PROCESSES));
    let _ = connection.close(200, "bye".into()).await;
    (
        acknowledged as f64 / elapsed.as_secs_f64(),
        acknowledged,
        spent,
    )
}
