//! [`NatsMessage`]: a JetStream message as the consumer keeps it;
//! [`NatsDelivery`], the message as the delivery policy sees it; and the
//! acknowledgements the [`Session`] sends once the policy settled it.

use std::sync::Arc;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind};
use outbox::wire;

use super::session::Session;
use crate::consumer::{DEAD_LETTER_REASON, DEAD_LETTER_SOURCE, LaneBroker, LaneMessage};
use crate::error::{DecodeError, Error};
use crate::incoming::IncomingEvent;
use crate::policy::{BrokerMessage, Settlement};

/// The messages of one aggregate: handled one after another, in stream
/// order. A message without `ce-partitionkey` is in the lane of such
/// messages.
pub(crate) type LaneKey = Option<Arc<str>>;

/// One message pulled through the durable consumer.
#[derive(Clone)]
pub(crate) struct NatsMessage {
    pub(crate) message: jetstream::Message,
    /// Its sequence in the stream: its identity while in flight.
    pub(crate) sequence: u64,
    /// Times the server delivered it, this delivery included.
    pub(crate) delivered: u32,
    /// Its `ce-partitionkey`, read once: the aggregate of its lane.
    pub(crate) aggregate: Option<Arc<str>>,
    /// Whether it was in a batch whose handler failed: it then runs on its
    /// own, never in a batch again.
    pub(crate) alone: bool,
}

impl std::fmt::Debug for NatsMessage {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("NatsMessage")
            .field("subject", &self.message.subject)
            .field("sequence", &self.sequence)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

impl NatsMessage {
    /// The message as pulled; `None` for one without JetStream metadata
    /// (not a JetStream delivery).
    pub(crate) fn new(message: jetstream::Message) -> Option<Self> {
        let (sequence, delivered) = {
            let info = message.info().ok()?;
            (
                info.stream_sequence,
                u32::try_from(info.delivered.max(1)).unwrap_or(u32::MAX),
            )
        };
        let partition_key = wire::nats_header_name(wire::PARTITION_KEY_ATTRIBUTE);
        let aggregate = message.headers.as_ref().and_then(|headers| {
            headers
                .iter()
                .find(|(name, _)| {
                    let name: &str = name.as_ref();
                    name.eq_ignore_ascii_case(&partition_key)
                })
                .and_then(|(_, values)| values.first())
                .map(|value| Arc::from(value.as_str()))
        });
        Some(NatsMessage {
            message,
            sequence,
            delivered,
            aggregate,
            alone: false,
        })
    }

    /// `<stream>/<sequence>`: where a dead letter came from.
    pub(crate) fn source(&self, stream: &str) -> String {
        format!("{stream}/{}", self.sequence)
    }
}

impl LaneMessage for NatsMessage {
    type Lane = LaneKey;

    fn lane(&self) -> LaneKey {
        self.aggregate.clone()
    }

    fn runs_alone(&self) -> bool {
        self.alone
    }

    fn run_alone(&mut self) {
        self.alone = true;
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "inbox_message",
            subject = %self.message.subject,
            stream_sequence = self.sequence,
            deliveries = self.delivered,
            event_id = tracing::field::Empty,
        )
    }
}

/// A message with the session of its dead letter.
pub(crate) struct NatsDelivery<'a> {
    message: &'a NatsMessage,
    session: &'a Session,
}

impl BrokerMessage for NatsDelivery<'_> {
    fn incoming(&self) -> Result<IncomingEvent, DecodeError> {
        let headers = self.message.message.headers.as_ref();
        IncomingEvent::from_nats(
            headers.into_iter().flat_map(|headers| {
                headers.iter().flat_map(|(name, values)| {
                    values
                        .iter()
                        .map(move |value| (name.as_ref(), value.as_str()))
                })
            }),
            &self.message.message.payload,
        )
    }

    /// Every earlier delivery of the message counts as one failed attempt:
    /// it ended without an acknowledgement (its consumer died, or lost its
    /// connection), so a message that kills its consumer is dead-lettered
    /// after `max_attempts` deliveries rather than redelivered for ever.
    fn previous_attempts(&self) -> u32 {
        self.message.delivered.saturating_sub(1)
    }

    async fn dead_letter(&self, reason: &str, _attempts: u32) -> Result<String, Error> {
        self.session.dead_letter(self.message, reason).await
    }
}

impl LaneBroker<NatsMessage> for Session {
    type Delivery<'a> = NatsDelivery<'a>;

    fn delivery<'a>(&'a self, message: &'a NatsMessage) -> NatsDelivery<'a> {
        NatsDelivery {
            message,
            session: self,
        }
    }

    /// Acknowledge the finished messages, only now that their inbox
    /// transaction committed or their duplicate was recognised; `TERM`
    /// the dead-lettered ones, only now that their dead letter is stored;
    /// `NAK` with a delay those given up (the consumer stops). A batch's
    /// acknowledgements are sent together and each confirmation awaited:
    /// one after the other, a batch of 512 took 512 round trips.
    async fn settled(&self, settled: &[(Arc<NatsMessage>, Settlement)]) {
        let acknowledgements = settled.iter().map(|(message, settlement)| {
            let kind = match settlement {
                Settlement::Processed | Settlement::Duplicate => AckKind::Ack,
                Settlement::DeadLettered => AckKind::Term,
                Settlement::Released | Settlement::RunAlone => {
                    AckKind::Nak(Some(self.config.retry_base_delay))
                }
            };
            self.acknowledge(message, kind)
        });
        futures::future::join_all(acknowledgements).await;
    }
}

/// The headers of the dead letter of `message`: all of its own, plus the
/// reason and the source.
pub(crate) fn dead_letter_headers(message: &NatsMessage, stream: &str, reason: &str) -> HeaderMap {
    let mut headers = message.message.headers.clone().unwrap_or_default();
    // The dead letter is a message of its own to JetStream: the original's
    // id would make the dead-letter stream drop it as a duplicate of an
    // earlier dead letter of the same event.
    headers.insert(
        wire::NATS_MSG_ID_HEADER,
        format!("{}{}", message.source(stream), "/dead-letter").as_str(),
    );
    headers.insert(
        DEAD_LETTER_REASON,
        wire::percent_encode_header_value(reason).as_str(),
    );
    headers.insert(DEAD_LETTER_SOURCE, message.source(stream).as_str());
    headers
}
