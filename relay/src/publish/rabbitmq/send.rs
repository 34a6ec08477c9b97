//! The publish of one batch on a channel in confirm mode, the two halves of
//! the publisher's [`Broker`](crate::publish::Broker): every message is
//! sent ([`RabbitMqPublisher::hand_over_messages`]), then every confirm
//! awaited ([`RabbitMqPublisher::await_confirms`]), all under one
//! deadline. The two halves are separate so the relay can send the next
//! batch, on the same channel and so behind this one, while this one's
//! confirms are awaited. An event counts as published only on an Ack
//! without a returned message; returned messages are matched to their
//! event by `message_id`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use lapin::{Channel, Confirmation, PublisherConfirm};
use outbox::broker::rabbitmq::{ConfirmFailure, MANDATORY, Returned, read_confirmation};
use tokio::time::Instant;

use super::RabbitMqPublisher;
use super::connection::{Session, close_channel};
use super::message::Message;
use crate::event::OutboundEvent;
use crate::publish::broker::settled;
use crate::publish::send_order::UnsettledSend;
use crate::publish::{AggregateHolds, PublishFailure};

/// What a publish left of its channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelState {
    /// Usable again.
    Healthy,
    /// Closed or in a bad state: close it, keep the connection.
    Broken,
    /// A send or confirm timed out: the connection itself may be stuck.
    Stuck,
}

/// The state of one event of a batch as it moves through the publish.
enum Slot {
    /// Not sent; this is its outcome.
    Done(Result<(), PublishFailure>),
    /// Ready to be sent.
    Ready(Box<Message>),
}

/// A batch on its channel: each event's outcome once it is known, the
/// confirms still awaited, and what the publish has left of the channel.
pub struct OnChannel {
    outcomes: Vec<Option<Result<(), PublishFailure>>>,
    confirms: Vec<(usize, PublisherConfirm)>,
    channel_state: ChannelState,
    /// One bound for sending and confirming: a send can block too, when
    /// the socket stops draining (a dead peer, a blocked connection).
    deadline: Instant,
    /// The channel the messages went out on, and its session; none when
    /// nothing was sent.
    channel: Option<(Arc<Session>, Channel)>,
    /// Settled when the batch is dropped, after its confirms were awaited:
    /// until then, no send goes out on a newer connection.
    _unsettled: Option<UnsettledSend>,
}

impl OnChannel {
    /// A batch none of whose messages was sent: these are its outcomes.
    fn unsent(outcomes: Vec<Result<(), PublishFailure>>) -> Self {
        OnChannel {
            outcomes: outcomes.into_iter().map(Some).collect(),
            confirms: Vec::new(),
            channel_state: ChannelState::Healthy,
            deadline: Instant::now(),
            channel: None,
            _unsettled: None,
        }
    }

    /// Whether every message was sent on a channel that is still healthy
    /// and no event has failed so far: a later batch sent on the same
    /// channel is stored after this one.
    pub(super) fn no_failure_yet(&self) -> bool {
        self.channel_state == ChannelState::Healthy
            && !self
                .outcomes
                .iter()
                .any(|outcome| matches!(outcome, Some(Err(_))))
    }
}

/// Returned (unroutable) messages by `message_id`.
type ReturnedById = HashMap<String, Returned>;

impl RabbitMqPublisher {
    /// Send the message of every event on one channel, in order, keeping
    /// their confirms. A channel still healthy afterwards goes back to the
    /// pool at once, so the next batch is sent on it, behind this one.
    pub(super) async fn hand_over_messages(&self, events: &[OutboundEvent]) -> OnChannel {
        let mut slots: Vec<Slot> = events
            .iter()
            .map(|event| match self.prepare(event) {
                Ok(message) => Slot::Ready(Box::new(message)),
                Err(failure) => Slot::Done(Err(failure)),
            })
            .collect();
        if !slots.iter().any(|slot| matches!(slot, Slot::Ready(_))) {
            return OnChannel::unsent(finish(slots));
        }

        let session = match self.session().await {
            Ok(session) => session,
            Err(failure) => return OnChannel::unsent(fail_ready(slots, &failure)),
        };
        // Messages still unconfirmed on a replaced connection may be lost:
        // nothing goes out on this one before they are settled.
        let unsettled = match self.send_order.enter(session.generation, "rabbitmq") {
            Ok(unsettled) => unsettled,
            Err(failure) => return OnChannel::unsent(fail_ready(slots, &failure)),
        };

        let exchanges: HashSet<&str> = events
            .iter()
            .zip(&slots)
            .filter(|(_, slot)| matches!(slot, Slot::Ready(_)))
            .map(|(event, _)| event.topic.as_str())
            .collect();
        let exchange_failures = self.resolve_exchanges(&session, exchanges).await;
        // One channel keeps publish order; an event that fails before it is
        // sent holds its aggregate's later ones.
        let mut holds = AggregateHolds::default();
        for (slot, event) in slots.iter_mut().zip(events) {
            if let Some(held) = holds.held(event) {
                *slot = Slot::Done(Err(held));
                continue;
            }
            if let (Slot::Ready(_), Some(failure)) = (&slot, exchange_failures.get(&event.topic)) {
                *slot = Slot::Done(Err(failure.clone()));
            }
            if matches!(slot, Slot::Done(Err(_))) {
                holds.note_failure(event);
            }
        }
        if !slots.iter().any(|slot| matches!(slot, Slot::Ready(_))) {
            return OnChannel::unsent(finish(slots));
        }

        let channel = match self.take_channel(&session).await {
            Ok(channel) => channel,
            Err(failure) => return OnChannel::unsent(fail_ready(slots, &failure)),
        };
        let mut batch = OnChannel {
            outcomes: Vec::with_capacity(events.len()),
            confirms: Vec::new(),
            channel_state: ChannelState::Healthy,
            deadline: Instant::now() + self.config.confirm_timeout,
            channel: None,
            _unsettled: Some(unsettled),
        };
        self.send_messages(&channel, &mut batch, events, slots)
            .await;
        if batch.channel_state == ChannelState::Healthy {
            self.return_channel(&session, channel.clone());
        }
        batch.channel = Some((session, channel));
        batch
    }

    /// Await the confirm of every message of `batch` (sent from `events`),
    /// then deal with what the publish left of the channel: close a broken
    /// one, drop a stuck connection. Returns one outcome per event, in
    /// order.
    pub(super) async fn await_confirms(
        &self,
        mut batch: OnChannel,
        events: &[OutboundEvent],
    ) -> Vec<Result<(), PublishFailure>> {
        let returned = self.await_each_confirm(&mut batch, events).await;
        if !returned.is_empty() {
            self.reject_returned(&mut batch, events, &returned);
        }
        if let Some((session, channel)) = &batch.channel {
            match batch.channel_state {
                ChannelState::Healthy => {}
                ChannelState::Broken => close_channel(channel).await,
                ChannelState::Stuck => {
                    // A connection that took no message or gave no confirm
                    // in time (blocked by the broker, or its peer gone
                    // silent) may never recover: the next publish opens a
                    // new one.
                    let blocked = session.connection.status().blocked();
                    self.discard_session(
                        session,
                        if blocked {
                            "the broker blocked the connection and it did not unblock within confirm_timeout"
                        } else {
                            "no message was taken or confirmed within confirm_timeout"
                        },
                    );
                }
            }
        }
        settled(batch.outcomes, "rabbitmq")
    }

    /// Send the message of every ready slot, in order, and keep its confirm.
    ///
    /// Every publish is started before any is awaited: lapin queues a
    /// message's frames and takes its delivery tag when its publish is
    /// first polled, so starting them in order sends them in order, and the
    /// I/O thread takes the whole batch in one hand-over instead of one per
    /// message. A channel that fails fails every message queued after the
    /// one it failed on, so no later message of an aggregate gets out ahead
    /// of an earlier one.
    async fn send_messages(
        &self,
        channel: &Channel,
        batch: &mut OnChannel,
        events: &[OutboundEvent],
        slots: Vec<Slot>,
    ) {
        let mut sending = FuturesOrdered::new();
        for (index, (slot, event)) in slots.into_iter().zip(events).enumerate() {
            match slot {
                Slot::Done(outcome) => batch.outcomes.push(Some(outcome)),
                Slot::Ready(message) => {
                    batch.outcomes.push(None);
                    let publish = channel.basic_publish(
                        message.exchange,
                        message.routing_key,
                        MANDATORY,
                        event.payload.as_bytes(),
                        message.properties,
                    );
                    sending.push_back(async move { (index, publish.await) });
                }
            }
        }
        loop {
            let (index, sent) = match tokio::time::timeout_at(batch.deadline, sending.next()).await
            {
                Ok(Some(next)) => next,
                Ok(None) => break,
                Err(_elapsed) => {
                    batch.channel_state = ChannelState::Stuck;
                    let failure = PublishFailure::Unavailable(format!(
                        "rabbitmq did not take the message within {} ms",
                        self.config.confirm_timeout.as_millis()
                    ));
                    for outcome in batch
                        .outcomes
                        .iter_mut()
                        .filter(|outcome| outcome.is_none())
                    {
                        *outcome = Some(Err(failure.clone()));
                    }
                    // The confirms of messages taken so far are awaited
                    // still: they may be published.
                    return;
                }
            };
            match sent {
                Ok(confirm) if batch.channel_state == ChannelState::Healthy => {
                    batch.confirms.push((index, confirm));
                }
                Ok(_confirm) => {
                    // Taken after an earlier message of the batch failed:
                    // not counted as published, so its aggregate stays in
                    // order; a duplicate at worst.
                    batch.outcomes[index] = Some(Err(PublishFailure::Unavailable(
                        "rabbitmq channel failed before the message was confirmed".to_owned(),
                    )));
                }
                Err(error) => {
                    batch.channel_state = ChannelState::Broken;
                    batch.outcomes[index] = Some(Err(self.channel_failure(&error, &events[index])));
                }
            }
        }
    }

    /// Await the confirm of every sent message and set its outcome; returns
    /// the messages the broker returned as unroutable.
    async fn await_each_confirm(
        &self,
        batch: &mut OnChannel,
        events: &[OutboundEvent],
    ) -> ReturnedById {
        let mut returned = ReturnedById::new();
        for (index, confirm) in std::mem::take(&mut batch.confirms) {
            let event = &events[index];
            let outcome = match tokio::time::timeout_at(batch.deadline, confirm).await {
                Ok(Ok(confirmation)) => {
                    let outcome = self.confirmation_outcome(confirmation, event, &mut returned);
                    if outcome == Err(ConfirmFailure::NotInConfirmMode) {
                        batch.channel_state = ChannelState::Broken;
                    }
                    outcome.map_err(PublishFailure::from)
                }
                Ok(Err(error)) => {
                    batch.channel_state = ChannelState::Broken;
                    Err(self.channel_failure(&error, event))
                }
                Err(_elapsed) => {
                    batch.channel_state = ChannelState::Stuck;
                    Err(PublishFailure::from(ConfirmFailure::NoConfirm {
                        timeout: self.config.confirm_timeout,
                    }))
                }
            };
            batch.outcomes[index] = Some(outcome);
        }
        returned
    }

    /// The outcome a confirmation gives its event: an Ack is published, a
    /// Nack rejected. A returned message is added to `returned`.
    fn confirmation_outcome(
        &self,
        confirmation: Confirmation,
        event: &OutboundEvent,
        returned: &mut ReturnedById,
    ) -> Result<(), ConfirmFailure> {
        let (outcome, returned_message) =
            read_confirmation(confirmation, &event.topic, self.routing_key(event));
        if let Some(message) = returned_message {
            returned.insert(message.message_id.clone(), message);
        }
        outcome
    }

    /// Turn the acknowledged events whose message came back unroutable
    /// into rejections.
    fn reject_returned(
        &self,
        batch: &mut OnChannel,
        events: &[OutboundEvent],
        returned: &ReturnedById,
    ) {
        for (outcome, event) in batch.outcomes.iter_mut().zip(events) {
            if !matches!(outcome, Some(Ok(()))) {
                continue;
            }
            if let Some(message) = returned.get(&event.event_id.to_string()) {
                let failure = message.unroutable(&event.topic, self.routing_key(event));
                *outcome = Some(Err(failure.into()));
            }
        }
    }
}

/// The outcomes of a batch none of whose messages was sent.
fn finish(slots: Vec<Slot>) -> Vec<Result<(), PublishFailure>> {
    slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Done(outcome) => outcome,
            Slot::Ready(_) => Err(PublishFailure::Unavailable(
                "rabbitmq message was not sent".to_owned(),
            )),
        })
        .collect()
}

/// The outcomes of a batch that stopped before sending: every ready
/// message fails with `failure`.
fn fail_ready(slots: Vec<Slot>, failure: &PublishFailure) -> Vec<Result<(), PublishFailure>> {
    slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Done(outcome) => outcome,
            Slot::Ready(_) => Err(failure.clone()),
        })
        .collect()
}
