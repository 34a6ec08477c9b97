//! Consumers that collect, in arrival order, what reached the real brokers.
//! A broker that is not running fails the test with a message naming it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};

use super::workload::Received;

/// Kafka bootstrap brokers for tests.
pub fn kafka_brokers() -> String {
    std::env::var("OUTBOX_TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// AMQP URL for tests.
pub fn amqp_url() -> String {
    std::env::var("OUTBOX_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A name no other test uses.
pub fn unique_name(prefix: &str) -> String {
    format!("outbox-e2e-{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// Messages collected so far, shared with the consuming task.
#[derive(Clone, Default)]
pub struct Collected(Arc<Mutex<Vec<Received>>>);

impl Collected {
    /// Number of messages so far.
    pub fn len(&self) -> usize {
        self.0.lock().map(|messages| messages.len()).unwrap_or(0)
    }

    /// A copy of the messages so far.
    pub fn snapshot(&self) -> Vec<Received> {
        self.0
            .lock()
            .map(|messages| messages.clone())
            .unwrap_or_default()
    }

    fn push(&self, message: Received) {
        if let Ok(mut messages) = self.0.lock() {
            messages.push(message);
        }
    }
}

async fn require_port(address: &str, broker: &str) {
    let connected = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(address),
    )
    .await;
    if !matches!(connected, Ok(Ok(_))) {
        panic!(
            "{broker} is not reachable at {address}; start the test services with `scripts/test.sh --services-only`"
        );
    }
}

/// Create `topic` with `partitions` partitions and consume it from the
/// beginning in the background.
pub async fn kafka_topic_consumer(topic: &str, partitions: i32) -> Collected {
    let brokers = kafka_brokers();
    require_port(
        brokers.split(',').next().unwrap_or_default(),
        "the Kafka broker (tansu)",
    )
    .await;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("kafka admin client");
    let results = admin
        .create_topics(
            [&NewTopic::new(
                topic,
                partitions,
                TopicReplication::Fixed(1),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create_topics request");
    for result in results {
        result.expect("topic created");
    }
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", unique_name("group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("kafka consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let collected = Collected::default();
    let sink = collected.clone();
    tokio::spawn(async move {
        loop {
            match consumer.recv().await {
                Ok(message) => {
                    let headers: HashMap<String, String> = message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .map(|header| {
                                    let value = header
                                        .value
                                        .map(|value| String::from_utf8_lossy(value).into_owned());
                                    (header.key.to_owned(), value.unwrap_or_default())
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let key = message
                        .key()
                        .map(|key| String::from_utf8_lossy(key).into_owned())
                        .unwrap_or_default();
                    let payload = message
                        .payload()
                        .and_then(|payload| serde_json::from_slice(payload).ok())
                        .unwrap_or(serde_json::Value::Null);
                    sink.push(Received {
                        ce_id: headers.get("ce_id").cloned().unwrap_or_default(),
                        aggregate_id: headers.get("ce_partitionkey").cloned().unwrap_or_default(),
                        key,
                        payload,
                        headers,
                    });
                }
                Err(error) => {
                    eprintln!("kafka consumer error: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    collected
}

fn amqp_text(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(text) => text.to_string(),
        AMQPValue::ShortString(text) => text.to_string(),
        other => format!("{other:?}"),
    }
}

/// Declare `exchange` as a durable topic exchange on `channel`.
async fn declare_topic_exchange(channel: &lapin::Channel, exchange: &str) {
    channel
        .exchange_declare(
            exchange.into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare exchange");
}

/// Declare a durable topic exchange with no queue bound to it: the broker
/// returns every message published to it as unroutable.
pub async fn declare_rabbitmq_exchange(exchange: &str) {
    require_port("127.0.0.1:5672", "RabbitMQ").await;
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    declare_topic_exchange(&channel, exchange).await;
    let _ = connection.close(200, "OK".into()).await;
}

/// Declare a durable topic exchange and a durable queue bound to it with
/// `#`, and consume the queue in the background (manual ack).
pub async fn rabbitmq_exchange_consumer(exchange: &str) -> Collected {
    let url = amqp_url();
    require_port("127.0.0.1:5672", "RabbitMQ").await;
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    declare_topic_exchange(&channel, exchange).await;
    let queue = format!("{exchange}.all");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare queue");
    channel
        .queue_bind(
            queue.as_str().into(),
            exchange.into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind queue");
    let collected = Collected::default();
    let sink = collected.clone();
    let url_for_task = url.clone();
    tokio::spawn(async move {
        // Reconnect after a broker restart; the durable queue kept its messages.
        let mut connection = Some(connection);
        loop {
            let active = match connection.take() {
                Some(connection) => connection,
                None => match Connection::connect(&url_for_task, ConnectionProperties::default())
                    .await
                {
                    Ok(connection) => connection,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                },
            };
            let Ok(channel) = active.create_channel().await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let Ok(mut consumer) = channel
                .basic_consume(
                    queue.as_str().into(),
                    unique_name("consumer").as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
            else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            loop {
                // A consumer stream may stay silent instead of ending when
                // the broker goes away: check the connection while idle.
                let delivery =
                    match tokio::time::timeout(Duration::from_secs(1), consumer.next()).await {
                        Ok(Some(Ok(delivery))) => delivery,
                        Ok(Some(Err(_)) | None) => break,
                        Err(_) if active.status().connected() => continue,
                        Err(_) => break,
                    };
                let properties = &delivery.properties;
                let headers: HashMap<String, String> = properties
                    .headers()
                    .as_ref()
                    .map(|table| {
                        table
                            .inner()
                            .iter()
                            .map(|(name, value)| (name.to_string(), amqp_text(value)))
                            .collect()
                    })
                    .unwrap_or_default();
                sink.push(Received {
                    ce_id: headers.get("cloudEvents:id").cloned().unwrap_or_default(),
                    aggregate_id: headers
                        .get("cloudEvents:partitionkey")
                        .cloned()
                        .unwrap_or_default(),
                    key: properties
                        .message_id()
                        .as_ref()
                        .map(|id| id.to_string())
                        .unwrap_or_default(),
                    payload: serde_json::from_slice(&delivery.data)
                        .unwrap_or(serde_json::Value::Null),
                    headers,
                });
                // An ack on a dying connection may never complete; the broker
                // then redelivers, which the tests count as a duplicate.
                let acked = tokio::time::timeout(
                    Duration::from_secs(2),
                    delivery.ack(BasicAckOptions::default()),
                )
                .await;
                if !matches!(acked, Ok(Ok(_))) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    collected
}
