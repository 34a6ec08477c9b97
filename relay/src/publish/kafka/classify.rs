//! What a failed send or delivery means for the event (rejected or the
//! broker unavailable) and for the publisher (a topic to look up again, a
//! lost connection, a producer to replace).

use std::sync::atomic::Ordering;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer;

use super::KafkaPublisher;
use super::topics::missing_topic_failure;
use crate::event::OutboundEvent;
use crate::publish::PublishFailure;

impl KafkaPublisher {
    /// Turn a send or delivery error into the event's failure, and keep the
    /// publisher's state in step with it.
    pub(super) fn classify(&self, error: &KafkaError, event: &OutboundEvent) -> PublishFailure {
        let topic = event.topic.as_str();
        let Some(code) = error.rdkafka_error_code() else {
            return PublishFailure::Unavailable(format!("kafka: {error}"));
        };
        match code {
            RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownTopicId => {
                self.forget_topic(topic);
                missing_topic_failure(topic)
            }
            RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::MessageBatchTooLarge => PublishFailure::Rejected(format!(
                "kafka message too large for topic {topic}: {} payload bytes, over the \
                 producer's message.max.bytes of {} or the topic's max.message.bytes: {code}",
                event.payload.len(),
                self.config.message_max_bytes()
            )),
            RDKafkaErrorCode::TopicAuthorizationFailed => {
                PublishFailure::Rejected(format!("not authorized to write to kafka topic {topic}"))
            }
            RDKafkaErrorCode::UnknownPartition
            | RDKafkaErrorCode::InvalidTopic
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidMessage
            | RDKafkaErrorCode::InvalidTimestamp
            | RDKafkaErrorCode::PolicyViolation
            | RDKafkaErrorCode::BadMessage => PublishFailure::Rejected(format!(
                "kafka rejected the message for topic {topic}: {code}"
            )),
            RDKafkaErrorCode::MessageTimedOut => {
                // librdkafka also times out records of a topic deleted since
                // it was looked up: look it up again before the next send.
                self.forget_topic(topic);
                self.connected.store(false, Ordering::Relaxed);
                PublishFailure::Unavailable(format!("kafka topic {topic}: {code}"))
            }
            RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure => {
                self.connected.store(false, Ordering::Relaxed);
                PublishFailure::Unavailable(format!("kafka topic {topic}: {code}"))
            }
            RDKafkaErrorCode::Fatal => {
                let detail = self
                    .producer()
                    .client()
                    .fatal_error()
                    .map(|(fatal_code, reason)| format!("{fatal_code}: {reason}"))
                    .unwrap_or_else(|| code.to_string());
                self.broken.store(true, Ordering::Relaxed);
                PublishFailure::Unavailable(format!(
                    "kafka producer fatal error {detail}; replacing the producer"
                ))
            }
            RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::OutOfOrderSequenceNumber
            | RDKafkaErrorCode::UnknownProducerId
            | RDKafkaErrorCode::InvalidProducerIdMapping
            | RDKafkaErrorCode::InvalidTransactionalState => {
                self.broken.store(true, Ordering::Relaxed);
                PublishFailure::Unavailable(format!(
                    "kafka topic {topic}: {code}; the producer's state is broken, \
                     replacing the producer"
                ))
            }
            _ => PublishFailure::Unavailable(format!("kafka topic {topic}: {code}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::Publisher;
    use crate::publish::kafka::KafkaPublisherConfig;
    use crate::publish::kafka::tests::order_event;

    #[tokio::test]
    async fn a_fenced_or_out_of_sequence_producer_is_replaced_after_the_batch() {
        let publisher =
            KafkaPublisher::new(KafkaPublisherConfig::new(vec!["127.0.0.1:9092".to_owned()]))
                .expect("publisher");
        let event = order_event();
        for code in [
            RDKafkaErrorCode::ProducerFenced,
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
            RDKafkaErrorCode::UnknownProducerId,
            RDKafkaErrorCode::InvalidProducerEpoch,
        ] {
            let before = publisher.client_rebuilds();
            let failure = publisher.classify(&KafkaError::MessageProduction(code), &event);
            match failure {
                PublishFailure::Unavailable(message) => {
                    assert!(message.contains(&format!("{code:?}")), "{message}")
                }
                other => panic!("{code:?} must be unavailable, not {other:?}"),
            }
            publisher.replace_broken_producer(&publisher.producer());
            assert_eq!(publisher.client_rebuilds(), before + 1, "{code:?}");
        }
        // A plain timeout leaves the producer alone.
        let _ = publisher.classify(
            &KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut),
            &event,
        );
        publisher.replace_broken_producer(&publisher.producer());
        assert_eq!(publisher.client_rebuilds(), 4);
    }
}
