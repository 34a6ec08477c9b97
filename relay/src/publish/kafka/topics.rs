//! Topic lookup and creation before the first send to a topic: a record
//! for a missing topic would otherwise wait in librdkafka until
//! `message.timeout.ms` and fail as a timeout that names no cause.

use std::collections::{HashMap, HashSet};
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use futures::future::join_all;
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::Producer;

use super::KafkaPublisher;
use crate::publish::{PublishFailure, has_name_characters_only};

impl KafkaPublisher {
    /// Look up (or create) every topic of `topics` not known to exist yet.
    /// Returns the failure of each topic that cannot be sent to.
    pub(super) async fn resolve_topics(
        &self,
        topics: HashSet<&str>,
    ) -> HashMap<String, PublishFailure> {
        let mut failures = HashMap::new();
        let unknown: Vec<&str> = {
            let known = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
            topics
                .into_iter()
                .filter(|topic| !known.contains(*topic))
                .collect()
        };
        let lookups = unknown.iter().map(|topic| self.resolve_topic(topic));
        for (topic, outcome) in unknown.iter().zip(join_all(lookups).await) {
            if let Err(failure) = outcome {
                failures.insert((*topic).to_owned(), failure);
            }
        }
        failures
    }

    /// Look `topic` up, create it when it is missing and
    /// `create_missing_topics` is on, and remember it once it exists.
    async fn resolve_topic(&self, topic: &str) -> Result<(), PublishFailure> {
        let exists = self.topic_exists(topic).await?;
        if exists {
            self.remember_topic(topic);
            return Ok(());
        }
        if !self.config.create_missing_topics {
            tracing::warn!(topic, "kafka topic does not exist; its events are rejected");
            return Err(missing_topic_failure(topic));
        }
        self.create_topic(topic).await?;
        self.remember_topic(topic);
        Ok(())
    }

    fn remember_topic(&self, topic: &str) {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.to_owned());
    }

    /// Look `topic` up again before the next send to it.
    pub(super) fn forget_topic(&self, topic: &str) {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(topic);
    }

    /// One metadata request for `topic`.
    async fn topic_exists(&self, topic: &str) -> Result<bool, PublishFailure> {
        let producer = self.producer();
        let timeout = self.config.metadata_timeout;
        let topic_name = topic.to_owned();
        let metadata = self
            .tasks
            .spawn_blocking(move || producer.client().fetch_metadata(Some(&topic_name), timeout))
            .await
            .map_err(|error| {
                PublishFailure::Unavailable(format!(
                    "kafka metadata lookup of topic {topic} failed: {error}"
                ))
            })?
            .map_err(|error| {
                self.connected.store(false, Ordering::Relaxed);
                PublishFailure::Unavailable(format!(
                    "kafka metadata lookup of topic {topic} failed: {error}"
                ))
            })?;
        self.connected.store(true, Ordering::Relaxed);
        let Some(entry) = metadata.topics().iter().find(|entry| entry.name() == topic) else {
            return Ok(false);
        };
        match entry.error().map(RDKafkaErrorCode::from) {
            None => Ok(!entry.partitions().is_empty()),
            Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
                Ok(false)
            }
            // Exists but has no leader yet (just created, or electing one):
            // librdkafka holds the records until it has one.
            Some(RDKafkaErrorCode::LeaderNotAvailable) => Ok(true),
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => Err(PublishFailure::Rejected(
                format!("not authorized to write to kafka topic {topic}"),
            )),
            Some(RDKafkaErrorCode::InvalidTopic) => Err(PublishFailure::Rejected(format!(
                "invalid kafka topic name {topic:?}"
            ))),
            Some(code) => Err(PublishFailure::Unavailable(format!(
                "kafka metadata lookup of topic {topic} failed: {code}"
            ))),
        }
    }

    /// Create `topic` with the configured partitions and replicas; a topic
    /// created meanwhile by someone else counts as created.
    async fn create_topic(&self, topic: &str) -> Result<(), PublishFailure> {
        let admin = self.admin().map_err(|error| {
            PublishFailure::Unavailable(format!(
                "cannot create a kafka admin client to create topic {topic}: {error}"
            ))
        })?;
        let new_topic = NewTopic::new(
            topic,
            self.config.new_topic_partitions,
            TopicReplication::Fixed(self.config.new_topic_replication_factor),
        );
        let options = AdminOptions::new()
            .request_timeout(Some(self.config.metadata_timeout))
            .operation_timeout(Some(self.config.metadata_timeout));
        let results = admin
            .create_topics([&new_topic], &options)
            .await
            .map_err(|error| {
                PublishFailure::Unavailable(format!("cannot create kafka topic {topic}: {error}"))
            })?;
        for result in results {
            match result {
                Ok(_) => {
                    tracing::info!(
                        topic,
                        partitions = self.config.new_topic_partitions,
                        replication_factor = self.config.new_topic_replication_factor,
                        "created kafka topic"
                    );
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    let message = format!("cannot create kafka topic {topic}: {code}");
                    return Err(match code {
                        RDKafkaErrorCode::InvalidTopic
                        | RDKafkaErrorCode::TopicAuthorizationFailed
                        | RDKafkaErrorCode::PolicyViolation => PublishFailure::Rejected(message),
                        _ => PublishFailure::Unavailable(message),
                    });
                }
            }
        }
        Ok(())
    }
}

/// The failure of an event whose topic does not exist.
pub(super) fn missing_topic_failure(topic: &str) -> PublishFailure {
    PublishFailure::Rejected(format!("kafka topic {topic} does not exist"))
}

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(super) fn check_topic_name(topic: &str) -> Result<(), String> {
    let valid = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && has_name_characters_only(topic);
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid kafka topic name {topic:?} (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-')"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        assert!(check_topic_name("orders").is_ok());
        assert!(check_topic_name("orders.v1_x-y").is_ok());
        assert!(check_topic_name("").is_err());
        assert!(check_topic_name(".").is_err());
        assert!(check_topic_name("with space").is_err());
        assert!(check_topic_name(&"a".repeat(250)).is_err());
    }
}
