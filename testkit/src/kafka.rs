//! The Kafka side of the tests: the real Kafka-API broker (tansu on
//! 127.0.0.1:9092; `OUTBOX_TEST_KAFKA_BROKERS` overrides), topics of each
//! test's own, a producer, readers and a collecting consumer, and the
//! committed offsets of a consumer group.
//!
//! Everything that talks to the broker first checks that it answers: a
//! missing broker fails the test naming it and `scripts/test.sh
//! --services-only`; nothing is skipped.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::received::{Collected, Received};
use crate::services::{require_port, unique_name};

/// Default bootstrap brokers; `OUTBOX_TEST_KAFKA_BROKERS` overrides them.
pub const DEFAULT_KAFKA_BROKERS: &str = "127.0.0.1:9092";

/// Longest wait for a consumer or reader to catch up: a bound against a
/// hanging test, never an expectation.
pub const CATCH_UP: Duration = Duration::from_secs(90);

/// The bootstrap brokers of the tests (comma-separated), unchecked.
pub fn brokers() -> String {
    std::env::var("OUTBOX_TEST_KAFKA_BROKERS").unwrap_or_else(|_| DEFAULT_KAFKA_BROKERS.to_owned())
}

/// The bootstrap brokers, once the first one accepts a connection.
///
/// # Panics
/// When it does not; the message names the broker and how to start it.
pub async fn require_kafka() -> String {
    let brokers = brokers();
    let first = brokers.split(',').next().unwrap_or_default();
    require_port(
        first,
        "the Kafka broker (tansu)",
        "OUTBOX_TEST_KAFKA_BROKERS",
    )
    .await;
    brokers
}

/// An admin client for `brokers`.
pub fn admin(brokers: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("kafka admin client")
}

/// Create `topic` with `partitions` partitions (replication 1).
pub async fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    let results = admin(brokers)
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
}

/// Delete `topic`; a failure is printed, not raised (cleanup only).
pub async fn delete_topic(brokers: &str, topic: &str) {
    let deleted = admin(brokers)
        .delete_topics(
            &[topic],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await;
    match deleted {
        Ok(results) => {
            for result in results {
                if let Err((name, code)) = result {
                    eprintln!("could not delete topic {name}: {code}");
                }
            }
        }
        Err(error) => eprintln!("could not delete topic {topic}: {error}"),
    }
}

/// Delete `topics` from a thread of its own, so that a `Drop` inside the
/// test's runtime can clean up; failures are printed, not raised.
pub fn delete_topics_blocking(brokers: String, topics: Vec<String>) {
    let deleter = std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("could not delete topics {topics:?}: {error}");
                return;
            }
        };
        runtime.block_on(async {
            for topic in &topics {
                delete_topic(&brokers, topic).await;
            }
        });
    });
    if let Err(panic) = deleter.join() {
        eprintln!("could not delete topics: {panic:?}");
    }
}

/// Every header of `message`, values as (lossy) UTF-8 text.
pub fn message_headers<M: Message>(message: &M) -> HashMap<String, String> {
    message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|header| {
                    let value = String::from_utf8_lossy(header.value.unwrap_or_default());
                    (header.key.to_owned(), value.into_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `message` as a [`Received`], read from the relay's `ce_*` headers.
pub fn received<M: Message>(message: &M) -> Received {
    let headers = message_headers(message);
    Received {
        ce_id: headers.get("ce_id").cloned().unwrap_or_default(),
        aggregate_id: headers.get("ce_partitionkey").cloned().unwrap_or_default(),
        key: message
            .key()
            .map(|key| String::from_utf8_lossy(key).into_owned())
            .unwrap_or_default(),
        payload: message
            .payload()
            .and_then(|payload| serde_json::from_slice(payload).ok())
            .unwrap_or(serde_json::Value::Null),
        headers,
    }
}

/// Create `topic` with `partitions` partitions and consume it from the
/// beginning in the background, for as long as the test runs.
pub async fn topic_consumer(topic: &str, partitions: i32) -> Collected {
    let brokers = require_kafka().await;
    create_topic(&brokers, topic, partitions).await;
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
                Ok(message) => sink.push(received(&message)),
                Err(error) => {
                    eprintln!("kafka consumer error: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    collected
}

/// A message as a test produces it.
pub struct Outgoing {
    /// The record key.
    pub key: String,
    /// Headers, in order.
    pub headers: Vec<(String, String)>,
    /// The record value.
    pub value: Vec<u8>,
    /// The partition to write to; `None` leaves it to the key's hash.
    pub partition: Option<i32>,
}

/// An idempotent producer acknowledged by all replicas, without linger.
pub fn producer(brokers: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "0")
        .create()
        .expect("kafka producer")
}

/// Produce `messages` to `topic` in order, each acknowledged before the next.
pub async fn produce(brokers: &str, topic: &str, messages: &[Outgoing]) {
    let producer = producer(brokers);
    for message in messages {
        let mut headers = OwnedHeaders::new_with_capacity(message.headers.len());
        for (name, value) in &message.headers {
            headers = headers.insert(Header {
                key: name.as_str(),
                value: Some(value.as_str()),
            });
        }
        let mut record = FutureRecord::to(topic)
            .key(message.key.as_str())
            .payload(message.value.as_slice())
            .headers(headers);
        if let Some(partition) = message.partition {
            record = record.partition(partition);
        }
        producer
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(error, _)| error)
            .expect("message produced");
    }
}

/// Read `count` messages of `topic` from its beginning, as a group of its
/// own: (key, headers, value) each.
///
/// # Panics
/// When fewer arrive within [`CATCH_UP`].
pub async fn read_topic(
    brokers: &str,
    topic: &str,
    count: usize,
) -> Vec<(Option<String>, HashMap<String, String>, Vec<u8>)> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique_name("reader"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .create()
        .expect("kafka reader");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut messages = Vec::new();
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    while messages.len() < count {
        let received = tokio::time::timeout_at(deadline, consumer.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {} of {count} messages arrived on {topic}",
                    messages.len()
                )
            });
        let message = match received {
            Ok(message) => message,
            Err(error) => {
                eprintln!("reader error: {error}");
                continue;
            }
        };
        messages.push((
            message
                .key()
                .map(|key| String::from_utf8_lossy(key).into_owned()),
            message_headers(&message),
            message.payload().unwrap_or_default().to_vec(),
        ));
    }
    messages
}

/// Committed offset of `group` and high watermark, per partition of
/// `topic` (blocking: call it from `spawn_blocking` in async code).
pub fn group_progress(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<(Option<i64>, i64)> {
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("kafka probe consumer");
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition(topic, partition);
    }
    let committed = probe
        .committed_offsets(list, Duration::from_secs(10))
        .expect("committed offsets");
    (0..partitions)
        .map(|partition| {
            let offset =
                committed
                    .find_partition(topic, partition)
                    .and_then(|element| match element.offset() {
                        Offset::Offset(offset) => Some(offset),
                        _ => None,
                    });
            let (_, high) = probe
                .fetch_watermarks(topic, partition, Duration::from_secs(10))
                .expect("watermarks");
            (offset, high)
        })
        .collect()
}

async fn group_progress_async(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<(Option<i64>, i64)> {
    let (brokers, group, topic) = (brokers.to_owned(), group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || group_progress(&brokers, &group, &topic, partitions))
        .await
        .expect("progress probe")
}

/// Wait until `group` committed every partition of `topic` to its end.
///
/// # Panics
/// When it has not within [`CATCH_UP`].
pub async fn wait_until_committed(brokers: &str, group: &str, topic: &str, partitions: i32) {
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        let progress = group_progress_async(brokers, group, topic, partitions).await;
        if progress
            .iter()
            .all(|(committed, high)| *high == 0 || *committed == Some(*high))
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "group {group} did not commit {topic} to its end in {CATCH_UP:?}: {progress:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Messages of `topic` the consumer `group` committed: the sum of its
/// committed offsets over the topic's `partitions` (each starts at 0).
pub async fn committed_messages(brokers: &str, group: &str, topic: &str, partitions: i32) -> u64 {
    group_progress_async(brokers, group, topic, partitions)
        .await
        .iter()
        .map(|(committed, _)| committed.map_or(0, |offset| u64::try_from(offset).unwrap_or(0)))
        .sum()
}
