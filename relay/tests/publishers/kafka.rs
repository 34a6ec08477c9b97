//! The Kafka publisher's [`Target`]: a topic of three partitions of the
//! test's own on the real broker, read back by a consumer group.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::OutboundEvent;
use outbox_relay::publish::{KafkaPublisher, KafkaPublisherConfig, Publisher};
use outbox_testkit::{kafka, unique_name};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;

use crate::{Delivered, LossyClient, LossyTarget, Target};

/// What only Kafka carries: the record key, its partition, every header.
pub(crate) struct KafkaRecord {
    key: String,
    partition: i32,
    headers: HashMap<String, String>,
}

pub(crate) struct KafkaTarget {
    brokers: String,
    topic: String,
}

impl Target for KafkaTarget {
    type Raw = KafkaRecord;
    const RECOVER_CHECKS: bool = true;

    async fn new() -> Self {
        let brokers = kafka::require_kafka().await;
        let topic = unique_name("publisher");
        kafka::create_topic(&brokers, &topic, 3).await;
        KafkaTarget { brokers, topic }
    }

    fn destination(&self) -> String {
        self.topic.clone()
    }

    fn publisher(&self) -> Box<dyn Publisher> {
        let mut config = KafkaPublisherConfig::new(vec![self.brokers.clone()]);
        config.message_timeout = Duration::from_secs(20);
        Box::new(KafkaPublisher::new(config).expect("kafka publisher"))
    }

    fn unreachable() -> Box<dyn Publisher> {
        // Nothing listens on port 1.
        let mut config = KafkaPublisherConfig::new(vec!["127.0.0.1:1".to_owned()]);
        config.message_timeout = Duration::from_secs(2);
        config.metadata_timeout = Duration::from_secs(1);
        Box::new(KafkaPublisher::new(config).expect("kafka publisher"))
    }

    async fn read(&self, count: usize) -> Vec<Delivered<KafkaRecord>> {
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", unique_name("group"))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            // tansu answers the first JoinGroup after about half the session
            // timeout: 23 s with the default 45 s, 3.6 s with 6 s.
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "1000")
            .set("allow.auto.create.topics", "false")
            .create()
            .expect("kafka consumer");
        consumer.subscribe(&[&self.topic]).expect("subscribe");
        let deadline = tokio::time::Instant::now() + kafka::CATCH_UP;
        let mut delivered = Vec::with_capacity(count);
        while delivered.len() < count {
            let message = tokio::time::timeout_at(deadline, consumer.recv())
                .await
                .unwrap_or_else(|_| panic!("only {} of {count} messages arrived", delivered.len()))
                .expect("consume");
            let headers = kafka::message_headers(&message);
            let mut attributes: std::collections::BTreeMap<String, String> = headers
                .iter()
                .filter_map(|(name, value)| {
                    Some((name.strip_prefix("ce_")?.to_owned(), value.clone()))
                })
                .collect();
            if let Some(content_type) = headers.get("content-type") {
                attributes.insert("datacontenttype".to_owned(), content_type.clone());
            }
            let data = serde_json::from_slice(message.payload().unwrap_or_default())
                .expect("the value is the JSON payload");
            delivered.push(Delivered {
                attributes,
                data,
                raw: KafkaRecord {
                    key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
                    partition: message.partition(),
                    headers,
                },
            });
        }
        delivered
    }

    /// Key = aggregate id, so each aggregate keeps one partition; the keys
    /// spread over the partitions; the trace context also travels as plain
    /// headers; `datacontenttype` travels as `content-type` only.
    fn check_transport(delivered: &[Delivered<KafkaRecord>], events: &[&OutboundEvent]) {
        let mut partition_of_key: HashMap<&str, i32> = HashMap::new();
        for (message, event) in delivered.iter().zip(events) {
            let record = &message.raw;
            assert_eq!(record.key, event.aggregate_id, "key = aggregate id");
            let partition = *partition_of_key
                .entry(event.aggregate_id.as_str())
                .or_insert(record.partition);
            assert_eq!(partition, record.partition, "{}: one partition", record.key);
            for trace in ["traceparent", "tracestate"] {
                assert_eq!(
                    record.headers.get(trace),
                    event.headers.get(trace),
                    "{trace}"
                );
            }
            assert!(!record.headers.contains_key("ce_datacontenttype"));
        }
        let partitions: std::collections::HashSet<i32> =
            partition_of_key.values().copied().collect();
        assert!(partitions.len() > 1, "the keys spread over the partitions");
    }

    async fn remove(self) {
        kafka::delete_topic(&self.brokers, &self.topic).await;
    }
}

impl LossyTarget for KafkaTarget {
    /// A record that times out in flight can leave a gap that later records of its partition do not fall into.
    const ORDER_IN_FLIGHT: bool = false;

    /// Records linger in the producer's queue for 3 s before they are
    /// sent; `break_client` puts the producer into librdkafka's fatal
    /// error state (its test hook), which fails them unsent. The publisher
    /// replaces the producer after the batch that meets the error.
    async fn lossy(&self) -> LossyClient {
        let mut config = KafkaPublisherConfig::new(vec![self.brokers.clone()]);
        config.message_timeout = Duration::from_secs(20);
        config
            .client_options
            .insert("linger.ms".to_owned(), "3000".to_owned());
        let publisher = Arc::new(KafkaPublisher::new(config).expect("kafka publisher"));
        let failing = Arc::clone(&publisher);
        LossyClient {
            publisher,
            start_losing: Box::new(|| {}),
            break_client: Box::new(move || {
                failing
                    .inject_fatal_error("fatal error injected by the test")
                    .expect("inject a fatal error");
            }),
            _transport: None,
        }
    }
}
