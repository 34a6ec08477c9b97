//! Consumers that stamp the arrival of every event by its id, or note
//! every delivery in the order it came, and the percentiles of the
//! latencies measured with them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::push::OrderedConfig;
use futures::StreamExt;
use lapin::options::BasicConsumeOptions;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use outbox_testkit::redis::{connect_to, entry_fields};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use redis::AsyncCommands;
use redis::streams::{StreamReadOptions, StreamReadReply};

use super::events::unique_name;
use super::raw::nats_jetstream;

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

/// Arrival stamps, and the callback of a consumer that fills them: the
/// first arrival of each event id.
pub fn stamping() -> (Arrivals, impl FnMut(String, Instant) + Send + 'static) {
    let stamps: Arrivals = Arc::default();
    let sink = Arc::clone(&stamps);
    (stamps, move |id, now| {
        sink.lock().unwrap().entry(id).or_insert(now);
    })
}

/// Deliveries, and the callback of a consumer that notes every one in
/// order.
pub fn noting() -> (Deliveries, impl FnMut(String, Instant) + Send + 'static) {
    let deliveries: Deliveries = Arc::default();
    let sink = Arc::clone(&deliveries);
    (deliveries, move |id, _| sink.lock().unwrap().push(id))
}

/// Start a consumer that stamps the arrival time of every event id; returns
/// the stamps and the consuming task.
pub fn kafka_consumer(brokers: &str, topic: &str) -> (Arrivals, tokio::task::JoinHandle<()>) {
    let (stamps, stamp) = stamping();
    (stamps, kafka_consume(brokers, topic, stamp))
}

/// Start a consumer that notes every delivery's event id in order, from
/// the topic's beginning; returns them and the consuming task.
pub fn kafka_deliveries(brokers: &str, topic: &str) -> (Deliveries, tokio::task::JoinHandle<()>) {
    let (deliveries, note) = noting();
    (deliveries, kafka_consume(brokers, topic, note))
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
    let (stamps, stamp) = stamping();
    (stamps, amqp_consume(amqp_url, queue, stamp).await)
}

/// Start a consumer of `queue` that notes every delivery's event id in
/// order; returns them and the consuming task.
pub async fn amqp_deliveries(
    amqp_url: &str,
    queue: &str,
) -> (Deliveries, tokio::task::JoinHandle<()>) {
    let (deliveries, note) = noting();
    (deliveries, amqp_consume(amqp_url, queue, note).await)
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

/// Read the Redis stream `stream` from its start (`XREAD BLOCK` from
/// `0-0`, 1,000 entries at a time), calling `delivered` with each entry's
/// `ce_id` field and its arrival instant, in stream order.
pub async fn redis_consume(
    url: &str,
    stream: &str,
    mut delivered: impl FnMut(String, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let mut connection = connect_to(url, "OUTBOX_TEST_REDIS_URL").await;
    let stream = stream.to_owned();
    tokio::spawn(async move {
        let mut last_id = "0-0".to_owned();
        let options = StreamReadOptions::default().count(1000).block(100);
        loop {
            let reply: Result<StreamReadReply, _> = connection
                .xread_options(&[stream.as_str()], &[last_id.as_str()], &options)
                .await;
            let reply = match reply {
                Ok(reply) => reply,
                Err(error) => {
                    eprintln!("redis consumer error: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let now = Instant::now();
            for key in reply.keys {
                for entry in key.ids {
                    let mut fields = entry_fields(&entry.map);
                    last_id = entry.id;
                    if let Some(id) = fields.remove("ce_id") {
                        delivered(id, now);
                    }
                }
            }
        }
    })
}

/// Read the JetStream stream `stream` on the server at `url` from its
/// start with an ordered push consumer of the reader's own, calling
/// `delivered` with each message's `ce-id` header and its arrival instant,
/// in stream order.
pub async fn nats_consume(
    url: &str,
    stream: &str,
    mut delivered: impl FnMut(String, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let jetstream = nats_jetstream(url).await;
    let consumer = jetstream
        .get_stream(stream)
        .await
        .unwrap_or_else(|error| panic!("the JetStream stream {stream}: {error}"))
        .create_consumer(OrderedConfig {
            deliver_subject: jetstream.client().new_inbox(),
            ..OrderedConfig::default()
        })
        .await
        .unwrap_or_else(|error| panic!("an ordered consumer of {stream}: {error}"));
    let mut messages = consumer
        .messages()
        .await
        .unwrap_or_else(|error| panic!("the messages of {stream}: {error}"));
    tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            let now = Instant::now();
            let message = match message {
                Ok(message) => message,
                Err(error) => {
                    eprintln!("nats consumer error: {error}");
                    continue;
                }
            };
            let id = message
                .headers
                .as_ref()
                .and_then(|headers| headers.get("ce-id"))
                .map(|id| id.as_str().to_owned());
            if let Some(id) = id {
                delivered(id, now);
            }
        }
    })
}
