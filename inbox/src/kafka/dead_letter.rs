//! [`DeadLetterProducer`]: sends the messages the delivery policy gives up
//! on to their dead-letter topic, and creates that topic when missing.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::config::KafkaConsumerConfig;
use super::logging::LogContext;
use super::message::ReceivedMessage;
use crate::error::Error;

pub use crate::consumer::{
    DEAD_LETTER_REASON as DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE as DEAD_LETTER_SOURCE_HEADER,
};

/// Bound of one dead-letter topic creation.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the producer may queue a dead letter before it is a failure.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Produces dead letters, creating their topics when missing.
pub(crate) struct DeadLetterProducer {
    producer: FutureProducer<LogContext>,
    admin: AdminClient<LogContext>,
    config: KafkaConsumerConfig,
    /// Topics known to exist.
    existing: Mutex<HashSet<String>>,
}

impl DeadLetterProducer {
    /// The producer and admin client of `config`.
    ///
    /// # Errors
    /// [`Error::Kafka`] when librdkafka rejects the configuration.
    pub(crate) fn new(config: &KafkaConsumerConfig) -> Result<Self, Error> {
        let producer: FutureProducer<LogContext> = config
            .producer_config()
            .create_with_context(LogContext)
            .map_err(Error::kafka)?;
        let admin: AdminClient<LogContext> = config
            .admin_config()
            .create_with_context(LogContext)
            .map_err(Error::kafka)?;
        Ok(DeadLetterProducer {
            producer,
            admin,
            config: config.clone(),
            existing: Mutex::new(HashSet::new()),
        })
    }

    /// Create `topic` unless it is known to exist.
    pub(crate) async fn ensure_topic(&self, topic: &str) -> Result<(), Error> {
        if self
            .existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(topic)
        {
            return Ok(());
        }
        let new_topic = NewTopic::new(
            topic,
            self.config.dead_letter_partitions,
            TopicReplication::Fixed(self.config.dead_letter_replication_factor),
        );
        let options = AdminOptions::new()
            .request_timeout(Some(ADMIN_TIMEOUT))
            .operation_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .admin
            .create_topics([&new_topic], &options)
            .await
            .map_err(Error::kafka)?;
        for result in results {
            match result {
                Ok(_) => tracing::info!(topic, "created the dead-letter topic"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(Error::kafka(KafkaError::AdminOp(code)));
                }
            }
        }
        self.existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.to_owned());
        Ok(())
    }

    /// Produce `message` with the dead-letter headers and wait for the
    /// broker's acknowledgement; returns the dead-letter topic.
    pub(crate) async fn send(
        &self,
        message: &ReceivedMessage,
        reason: &str,
    ) -> Result<String, Error> {
        let topic = self.config.dead_letter_topic_for(&message.topic);
        if self.config.create_dead_letter_topics
            && let Err(error) = self.ensure_topic(&topic).await
        {
            // Perhaps it exists and only creating is not allowed: try anyway.
            tracing::warn!(topic = %topic, %error, "cannot create the dead-letter topic");
        }
        let mut headers = OwnedHeaders::new_with_capacity(message.headers.len() + 2);
        for (name, value) in &message.headers {
            headers = headers.insert(Header {
                key: name.as_str(),
                value: value.as_deref(),
            });
        }
        let source = message.source();
        headers = headers
            .insert(Header {
                key: DEAD_LETTER_REASON_HEADER,
                value: Some(reason),
            })
            .insert(Header {
                key: DEAD_LETTER_SOURCE_HEADER,
                value: Some(source.as_str()),
            });
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic).headers(headers);
        if let Some(key) = &message.key {
            record = record.key(key.as_slice());
        }
        if let Some(payload) = &message.payload {
            record = record.payload(payload.as_slice());
        }
        self.producer
            .send(record, SEND_TIMEOUT)
            .await
            .map_err(|(error, _)| Error::kafka(error))?;
        Ok(topic)
    }
}
