//! [`Delivery`]: what a handler sees of the message beside its event.

use crate::incoming::IncomingEvent;

/// The delivery a [`Handler`](crate::Handler) handles: the message's event
/// id, whether it is a replay, its trace context and which attempt this is.
///
/// A replayed event (`outbox-relay replay`) was published before; a
/// handler whose effects reach outside its transaction (an e-mail, a call
/// to another service) can leave those out for a replay:
///
/// ```
/// # use outbox_inbox::Delivery;
/// fn send_receipt_mail(delivery: &Delivery<'_>) -> bool {
///     !delivery.is_replay() && delivery.attempt() == 1
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    incoming: &'a IncomingEvent,
    attempt: u32,
}

impl<'a> Delivery<'a> {
    /// The delivery of `incoming`, at its `attempt`th attempt (1 for the
    /// first). The adapters make it; a test of a handler can too.
    pub fn new(incoming: &'a IncomingEvent, attempt: u32) -> Self {
        Delivery { incoming, attempt }
    }

    /// The CloudEvents `id`: the outbox's event id, the same on every
    /// publication of the event.
    pub fn event_id(&self) -> &'a str {
        &self.incoming.id
    }

    /// Whether the relay marked the message as a replay
    /// ([`IncomingEvent::is_replay`]).
    pub fn is_replay(&self) -> bool {
        self.incoming.is_replay()
    }

    /// The W3C `traceparent` the message carries, if any.
    pub fn traceparent(&self) -> Option<&'a str> {
        self.incoming.traceparent()
    }

    /// Which attempt at handling the message this is: 1 for the first,
    /// counting the attempts of earlier deliveries the broker reported.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The whole message: every CloudEvents attribute and the payload.
    pub fn incoming(&self) -> &'a IncomingEvent {
        self.incoming
    }
}
