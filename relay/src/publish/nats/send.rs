//! The publish of one batch, the two halves of the publisher's
//! [`Broker`](crate::publish::Broker): every message is handed to the
//! client in order ([`NatsPublisher::hand_over_messages`]), then the
//! stream's acknowledgements are awaited
//! ([`NatsPublisher::await_acknowledgements`]).
//!
//! One client writes its messages to its one connection in the order they
//! were handed over, and the server stores the messages of one connection
//! in that order: the relay may hand the next batch over before this one
//! is acknowledged. A client never writes on a second connection
//! (`connection.rs`), so what is lost with a connection is never overtaken
//! by what was handed over after it.

use std::sync::Arc;

use async_nats::jetstream::context::PublishAckFuture;
use tokio::time::Instant;

use super::NatsPublisher;
use super::connection::Session;
use super::message::{Message, message};
use super::outcome::{Failure, publish_failure};
use crate::event::OutboundEvent;
use crate::publish::broker::settled;
use crate::publish::send_order::UnsettledSend;
use crate::publish::{AggregateHolds, Prepared, PublishFailure};

/// One message on its way: its event (by index in the batch), its subject
/// and its acknowledgement.
struct Pending {
    index: usize,
    subject: String,
    acknowledgement: PublishAckFuture,
}

/// A batch handed to the client: each event's outcome once known, the
/// acknowledgements still to come, and the client they were sent on.
pub struct HandedOver {
    outcomes: Vec<Option<Result<(), PublishFailure>>>,
    pending: Vec<Pending>,
    session: Option<Arc<Session>>,
    deadline: Instant,
    /// Whether every message was handed over and no event has failed so
    /// far.
    in_order: bool,
    /// Settled when the batch is dropped, after its acknowledgements were
    /// awaited: until then, no send goes out on a newer client.
    _unsettled: Option<UnsettledSend>,
}

impl HandedOver {
    fn unsent(outcomes: Vec<Option<Result<(), PublishFailure>>>) -> Self {
        HandedOver {
            outcomes,
            pending: Vec::new(),
            session: None,
            deadline: Instant::now(),
            in_order: false,
            _unsettled: None,
        }
    }

    /// Whether a later batch handed to the same client is stored after
    /// this one: every message handed over, no failure known.
    pub(super) fn in_order_in_flight(&self) -> bool {
        self.in_order
            && !self
                .outcomes
                .iter()
                .any(|outcome| matches!(outcome, Some(Err(_))))
    }
}

impl NatsPublisher {
    /// Build the message of every event, and hand them to the client in
    /// order, without waiting for their acknowledgements.
    pub(super) async fn hand_over_messages(&self, events: &[OutboundEvent]) -> HandedOver {
        let Prepared { messages, outcomes } =
            Prepared::each(events, |event| message(event, &self.config));
        if outcomes.iter().all(Option::is_some) {
            return HandedOver::unsent(outcomes);
        }

        let fail_ready = |outcomes: Vec<Option<Result<(), PublishFailure>>>,
                          failure: &PublishFailure| {
            outcomes
                .into_iter()
                .map(|outcome| Some(outcome.unwrap_or_else(|| Err(failure.clone()))))
                .collect()
        };
        let session = match self.session().await {
            Ok(session) => session,
            Err(failure) => return HandedOver::unsent(fail_ready(outcomes, &failure)),
        };
        // Messages still unacknowledged on a replaced client may be lost:
        // nothing goes out on this one before they are settled.
        let unsettled = match self.send_order.enter(session.generation, "nats") {
            Ok(unsettled) => unsettled,
            Err(failure) => return HandedOver::unsent(fail_ready(outcomes, &failure)),
        };

        let mut batch = HandedOver {
            outcomes,
            pending: Vec::with_capacity(messages.len()),
            session: Some(Arc::clone(&session)),
            deadline: Instant::now() + self.config.ack_timeout,
            in_order: true,
            _unsettled: Some(unsettled),
        };
        // The aggregates whose message failed as it was handed over: their
        // later messages stay unsent. (Those that failed before are held
        // already: they have no message.)
        let mut send_holds = AggregateHolds::default();
        let mut broken = None;
        for (index, message) in messages.into_iter().enumerate() {
            let Some(Message { subject, publish }) = message else {
                continue;
            };
            let event = &events[index];
            if let Some(held) = send_holds.held(event) {
                batch.outcomes[index] = Some(Err(held));
                continue;
            }
            let sent = tokio::time::timeout_at(
                batch.deadline,
                session.jetstream.send_publish(subject.clone(), publish),
            )
            .await;
            let failure = match sent {
                Ok(Ok(acknowledgement)) => {
                    batch.pending.push(Pending {
                        index,
                        subject,
                        acknowledgement,
                    });
                    continue;
                }
                Ok(Err(error)) => publish_failure(&error, &subject),
                Err(_elapsed) => Failure::Client(PublishFailure::Unavailable(format!(
                    "the NATS client did not take the message to subject `{subject}` within \
                     ack_timeout"
                ))),
            };
            let failure = match failure {
                Failure::Event(failure) => failure,
                Failure::Client(failure) => {
                    broken.get_or_insert("a publish could not be handed to the client");
                    failure
                }
            };
            send_holds.note_failure(event);
            batch.outcomes[index] = Some(Err(failure));
        }
        if let Some(reason) = broken {
            self.discard_session(&session, reason);
        }
        batch
    }

    /// Await the acknowledgements of `batch` (handed over from `events`)
    /// and return one outcome per event, in order. A client that lost its
    /// connection or did not acknowledge in time is replaced on the next
    /// send.
    pub(super) async fn await_acknowledgements(
        &self,
        mut batch: HandedOver,
        _events: &[OutboundEvent],
    ) -> Vec<Result<(), PublishFailure>> {
        let pending = std::mem::take(&mut batch.pending);
        let mut broken = None;
        for Pending {
            index,
            subject,
            acknowledgement,
        } in pending
        {
            let answered = tokio::time::timeout_at(batch.deadline, acknowledgement).await;
            let failure = match answered {
                // A duplicate was stored before (the same event id within
                // the stream's duplicate window): published.
                Ok(Ok(_ack)) => {
                    batch.outcomes[index] = Some(Ok(()));
                    continue;
                }
                Ok(Err(error)) => publish_failure(&error, &subject),
                Err(_elapsed) => Failure::Client(PublishFailure::Unavailable(format!(
                    "no JetStream acknowledgement of the message to subject `{subject}` within \
                     {} ms",
                    self.config.ack_timeout.as_millis()
                ))),
            };
            batch.outcomes[index] = Some(Err(match failure {
                Failure::Event(failure) => failure,
                Failure::Client(failure) => {
                    broken.get_or_insert("a publish was not acknowledged on the client");
                    failure
                }
            }));
        }
        if let (Some(reason), Some(session)) = (broken, &batch.session) {
            self.discard_session(session, reason);
        }
        settled(std::mem::take(&mut batch.outcomes), "nats")
    }
}
