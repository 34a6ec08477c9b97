//! Consumers that stamp the arrival of every event by its id, and the
//! percentiles of the latencies measured with them.

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
    let stamps: Arrivals = Arc::default();
    let sink = Arc::clone(&stamps);
    let task = tokio::spawn(async move {
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
                        sink.lock().unwrap().entry(id).or_insert(now);
                    }
                }
                Err(error) => {
                    eprintln!("kafka consumer error: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    (stamps, task)
}

pub async fn amqp_consumer(amqp_url: &str, queue: &str) -> (Arrivals, tokio::task::JoinHandle<()>) {
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
    let stamps: Arrivals = Arc::default();
    let sink = Arc::clone(&stamps);
    let task = tokio::spawn(async move {
        let _connection = connection;
        while let Some(delivery) = consumer.next().await {
            let now = Instant::now();
            let Ok(delivery) = delivery else { break };
            if let Some(id) = delivery.properties.message_id() {
                sink.lock().unwrap().entry(id.to_string()).or_insert(now);
            }
        }
    });
    (stamps, task)
}
