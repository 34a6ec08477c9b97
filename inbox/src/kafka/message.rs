//! [`ReceivedMessage`]: a Kafka message as the consumer keeps it, and
//! [`KafkaDelivery`], the message as the delivery policy sees it.

use rdkafka::message::{Headers, Message};

use super::dead_letter::DeadLetterProducer;
use super::offsets::TopicPartition;
use crate::error::{DecodeError, Error};
use crate::incoming::IncomingEvent;
use crate::policy::BrokerMessage;

/// The messages of one partition with one key: handled one after another.
pub(crate) type LaneKey = (String, i32, Option<Vec<u8>>);

/// A message copied out of librdkafka's buffer.
#[derive(Debug, Clone)]
pub(crate) struct ReceivedMessage {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
    /// The partition's generation in the offsets bookkeeping when it was
    /// received.
    pub(crate) generation: u64,
    /// Whether it was in a batch whose handler failed: it then runs on its
    /// own, never in a batch again.
    pub(crate) alone: bool,
}

impl ReceivedMessage {
    pub(crate) fn from_kafka(message: &impl Message) -> Self {
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|header| (header.key.to_owned(), header.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        ReceivedMessage {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            headers,
            generation: 0,
            alone: false,
        }
    }

    pub(crate) fn topic_partition(&self) -> TopicPartition {
        (self.topic.clone(), self.partition)
    }

    pub(crate) fn lane(&self) -> LaneKey {
        (self.topic.clone(), self.partition, self.key.clone())
    }

    pub(crate) fn source(&self) -> String {
        format!("{}/{}/{}", self.topic, self.partition, self.offset)
    }
}

/// A received message with the producer of its dead letter.
pub(crate) struct KafkaDelivery<'a> {
    pub(crate) message: &'a ReceivedMessage,
    pub(crate) dead_letters: &'a DeadLetterProducer,
}

impl BrokerMessage for KafkaDelivery<'_> {
    fn incoming(&self) -> Result<IncomingEvent, DecodeError> {
        let headers = self
            .message
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_deref()));
        IncomingEvent::from_kafka(headers, self.message.payload.as_deref().unwrap_or_default())
    }

    /// Kafka keeps no attempt count: a redelivered message starts over.
    fn previous_attempts(&self) -> u32 {
        0
    }

    async fn dead_letter(&self, reason: &str, _attempts: u32) -> Result<String, Error> {
        self.dead_letters.send(self.message, reason).await
    }
}
