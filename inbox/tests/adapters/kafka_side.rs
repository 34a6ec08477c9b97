//! The Kafka side of the suite: a topic and consumer group of each test's
//! own on the real Kafka-API broker (tansu on 127.0.0.1:9092;
//! `OUTBOX_TEST_KAFKA_BROKERS` overrides), messages produced as the relay
//! writes them (CloudEvents binary mode, `ce_*` headers, key = aggregate
//! id), and [`KafkaInboxConsumer`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use outbox_inbox::kafka::{
    DEAD_LETTER_REASON_HEADER, DEAD_LETTER_SOURCE_HEADER, DEAD_LETTER_SUFFIX, KafkaConsumerConfig,
    KafkaInboxConsumer,
};
use outbox_inbox::{Handler, Inbox, InboxBackend};
use outbox_testkit::kafka::{
    Outgoing, committed_messages, create_topic, delete_topics_blocking, group_progress, produce,
    read_topic, require_kafka,
};
use outbox_testkit::unique_name;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::broker::{BrokerSide, DeadLetter, Message, Running, Settings};

/// A topic of the test's own and the consumer group that reads it.
pub struct KafkaSide {
    pub brokers: String,
    pub topic: String,
    pub group: String,
    pub partitions: i32,
    published: AtomicU64,
}

impl KafkaSide {
    /// The dead-letter topic of the side's topic.
    pub fn dead_letter_topic(&self) -> String {
        format!("{}{DEAD_LETTER_SUFFIX}", self.topic)
    }

    /// The consumer configuration for `settings`, with what tansu needs.
    pub fn config(&self, settings: Settings) -> KafkaConsumerConfig {
        let mut config = KafkaConsumerConfig::new(
            vec![self.brokers.clone()],
            self.group.clone(),
            vec![self.topic.clone()],
        );
        config.max_in_flight = usize::from(settings.in_flight);
        config.max_attempts = settings.max_attempts;
        config.retry_base_delay = settings.retry_base_delay;
        config.retry_max_delay = settings.retry_max_delay;
        config.batch_size = settings.batch_size;
        config.batch_wait = crate::broker::BATCH_WAIT;
        config.commit_interval = Duration::from_millis(100);
        config.client_options = BTreeMap::from([
            // Groups on tansu form slowly with the default session timeout.
            ("session.timeout.ms".to_owned(), "6000".to_owned()),
            ("heartbeat.interval.ms".to_owned(), "500".to_owned()),
        ]);
        config
    }

    /// Start a consumer with `config` as it is.
    pub fn start_configured<DB: InboxBackend, H: Handler<DB>>(
        &self,
        inbox: Inbox<DB>,
        handler: H,
        config: KafkaConsumerConfig,
    ) -> Running {
        let consumer = KafkaInboxConsumer::new(inbox, handler, config).expect("kafka consumer");
        Running::spawn(|stop| consumer.run(stop))
    }

    /// Committed offset (if any) and high watermark of each partition.
    pub async fn progress(&self) -> Vec<(Option<i64>, i64)> {
        let (brokers, group, topic) =
            (self.brokers.clone(), self.group.clone(), self.topic.clone());
        let partitions = self.partitions;
        tokio::task::spawn_blocking(move || group_progress(&brokers, &group, &topic, partitions))
            .await
            .expect("group progress")
    }
}

impl BrokerSide for KafkaSide {
    const ADAPTER: &'static str = "kafka";
    const ORDERS_BY_KEY: bool = true;
    const COUNTS_ATTEMPTS: bool = false;

    async fn create(prefix: &str, partitions: i32) -> KafkaSide {
        let brokers = require_kafka().await;
        let topic = unique_name(prefix);
        create_topic(&brokers, &topic, partitions).await;
        KafkaSide {
            brokers,
            topic,
            group: unique_name("group"),
            partitions,
            published: AtomicU64::new(0),
        }
    }

    async fn publish(&self, messages: &[Message]) {
        let outgoing: Vec<Outgoing> = messages.iter().map(cloud_event).collect();
        produce(&self.brokers, &self.topic, &outgoing).await;
        self.published
            .fetch_add(messages.len() as u64, Ordering::SeqCst);
    }

    fn published(&self) -> u64 {
        self.published.load(Ordering::SeqCst)
    }

    fn start<DB: InboxBackend, H: Handler<DB>>(
        &self,
        inbox: Inbox<DB>,
        handler: H,
        settings: Settings,
    ) -> Running {
        self.start_configured(inbox, handler, self.config(settings))
    }

    async fn acknowledged(&self) -> u64 {
        committed_messages(&self.brokers, &self.group, &self.topic, self.partitions).await
    }

    /// The high watermark of the dead-letter topic's one partition; 0
    /// while the consumer has not created the topic yet.
    async fn dead_letter_count(&self) -> u64 {
        let (brokers, topic) = (self.brokers.clone(), self.dead_letter_topic());
        tokio::task::spawn_blocking(move || {
            let probe: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .create()
                .expect("kafka probe consumer");
            probe
                .fetch_watermarks(&topic, 0, Duration::from_secs(10))
                .map_or(0, |(_, high)| u64::try_from(high).unwrap_or(0))
        })
        .await
        .expect("dead-letter watermark")
    }

    async fn dead_letters(&self, count: usize) -> Vec<DeadLetter> {
        read_topic(&self.brokers, &self.dead_letter_topic(), count)
            .await
            .into_iter()
            .map(|(key, headers, body)| DeadLetter {
                reason: headers
                    .get(DEAD_LETTER_REASON_HEADER)
                    .unwrap_or_else(|| panic!("no reason header: {headers:?}"))
                    .clone(),
                origin: headers
                    .get(DEAD_LETTER_SOURCE_HEADER)
                    .unwrap_or_else(|| panic!("no source header: {headers:?}"))
                    .clone(),
                attempts: None,
                key,
                source: headers.get("ce_source").cloned(),
                body,
            })
            .collect()
    }

    fn origin_of(&self, index: u64) -> String {
        format!("{}/0/{index}", self.topic)
    }
}

/// Delete the topic and its dead-letter topic, also when the test failed.
impl Drop for KafkaSide {
    fn drop(&mut self) {
        delete_topics_blocking(
            self.brokers.clone(),
            vec![self.topic.clone(), self.dead_letter_topic()],
        );
    }
}

/// `message` as the relay produces it to Kafka.
fn cloud_event(message: &Message) -> Outgoing {
    let mut headers = vec![
        ("ce_specversion", "1.0".to_owned()),
        ("ce_source", message.source.clone()),
        ("ce_type", message.event_type.clone()),
        ("ce_time", "2025-01-01T00:00:00Z".to_owned()),
        ("content-type", "application/json".to_owned()),
        ("ce_aggregatetype", message.aggregate_type.clone()),
        ("ce_eventversion", message.event_version.clone()),
        ("ce_partitionkey", message.key.clone()),
    ];
    if let Some(id) = &message.id {
        headers.insert(1, ("ce_id", id.clone()));
    }
    Outgoing {
        key: message.key.clone(),
        headers: headers
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
        value: message.body.clone(),
        partition: message.partition,
    }
}
