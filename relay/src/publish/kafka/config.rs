//! [`KafkaPublisherConfig`] and the librdkafka client configurations made
//! from it.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::config::ClientConfig;

use super::guarantee::check_client_option;

/// Settings of a [`KafkaPublisher`](super::KafkaPublisher).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KafkaPublisherConfig {
    /// Bootstrap brokers, `host:port` each.
    pub brokers: Vec<String>,
    /// How long librdkafka may try to deliver one record
    /// (`message.timeout.ms`); a record not acknowledged by then is
    /// [`PublishFailure::Unavailable`](crate::publish::PublishFailure::Unavailable).
    /// Default 30 s.
    pub message_timeout: Duration,
    /// Bound of one topic lookup or topic creation. Default 10 s.
    pub metadata_timeout: Duration,
    /// Create a topic that does not exist before sending to it, instead of
    /// rejecting its events. Default off.
    pub create_missing_topics: bool,
    /// Partitions of a topic created by `create_missing_topics`. Default 1.
    pub new_topic_partitions: i32,
    /// Replication factor of a topic created by `create_missing_topics`.
    /// Default 1.
    pub new_topic_replication_factor: i32,
    /// librdkafka client options (`security.protocol`, `sasl.*`,
    /// `compression.type`, `message.max.bytes`, ...), applied after the
    /// publisher's own settings, so they can override them; options that
    /// would weaken `acks=all`, turn idempotence off or spread one key over
    /// partitions are refused by
    /// [`KafkaPublisher::new`](super::KafkaPublisher::new).
    pub client_options: BTreeMap<String, String>,
}

impl KafkaPublisherConfig {
    /// The default settings for `brokers`.
    pub fn new(brokers: Vec<String>) -> Self {
        Self {
            brokers,
            message_timeout: Duration::from_secs(30),
            metadata_timeout: Duration::from_secs(10),
            create_missing_topics: false,
            new_topic_partitions: 1,
            new_topic_replication_factor: 1,
            client_options: BTreeMap::new(),
        }
    }

    /// The producer's `message.max.bytes`: the client option when set,
    /// else librdkafka's default, 1,000,000.
    pub(super) fn message_max_bytes(&self) -> u64 {
        self.client_options
            .get("message.max.bytes")
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(1_000_000)
    }

    /// The librdkafka configuration of the producer.
    pub(super) fn producer_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.brokers.join(","))
            .set("client.id", "outbox-relay")
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // A batch is handed over whole and then awaited: lingering
            // longer only delays its last request.
            .set("linger.ms", "1")
            .set("message.timeout.ms", duration_millis(self.message_timeout))
            // The partitioner of the Java client: a key lands on the same
            // partition as when a JVM producer (Debezium, Kafka Connect) sends it.
            .set("partitioner", "murmur2_random")
            // Off, so that the topic lookup before the first send does not
            // create the topic as a side effect: brokers that auto-create
            // (tansu does, on a Metadata request that allows it) would
            // otherwise ignore `create_missing_topics` and its partition
            // count. A client option can turn it back on.
            .set("allow.auto.create.topics", "false")
            // Broker states for `is_connected`, see `RelayContext::stats`.
            .set("statistics.interval.ms", "10000");
        for (key, value) in &self.client_options {
            config.set(key, value);
        }
        config
    }

    /// The librdkafka configuration of the admin client that creates topics:
    /// the connection settings, without the producer's own ones.
    pub(super) fn admin_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.brokers.join(","))
            .set("client.id", "outbox-relay-admin");
        for (key, value) in &self.client_options {
            config.set(key, value);
        }
        config
    }

    /// How long librdkafka tries to deliver one record: `message_timeout`,
    /// unless a client option replaced it. 0 means no timeout to
    /// librdkafka, and the publisher then waits as configured.
    pub(super) fn effective_message_timeout(&self) -> Duration {
        ["message.timeout.ms", "delivery.timeout.ms"]
            .iter()
            .find_map(|key| self.client_options.get(*key))
            .and_then(|millis| millis.parse::<u64>().ok())
            .filter(|millis| *millis > 0)
            .map_or(self.message_timeout, Duration::from_millis)
    }

    /// Checks the settings librdkafka does not check for the publisher:
    /// the brokers, the timeouts, the counts of new topics, and the client
    /// options that would weaken the guarantee.
    pub(super) fn validate(&self) -> Result<(), crate::error::Error> {
        if self.brokers.is_empty() || self.brokers.iter().any(|broker| broker.trim().is_empty()) {
            return Err(crate::error::Error::InvalidBrokerUrl {
                url: self.brokers.join(","),
                reason: "no Kafka broker given (expected host:port[,host:port...])".to_owned(),
            });
        }
        if self.message_timeout.is_zero() {
            return Err(config_error("message_timeout", "must be more than zero"));
        }
        if self.metadata_timeout.is_zero() {
            return Err(config_error("metadata_timeout", "must be more than zero"));
        }
        if self.new_topic_partitions < 1 {
            return Err(config_error("new_topic_partitions", "must be at least 1"));
        }
        if self.new_topic_replication_factor < 1 {
            return Err(config_error(
                "new_topic_replication_factor",
                "must be at least 1",
            ));
        }
        for (name, value) in &self.client_options {
            check_client_option(name, value).map_err(|reason| crate::error::Error::Config {
                path: "--config".to_owned(),
                reason: format!("kafka client option `{name}`: {reason}"),
            })?;
        }
        Ok(())
    }
}

/// A [`crate::error::Error::Config`] naming the field of `[kafka]`.
fn config_error(field: &str, reason: &str) -> crate::error::Error {
    crate::error::Error::Config {
        path: "--config".to_owned(),
        reason: format!("kafka.{field} {reason}"),
    }
}

/// A duration as librdkafka's millisecond settings take it, at least 1.
fn duration_millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}
