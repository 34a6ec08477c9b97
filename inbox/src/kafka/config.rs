//! [`KafkaConsumerConfig`]: the settings of a Kafka inbox consumer, and the
//! librdkafka configurations of its consumer, dead-letter producer and
//! admin client.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::config::ClientConfig;

use crate::consumer::{impl_batch_settings, impl_retry_settings};
use crate::error::Error;
use crate::prune::PruneSettings;

pub use crate::consumer::DEAD_LETTER_SUFFIX;

/// Settings of a [`KafkaInboxConsumer`](super::KafkaInboxConsumer).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KafkaConsumerConfig {
    /// Bootstrap brokers, `host:port` each.
    pub brokers: Vec<String>,
    /// The consumer group (`group.id`).
    pub group_id: String,
    /// Topics to consume. A name starting with `^` is a regular expression
    /// (librdkafka's convention); such a subscription should not match the
    /// dead-letter topics.
    pub topics: Vec<String>,
    /// Most messages received and not yet finished (running, retrying or
    /// waiting behind an earlier message of the same key). At least
    /// `batch_size`. Default 32.
    pub max_in_flight: usize,
    /// Messages handled in one inbox transaction: their event ids are
    /// recorded with one statement, the handler runs for the new ones
    /// ([`Handler::handle_batch`](crate::Handler::handle_batch)) in offset
    /// order per key, one commit, then every offset of the batch becomes
    /// committable. 1 (the default): a transaction per message. A handler
    /// failure rolls the batch back and its messages run again one at a
    /// time (`docs/inbox.md`, "Batches"). Set `max_in_flight` to twice this
    /// or more, so the next batch fills while one commits.
    pub batch_size: usize,
    /// Longest a batch waits to fill once its first message arrived; a
    /// message waits at most this before its transaction starts. Default
    /// 20 ms.
    pub batch_wait: Duration,
    /// Handler attempts per message before it is dead-lettered; at least
    /// 1. Default 5.
    pub max_attempts: u32,
    /// Backoff before the first retry; it doubles per retry, with jitter.
    /// Also the first pause after a database outage or a failed dead
    /// letter. Default 200 ms.
    pub retry_base_delay: Duration,
    /// Longest backoff between two retries. Default 30 s.
    pub retry_max_delay: Duration,
    /// How often finished offsets are committed; zero commits after every
    /// finished message. Offsets are also committed before a partition is
    /// revoked and when the consumer stops. Default 1 s.
    pub commit_interval: Duration,
    /// The dead-letter topic of every consumed topic; `None` for
    /// `<topic>.dlq` per topic. Default `None`.
    pub dead_letter_topic: Option<String>,
    /// Create a missing dead-letter topic (at startup, or on first use).
    /// Default on.
    pub create_dead_letter_topics: bool,
    /// Partitions of a dead-letter topic the consumer creates. Default 1.
    pub dead_letter_partitions: i32,
    /// Replication factor of a dead-letter topic the consumer creates; `-1`
    /// for the broker's default. Default `-1`.
    pub dead_letter_replication_factor: i32,
    /// librdkafka client options (`security.protocol`, `sasl.*`,
    /// `session.timeout.ms`, `auto.offset.reset`, ...) for the consumer, the
    /// dead-letter producer and the admin client, applied after the
    /// consumer's own settings. `enable.auto.commit` and
    /// `enable.auto.offset.store` stay off whatever is given here, and an
    /// option that would weaken the dead-letter producer (`acks` other than
    /// `all`, `enable.idempotence` off, the `random` partitioner) is
    /// refused.
    pub client_options: BTreeMap<String, String>,
    /// Pruning of the inbox rows, done by a background task of the consumer.
    pub prune: PruneSettings,
}

impl_retry_settings!(KafkaConsumerConfig, "kafka");
impl_batch_settings!(KafkaConsumerConfig, "kafka", max_in_flight, "max_in_flight");

impl KafkaConsumerConfig {
    /// The default settings for consumer group `group_id` reading `topics`
    /// from `brokers`.
    pub fn new(brokers: Vec<String>, group_id: impl Into<String>, topics: Vec<String>) -> Self {
        KafkaConsumerConfig {
            brokers,
            group_id: group_id.into(),
            topics,
            max_in_flight: 32,
            batch_size: 1,
            batch_wait: Duration::from_millis(20),
            max_attempts: 5,
            retry_base_delay: Duration::from_millis(200),
            retry_max_delay: Duration::from_secs(30),
            commit_interval: Duration::from_secs(1),
            dead_letter_topic: None,
            create_dead_letter_topics: true,
            dead_letter_partitions: 1,
            dead_letter_replication_factor: -1,
            client_options: BTreeMap::new(),
            prune: PruneSettings::default(),
        }
    }

    /// The dead-letter topic of messages read from `topic`.
    pub fn dead_letter_topic_for(&self, topic: &str) -> String {
        match &self.dead_letter_topic {
            Some(dead_letter_topic) => dead_letter_topic.clone(),
            None => format!("{topic}{DEAD_LETTER_SUFFIX}"),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.brokers.is_empty() || self.brokers.iter().any(|broker| broker.trim().is_empty()) {
            return Err(config_error("brokers", "must name at least one host:port"));
        }
        if self.group_id.trim().is_empty() {
            return Err(config_error("group_id", "is empty"));
        }
        if self.topics.is_empty() || self.topics.iter().any(|topic| topic.trim().is_empty()) {
            return Err(config_error("topics", "must name at least one topic"));
        }
        if self.max_in_flight == 0 {
            return Err(config_error("max_in_flight", "must be at least 1"));
        }
        self.check_retry_schedule()?;
        self.check_batch_settings()?;
        if let Some(topic) = &self.dead_letter_topic
            && topic.trim().is_empty()
        {
            return Err(config_error("dead_letter_topic", "is empty"));
        }
        if self.dead_letter_partitions < 1 {
            return Err(config_error("dead_letter_partitions", "must be at least 1"));
        }
        if self.dead_letter_replication_factor < 1 && self.dead_letter_replication_factor != -1 {
            return Err(config_error(
                "dead_letter_replication_factor",
                "must be at least 1, or -1 for the broker's default",
            ));
        }
        if self.prune.interval.is_zero() {
            return Err(config_error("prune.interval", "must be more than zero"));
        }
        // The dead-letter producer gets every option a consumer does not
        // understand: none may weaken what a dead letter is promised.
        for (key, value) in &self.client_options {
            outbox::broker::kafka::check_client_option(key, value, "the dead-letter producer")
                .map_err(|reason| config_error(&format!("client_options.{key}"), &reason))?;
        }
        Ok(())
    }

    fn base_config(&self, client_id: &str) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.brokers.join(","))
            .set("client.id", client_id);
        config
    }

    pub(crate) fn consumer_config(&self) -> ClientConfig {
        let mut config = self.base_config("outbox-inbox");
        config
            .set("group.id", &self.group_id)
            // A new group starts at the beginning: an inbox consumer must not
            // skip events published before it first joined.
            .set("auto.offset.reset", "earliest")
            .set("allow.auto.create.topics", "false");
        for (key, value) in &self.client_options {
            config.set(key, value);
        }
        // Offsets are stored and committed by the consumer itself, only
        // after the inbox transaction committed.
        config
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        config
    }

    pub(crate) fn producer_config(&self) -> ClientConfig {
        let mut config = self.base_config("outbox-inbox-dead-letter");
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("allow.auto.create.topics", "false");
        for (key, value) in self.client_options.iter().filter(|(key, _)| {
            // Consumer settings would only make librdkafka warn here.
            !CONSUMER_ONLY_OPTIONS.contains(&key.as_str())
        }) {
            config.set(key, value);
        }
        config
    }

    pub(crate) fn admin_config(&self) -> ClientConfig {
        let mut config = self.base_config("outbox-inbox-admin");
        for (key, value) in self.client_options.iter().filter(|(key, _)| {
            !CONSUMER_ONLY_OPTIONS.contains(&key.as_str())
                && !PRODUCER_ONLY_OPTIONS.contains(&key.as_str())
        }) {
            config.set(key, value);
        }
        config
    }
}

/// Client options that only a consumer understands; not passed to the
/// dead-letter producer and the admin client.
const CONSUMER_ONLY_OPTIONS: &[&str] = &[
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.remote.assignor",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "auto.offset.reset",
    "auto.commit.interval.ms",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "fetch.wait.max.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "isolation.level",
    "check.crcs",
    "coordinator.query.interval.ms",
];

/// Client options that only a producer understands.
const PRODUCER_ONLY_OPTIONS: &[&str] = &[
    "enable.idempotence",
    "acks",
    "linger.ms",
    "queue.buffering.max.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "compression.type",
    "compression.codec",
    "batch.size",
    "batch.num.messages",
    "partitioner",
    "retries",
    "message.send.max.retries",
];

fn config_error(field: &str, reason: &str) -> Error {
    Error::Config(format!("kafka consumer: {field} {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> KafkaConsumerConfig {
        KafkaConsumerConfig::new(
            vec!["127.0.0.1:9092".to_owned()],
            "group",
            vec!["orders".to_owned()],
        )
    }

    #[test]
    fn validates_the_settings() {
        assert!(config().validate().is_ok());
        let no_attempts = KafkaConsumerConfig {
            max_attempts: 0,
            ..config()
        };
        assert!(matches!(no_attempts.validate(), Err(Error::Config(_))));
        let slow_start = KafkaConsumerConfig {
            retry_base_delay: Duration::from_secs(60),
            ..config()
        };
        assert!(matches!(slow_start.validate(), Err(Error::Config(_))));
        let no_topics = KafkaConsumerConfig {
            topics: Vec::new(),
            ..config()
        };
        assert!(matches!(no_topics.validate(), Err(Error::Config(_))));
    }

    #[test]
    fn names_the_dead_letter_topic() {
        assert_eq!(config().dead_letter_topic_for("orders"), "orders.dlq");
        let shared = KafkaConsumerConfig {
            dead_letter_topic: Some("all.dlq".to_owned()),
            ..config()
        };
        assert_eq!(shared.dead_letter_topic_for("orders"), "all.dlq");
    }

    #[test]
    fn offsets_stay_manual_whatever_the_options_say() {
        let mut settings = config();
        settings
            .client_options
            .insert("enable.auto.commit".to_owned(), "true".to_owned());
        let consumer = settings.consumer_config();
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        assert_eq!(consumer.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(settings.producer_config().get("enable.auto.commit"), None);
    }

    #[test]
    fn options_that_would_weaken_the_dead_letter_producer_are_refused() {
        for (name, value) in [("acks", "1"), ("enable.idempotence", "false")] {
            let mut settings = config();
            settings
                .client_options
                .insert(name.to_owned(), value.to_owned());
            let refusal = settings.validate().expect_err(name).to_string();
            assert!(
                refusal.contains(&format!("client_options.{name}"))
                    && refusal.contains("the dead-letter producer requires"),
                "{refusal}"
            );
        }
        let mut settings = config();
        settings
            .client_options
            .insert("linger.ms".to_owned(), "5".to_owned());
        assert!(settings.validate().is_ok());
    }
}
