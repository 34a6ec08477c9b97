//! Consumers that stamp the arrival of every event by its id, or note
//! every delivery in the order it came, and the percentiles of the
//! latencies measured with them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::BasicConsumeOptions;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};

use super::events::unique_name;

/// Arrival instants by event id (the CloudEvents `id`).
pub type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

/// Every delivery's event id, in the order they came, duplicates included.
pub type Deliveries = Arc<Mutex<Vec<String>>>;

/// `p50, p99, max (n)` of `values`, in milliseconds; sorts `values`.
pub fn percentiles(values: &mut [Duration]) -> String {
    if values.is_empty() {
        return "n/a".to_owned();
    }
    values.sort_unstable();
    let at = |fraction: f64| {
        let index = ((values.len() as f64 * fraction).ceil() as usize).clamp(1, values.len()) - 1;
        values[index].as_secs_f64() * 1e3
    };
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n = {})",
        at(0.50),
        at(0.99),
        values[values.len() - 1].as_secs_f64() * 1e3,
        values.len()
    )
}

/// Start a consumer that stamps the arrival time of every event id; returns
/// the stamps and the consuming task.
pub fn kafka_consumer(brokers: &str, topic: &str) -> (Arrivals, tokio::task::JoinHandle<()>) {
    let stamps: Arrivals = Arc::default();
    let sink = Arc::clone(&stamps);
    let task = kafka_consume(brokers, topic, move |id, now| {
        sink.lock().unwrap().entry(id).or_insert(now);
    });
    (stamps, task)
}

/// Start a consumer that notes every delivery's event id in order, from
/// the topic's beginning; returns them and the consuming task.
pub fn kafka_deliveries(brokers: &str, topic: &str) -> (Deliveries, tokio::task::JoinHandle<()>) {
    let deliveries: Deliveries = Arc::default();
    let sink = Arc::clone(&deliveries);
    let task = kafka_consume(brokers, topic, move |id, _| sink.lock().unwrap().push(id));
    (deliveries, task)
}

/// Consume `topic` from its beginning in a group of its own, calling
/// `delivered` with each record's `ce_id` header and its arrival instant.
pub fn kafka_consume(
    brokers: &str,
    topic: &str,
    mut delivered: impl FnMut(String, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique_name("group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("kafka consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    tokio::spawn(async move {
        loop {
            match consumer.recv().await {
                Ok(message) => {
                    let now = Instant::now();
                    let id = message.headers().and_then(|headers| {
                        headers
                            .iter()
                            .find(|header| header.key == "ce_id")
                            .and_then(|header| header.value)
                            .map(|value| String::from_utf8_lossy(value).into_owned())
                    });
                    if let Some(id) = id {
                        delivered(id, now);
                    }
                }
                Err(error) => {
                    eprintln!("kafka consumer error: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

/// Start a consumer of `queue` that stamps the arrival time of every event
/// id (the AMQP `message-id`); returns the stamps and the consuming task.
pub async fn amqp_consumer(amqp_url: &str, queue: &str) -> (Arrivals, tokio::task::JoinHandle<()>) {
    let stamps: Arrivals = Arc::default();
    let sink = Arc::clone(&stamps);
    let task = amqp_consume(amqp_url, queue, move |id, now| {
        sink.lock().unwrap().entry(id).or_insert(now);
    })
    .await;
    (stamps, task)
}

/// Start a consumer of `queue` that notes every delivery's event id in
/// order; returns them and the consuming task.
pub async fn amqp_deliveries(
    amqp_url: &str,
    queue: &str,
) -> (Deliveries, tokio::task::JoinHandle<()>) {
    let deliveries: Deliveries = Arc::default();
    let sink = Arc::clone(&deliveries);
    let task = amqp_consume(amqp_url, queue, move |id, _| sink.lock().unwrap().push(id)).await;
    (deliveries, task)
}

/// Consume `queue` (no acknowledgements), calling `delivered` with each
/// message's `message-id` and its arrival instant.
pub async fn amqp_consume(
    amqp_url: &str,
    queue: &str,
    mut delivered: impl FnMut(String, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let connection = Connection::connect(amqp_url, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            unique_name("consumer").as_str().into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    tokio::spawn(async move {
        let _connection = connection;
        while let Some(delivery) = consumer.next().await {
            let now = Instant::now();
            let Ok(delivery) = delivery else { break };
            if let Some(id) = delivery.properties.message_id() {
                delivered(id.to_string(), now);
            }
        }
    })
}
