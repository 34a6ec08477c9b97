//! Holding back the later events of an aggregate whose earlier event failed
//! before it reached the broker, within one publish.

use std::collections::HashSet;

use super::PublishFailure;
use crate::event::OutboundEvent;

/// The aggregates of one publish that had an event fail before it was sent
/// (an invalid event, an unknown topic, a record the client refused). Their
/// later events in the same publish are not sent, so that a publisher can
/// keep each aggregate's order within one call
/// ([`Publisher::keeps_order`](super::Publisher::keeps_order)).
#[derive(Default)]
pub(crate) struct AggregateHolds<'a> {
    failed: HashSet<(&'a str, &'a str)>,
}

impl<'a> AggregateHolds<'a> {
    /// `event` failed: hold the later events of its aggregate.
    pub(crate) fn note_failure(&mut self, event: &'a OutboundEvent) {
        self.failed
            .insert((&event.aggregate_type, &event.aggregate_id));
    }

    /// The outcome of `event` when an earlier event of its aggregate failed
    /// in this publish; `None` when it may be sent.
    pub(crate) fn held(&self, event: &OutboundEvent) -> Option<PublishFailure> {
        self.failed
            .contains(&(event.aggregate_type.as_str(), event.aggregate_id.as_str()))
            .then(|| {
                PublishFailure::Held(
                    "an earlier event of its aggregate failed in the same publish".to_owned(),
                )
            })
    }
}

/// What a publisher made of each event before sending: its message, or its
/// outcome when it was settled already (it failed to become a message, or
/// an earlier event of its aggregate did).
#[cfg(any(feature = "redis", feature = "nats"))]
pub(crate) struct Prepared<T> {
    /// The message of each event still to send, in order.
    pub(crate) messages: Vec<Option<T>>,
    /// The outcome of each event already settled, in order.
    pub(crate) outcomes: Vec<Option<Result<(), PublishFailure>>>,
}

#[cfg(any(feature = "redis", feature = "nats"))]
impl<T> Prepared<T> {
    /// Turn each of `events` into its message with `prepare`, in order; an
    /// event that fails holds its aggregate's later events.
    pub(crate) fn each<'a>(
        events: &'a [OutboundEvent],
        mut prepare: impl FnMut(&'a OutboundEvent) -> Result<T, PublishFailure>,
    ) -> Self {
        let mut holds = AggregateHolds::default();
        let mut prepared = Prepared {
            messages: Vec::with_capacity(events.len()),
            outcomes: Vec::with_capacity(events.len()),
        };
        for event in events {
            let outcome = match holds.held(event) {
                Some(held) => Err(held),
                None => match prepare(event) {
                    Ok(message) => {
                        prepared.messages.push(Some(message));
                        prepared.outcomes.push(None);
                        continue;
                    }
                    Err(failure) => {
                        holds.note_failure(event);
                        Err(failure)
                    }
                },
            };
            prepared.messages.push(None);
            prepared.outcomes.push(Some(outcome));
        }
        prepared
    }
}
