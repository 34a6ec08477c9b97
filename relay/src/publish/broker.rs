//! [`Broker`]: a broker client written as its two halves, handing events
//! over and awaiting their acknowledgements. Every broker is a
//! [`Publisher`], whose [`Publisher::publish`] and [`Publisher::send`] are
//! written here once, on top of the halves.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::{PendingAcknowledgements, PublishFailure, Publisher, SentEvents};
use crate::event::OutboundEvent;

/// A broker client that hands events over without waiting, then awaits
/// their acknowledgements: the Kafka and RabbitMQ publishers.
///
/// A publish counts as done only when the broker acknowledged it: a Kafka
/// delivery report, a RabbitMQ publisher confirm (Ack, not returned). Every
/// `Broker` is a [`Publisher`]: [`Publisher::publish`] hands the slice over
/// and awaits its acknowledgements, and [`Publisher::send`] returns once it
/// is handed over, the acknowledgements still to come. The other methods
/// are the [`Publisher`]'s, which a broker always states, and the
/// `Publisher` answers with them. Call them through [`Publisher`]: where
/// both traits are imported, a call on a broker type is ambiguous.
pub trait Broker: Send + Sync {
    /// The events of one hand-over on their way to the broker: what
    /// [`Broker::acknowledgements`] awaits.
    type HandedOver: Send + 'static;

    /// Hand `events` to the broker client in order, without waiting for
    /// any acknowledgement (pipelined). An event that fails before it is
    /// handed over holds its aggregate's later events of the slice
    /// ([`PublishFailure::Held`]); with [`Broker::keeps_order`] the broker
    /// stores the others of one aggregate in the order of the slice.
    fn hand_over(&self, events: &[OutboundEvent]) -> impl Future<Output = Self::HandedOver> + Send;

    /// Await the acknowledgements of `handed`, handed over from `events`,
    /// and return one outcome per event, in the order of `events`.
    ///
    /// Never returns before every event's outcome is known or its deadline
    /// has passed; an event whose acknowledgement did not arrive in time is
    /// [`PublishFailure::Unavailable`]. Must not panic on any broker
    /// behaviour.
    fn acknowledgements(
        &self,
        handed: Self::HandedOver,
        events: &[OutboundEvent],
    ) -> impl Future<Output = Vec<Result<(), PublishFailure>>> + Send;

    /// Whether the events of `handed` are in order in flight
    /// ([`SentEvents::in_order_in_flight`]): all handed over, in order, with
    /// no failure known yet, on a client that stores a later hand-over's
    /// events after them.
    fn in_order_in_flight(&self, handed: &Self::HandedOver) -> bool;

    /// See [`Publisher::is_connected`].
    fn is_connected(&self) -> bool;

    /// See [`Publisher::keeps_order`].
    fn keeps_order(&self) -> bool;

    /// See [`Publisher::recover`].
    fn recover(&self) -> BoxFuture<'_, Result<(), PublishFailure>>;

    /// See [`Publisher::client_rebuilds`].
    fn client_rebuilds(&self) -> u64;
}

impl<B: Broker> Publisher for B {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(async move {
            let handed = self.hand_over(events).await;
            self.acknowledgements(handed, events).await
        })
    }

    fn send(self: Arc<Self>, events: Vec<OutboundEvent>) -> BoxFuture<'static, SentEvents>
    where
        Self: 'static,
    {
        Box::pin(async move {
            let handed = self.hand_over(&events).await;
            let in_order_in_flight = self.in_order_in_flight(&handed);
            let acknowledgements: PendingAcknowledgements =
                Box::pin(async move { self.acknowledgements(handed, &events).await });
            SentEvents {
                acknowledgements,
                in_order_in_flight,
            }
        })
    }

    fn is_connected(&self) -> bool {
        Broker::is_connected(self)
    }

    fn keeps_order(&self) -> bool {
        Broker::keeps_order(self)
    }

    fn recover(&self) -> BoxFuture<'_, Result<(), PublishFailure>> {
        Broker::recover(self)
    }

    fn client_rebuilds(&self) -> u64 {
        Broker::client_rebuilds(self)
    }
}

/// The outcome of each event of a hand-over once its acknowledgements were
/// awaited: one still without an outcome is unavailable.
#[cfg(any(
    feature = "kafka",
    feature = "rabbitmq",
    feature = "redis",
    feature = "nats"
))]
pub(crate) fn settled(
    outcomes: Vec<Option<Result<(), PublishFailure>>>,
    broker: &str,
) -> Vec<Result<(), PublishFailure>> {
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or_else(|| {
                Err(PublishFailure::Unavailable(format!(
                    "{broker} publish ended without an outcome"
                )))
            })
        })
        .collect()
}
