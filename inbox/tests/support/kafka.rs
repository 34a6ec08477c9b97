//! The Kafka side of the inbox tests: a real Kafka-API broker (tansu on
//! 127.0.0.1:9092; `OUTBOX_TEST_KAFKA_BROKERS` overrides), topics of their
//! own, messages produced exactly as the relay writes them (CloudEvents
//! binary mode, `ce_*` headers, key = aggregate id), and the consumer
//! group's committed offsets.

use std::collections::HashMap;
use std::time::Duration;

use outbox::Event;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use uuid::Uuid;

/// Longest wait for a consumer to catch up.
pub const CATCH_UP: Duration = Duration::from_secs(90);

pub fn brokers() -> String {
    std::env::var("OUTBOX_TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// Fails the test, naming the broker, when nothing answers on its port.
pub async fn require_broker() -> String {
    let brokers = brokers();
    let first = brokers.split(',').next().unwrap_or_default().to_owned();
    let connected = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(&first),
    )
    .await;
    if !matches!(connected, Ok(Ok(_))) {
        panic!(
            "the Kafka broker (tansu) is not reachable at {first}; start the test services with \
             `scripts/test.sh --services-only` or set OUTBOX_TEST_KAFKA_BROKERS"
        );
    }
    brokers
}

pub fn unique(prefix: &str) -> String {
    format!("outbox-inbox-test-{prefix}-{}", Uuid::now_v7().simple())
}

pub async fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
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
}

/// A message as the test produces it.
pub struct Outgoing {
    pub key: String,
    pub headers: Vec<(String, String)>,
    pub value: Vec<u8>,
}

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

pub fn producer(brokers: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "0")
        .create()
        .expect("kafka producer")
}

/// Produce `messages` in order, each acknowledged before the next.
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
        producer
            .send(
                FutureRecord::to(topic)
                    .key(message.key.as_str())
                    .payload(message.value.as_slice())
                    .headers(headers),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)
            .expect("message produced");
    }
}

/// Committed offsets of `group` and high watermarks, per partition.
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

/// Wait until `group` committed every partition of `topic` to its end.
pub async fn wait_until_committed(brokers: &str, group: &str, topic: &str, partitions: i32) {
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        let (brokers_owned, group_owned, topic_owned) =
            (brokers.to_owned(), group.to_owned(), topic.to_owned());
        let progress = tokio::task::spawn_blocking(move || {
            group_progress(&brokers_owned, &group_owned, &topic_owned, partitions)
        })
        .await
        .expect("progress probe");
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

/// Read `count` messages of `topic` from its beginning.
pub async fn read_topic(
    brokers: &str,
    topic: &str,
    count: usize,
) -> Vec<(Option<String>, HashMap<String, String>, Vec<u8>)> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("reader"))
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
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|header| {
                        (
                            header.key.to_owned(),
                            String::from_utf8_lossy(header.value.unwrap_or_default()).into_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        messages.push((
            message
                .key()
                .map(|key| String::from_utf8_lossy(key).into_owned()),
            headers,
            message.payload().unwrap_or_default().to_vec(),
        ));
    }
    messages
}

/// Messages of `topic` the consumer `group` committed: the sum of its
/// committed offsets over the topic's `partitions` (each starts at 0).
pub async fn committed_messages(brokers: &str, group: &str, topic: &str, partitions: i32) -> u64 {
    let (brokers, group, topic) = (brokers.to_owned(), group.to_owned(), topic.to_owned());
    let progress =
        tokio::task::spawn_blocking(move || group_progress(&brokers, &group, &topic, partitions))
            .await
            .expect("progress probe");
    progress
        .iter()
        .map(|(committed, _)| committed.map_or(0, |offset| u64::try_from(offset).unwrap_or(0)))
        .sum()
}
