//! Publishing to brokers: the [`Publisher`] trait and its implementations,
//! the brokers through [`Broker`].

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::event::OutboundEvent;

mod broker;
#[cfg(any(feature = "rabbitmq", feature = "redis", feature = "nats"))]
mod client_slot;
pub mod cloudevent;
mod hold;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "redis")]
pub mod redis;
mod routing_key;
#[cfg(any(
    feature = "kafka",
    feature = "rabbitmq",
    feature = "redis",
    feature = "nats"
))]
mod send_order;
pub mod stdout;
mod stream_key;
mod subject;
#[cfg(any(all(feature = "redis", feature = "tls"), feature = "nats"))]
mod tls_provider;

pub use broker::Broker;
pub(crate) use hold::AggregateHolds;
#[cfg(any(feature = "redis", feature = "nats"))]
pub(crate) use hold::Prepared;
#[cfg(feature = "kafka")]
pub use kafka::{KafkaPublisher, KafkaPublisherConfig};
#[cfg(feature = "nats")]
pub use nats::{NatsPublisher, NatsPublisherConfig};
#[cfg(feature = "rabbitmq")]
pub use rabbitmq::{RabbitMqPublisher, RabbitMqPublisherConfig};
#[cfg(feature = "redis")]
pub use redis::{RedisPublisher, RedisPublisherConfig};
pub use routing_key::RoutingKey;
pub use stdout::StdoutPublisher;
pub use stream_key::StreamKey;
pub use subject::SubjectTemplate;

/// Why one event was not published.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishFailure {
    /// The broker could not be reached or did not answer in time (connection
    /// lost, timeout, broker shutting down). Says nothing about the event
    /// itself: it does not count as an attempt, and the relay backs off as a
    /// whole.
    Unavailable(String),
    /// The broker refused this event (too large, unroutable, nacked, unknown
    /// exchange or topic). Counts as a failed attempt of the event.
    Rejected(String),
    /// Not sent: an earlier event of the same aggregate in the same publish
    /// failed before this one was handed to the broker. Not an attempt; the
    /// event goes out after that earlier one, in order.
    Held(String),
}

impl PublishFailure {
    /// The error text, as stored in `last_error`.
    pub fn message(&self) -> &str {
        match self {
            PublishFailure::Unavailable(message)
            | PublishFailure::Rejected(message)
            | PublishFailure::Held(message) => message,
        }
    }
}

impl std::fmt::Display for PublishFailure {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PublishFailure::Unavailable(message) => {
                write!(formatter, "broker unavailable: {message}")
            }
            PublishFailure::Rejected(message) => {
                write!(formatter, "rejected by the broker: {message}")
            }
            PublishFailure::Held(message) => write!(formatter, "held back: {message}"),
        }
    }
}

/// The acknowledgements of events already handed to the broker client:
/// one outcome per event, in the order they were given.
pub type PendingAcknowledgements = BoxFuture<'static, Vec<Result<(), PublishFailure>>>;

/// Events handed to the broker client, their acknowledgements still to
/// come (see [`Publisher::send`]).
pub struct SentEvents {
    /// Resolves to one outcome per event, as [`Publisher::publish`] does.
    pub acknowledgements: PendingAcknowledgements,
    /// Whether every event was handed to the broker client, in order, with
    /// no failure known yet: events sent after them are then stored after
    /// them, so the caller may send more before awaiting
    /// [`SentEvents::acknowledgements`]. False when some event already
    /// failed, or when the acknowledgements were awaited before returning.
    pub in_order_in_flight: bool,
}

impl SentEvents {
    /// Outcomes already known: nothing is left in flight.
    pub fn settled(outcomes: Vec<Result<(), PublishFailure>>) -> Self {
        SentEvents {
            acknowledgements: Box::pin(std::future::ready(outcomes)),
            in_order_in_flight: false,
        }
    }
}

impl std::fmt::Debug for SentEvents {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SentEvents")
            .field("in_order_in_flight", &self.in_order_in_flight)
            .finish_non_exhaustive()
    }
}

/// A client that publishes outbox events.
///
/// A broker client implements [`Broker`], its hand-over and its
/// acknowledgements, and is a `Publisher` through it: it sends the whole
/// slice before awaiting any acknowledgement (pipelined), then awaits every
/// one, and a publish counts as done only when the broker acknowledged it.
/// A publisher without acknowledgements of its own to wait for (stdout, a
/// test double) implements [`Publisher::publish`] instead.
pub trait Publisher: Send + Sync {
    /// Publish `events` and return one outcome per event, in the same order.
    ///
    /// Never returns before every event's outcome is known or its deadline
    /// has passed; an event whose acknowledgement did not arrive in time is
    /// [`PublishFailure::Unavailable`]. Must not panic on any broker
    /// behaviour.
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>>;

    /// Hand `events` to the broker client in order and return once each is
    /// handed over (or failed), with their acknowledgements still to come.
    ///
    /// This lets the relay send the next batch while the broker confirms
    /// this one. An implementation that returns
    /// [`SentEvents::in_order_in_flight`] true promises that events given
    /// to a later `send` on the same publisher are stored after these ones
    /// (one Kafka producer, one AMQP channel), and that a client failure
    /// that loses these events also fails the later ones. When the client
    /// is rebuilt (a new connection, a new producer), a send on the new
    /// one while a send on the old one is still unsettled must not be
    /// handed over: its events are [`PublishFailure::Unavailable`]
    /// (`docs/guarantees.md`, "A loss in flight").
    ///
    /// The default publishes the whole slice with [`Publisher::publish`]
    /// and returns its outcomes, settled. A [`Broker`] returns once its
    /// events are handed over ([`Broker::hand_over`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use outbox_relay::publish::{Publisher, StdoutPublisher};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let publisher: Arc<dyn Publisher> = Arc::new(StdoutPublisher::with_writer(Vec::new()));
    /// let sent = Arc::clone(&publisher).send(Vec::new()).await;
    /// assert!(sent.acknowledgements.await.is_empty());
    /// # });
    /// ```
    fn send(self: Arc<Self>, events: Vec<OutboundEvent>) -> BoxFuture<'static, SentEvents>
    where
        Self: 'static,
    {
        Box::pin(async move { SentEvents::settled(self.publish(&events).await) })
    }

    /// Whether the client currently holds a live broker connection (for
    /// readiness reporting).
    fn is_connected(&self) -> bool;

    /// Whether one [`Publisher::publish`] call keeps each aggregate's order:
    /// the broker stores the events of one aggregate in the order of the
    /// slice, and an event whose earlier event of the same aggregate failed
    /// before it was sent is not sent at all ([`PublishFailure::Held`]).
    ///
    /// When true, the relay sends a whole batch in one call, whatever the
    /// number of events per aggregate. When false (the default), it sends
    /// one event per aggregate per call and awaits its acknowledgement
    /// before the next (waves), which costs a broker round trip per event
    /// of the batch's busiest aggregate.
    fn keeps_order(&self) -> bool {
        false
    }

    /// Throw the client's broker state away (producer, connection,
    /// channels), build it anew and check that the broker answers. The
    /// relay calls it when every publish has failed for a long while, in
    /// case the client is stuck in a state it cannot leave by itself.
    /// The default does nothing and succeeds.
    fn recover(&self) -> BoxFuture<'_, Result<(), PublishFailure>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// How many times the broker client was rebuilt because its state was
    /// broken (a fatal or fenced Kafka producer, a RabbitMQ connection
    /// closed by the broker or stuck), since the publisher was created.
    fn client_rebuilds(&self) -> u64 {
        0
    }
}

/// Whether `name` is made of ASCII letters, digits, `.`, `_` and `-` only:
/// the characters of a Kafka topic name, and those the relay accepts in a
/// broker's host name.
pub(crate) fn has_name_characters_only(name: &str) -> bool {
    name.bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
}
