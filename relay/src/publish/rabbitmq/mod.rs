//! [`RabbitMqPublisher`]: publishes outbox events to RabbitMQ (AMQP 0-9-1)
//! as CloudEvents in binary content mode (`docs/wire-format.md`).
//!
//! One message per event: exchange = `topic`, routing key = `event_type`
//! (or the routing key configured for the topic), `mandatory`, persistent
//! (delivery mode 2), with properties `message_id` = `event_id`, `type` =
//! `event_type`, `content_type` = `application/json`, `timestamp` =
//! `created_at` (Unix seconds), and every CloudEvents attribute of
//! [`crate::publish::cloudevent`] in the headers table as
//! `cloudEvents:<name>`. W3C trace context in the `headers` column
//! (`traceparent`, `tracestate`) is also sent under its plain name.
//!
//! Publishing is pipelined on a channel in confirm mode: every message of a
//! batch is sent, then every confirm is awaited. An event counts as
//! published only on an Ack without a returned message. An unroutable
//! message (returned, since it is `mandatory`) or a Nack is
//! [`PublishFailure::Rejected`]. Returned messages are matched to their
//! event by `message_id`, not by the confirm they arrive with.
//!
//! Publishing to an exchange that does not exist makes RabbitMQ close the
//! channel (404), failing every message in flight on it. So an exchange is
//! checked with a passive declare on a throwaway channel before the first
//! publish to it; a missing exchange rejects its events without publishing.
//! Only exchanges found to exist are remembered: a missing one is looked up
//! again on the next publish that names it, so an event retried after the
//! exchange was declared is not rejected from memory.
//!
//! The connection is opened on the first publish and again on the first
//! publish after it was lost; every event of a publish that cannot connect
//! is [`PublishFailure::Unavailable`]. Concurrent publishes each use their
//! own channel from a small pool, so the confirms and returns of one batch
//! never mix with another's.
//!
//! The parts: `config` (settings), `connection` (the connection and its
//! channels, dropped when broken or stuck), `exchanges` (lookup),
//! `message` (the message and its headers), `send` (the batch's
//! send-and-confirm) and `failure` (what a channel error means).

mod config;
mod connection;
mod exchanges;
mod failure;
mod message;
mod send;

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

pub use config::RabbitMqPublisherConfig;

use crate::event::OutboundEvent;
use crate::publish::client_slot::ClientSlot;
use crate::publish::send_order::SendOrder;
use crate::publish::{Broker, PublishFailure};
use crate::tasks::Tasks;
use connection::Session;
use outbox::mask_password;
use send::OnChannel;

/// Publishes outbox events to RabbitMQ (see the module documentation).
pub struct RabbitMqPublisher {
    config: RabbitMqPublisherConfig,
    /// Display form of the URL, password masked.
    display_url: String,
    /// The connection, opened on demand and replaced once the broker
    /// closed it or it got stuck.
    slot: ClientSlot<Session>,
    /// Exchanges found to exist.
    exchanges: Mutex<HashSet<String>>,
    /// Sends whose confirms are still to come, per connection: a send on a
    /// new connection waits until those of the replaced one are settled.
    send_order: Arc<SendOrder>,
    /// Where a dropped connection is closed.
    tasks: Tasks,
}

impl std::fmt::Debug for RabbitMqPublisher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RabbitMqPublisher")
            .field("url", &self.display_url)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

impl RabbitMqPublisher {
    /// A publisher for `config`. Does not connect: the connection is opened
    /// by the first publish or by [`RabbitMqPublisher::connect`].
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidBrokerUrl`] for a URL that is not AMQP, and
    /// [`crate::error::Error::Config`] for a zero timeout or a routing key or
    /// exchange name longer than 255 bytes.
    pub fn new(config: RabbitMqPublisherConfig) -> Result<Self, crate::error::Error> {
        config.validate()?;
        Ok(Self {
            display_url: mask_password(&config.url),
            config,
            slot: ClientSlot::default(),
            exchanges: Mutex::new(HashSet::new()),
            send_order: SendOrder::new(),
            tasks: Tasks::new(),
        })
    }

    /// Run this publisher's background work (closing a dropped connection,
    /// connecting ahead of the first publish) on `tasks`, the relay's,
    /// rather than on a tracker of its own.
    pub fn with_tasks(mut self, tasks: Tasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// The tasks this publisher's background work runs on.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// The settings this publisher was created with.
    pub fn config(&self) -> &RabbitMqPublisherConfig {
        &self.config
    }

    /// Open the connection and one channel in confirm mode now (publishes
    /// open them on demand), each bounded by `connect_timeout`. The relay
    /// calls it as it starts, so that the first events after a start do
    /// not wait for the AMQP handshake.
    ///
    /// # Errors
    /// [`PublishFailure::Unavailable`] when the broker cannot be reached.
    pub async fn connect(&self) -> Result<(), PublishFailure> {
        let session = self.session().await?;
        let channel = self.take_channel(&session).await?;
        self.return_channel(&session, channel);
        Ok(())
    }
}

impl Broker for RabbitMqPublisher {
    type HandedOver = OnChannel;

    fn hand_over(&self, events: &[OutboundEvent]) -> impl Future<Output = OnChannel> + Send {
        self.hand_over_messages(events)
    }

    fn acknowledgements(
        &self,
        batch: OnChannel,
        events: &[OutboundEvent],
    ) -> impl Future<Output = Vec<Result<(), PublishFailure>>> + Send {
        self.await_confirms(batch, events)
    }

    /// When every message went out on a channel still healthy and no event
    /// failed so far: the next batch is sent on the same channel, behind
    /// this one.
    fn in_order_in_flight(&self, batch: &OnChannel) -> bool {
        batch.no_failure_yet()
    }

    fn is_connected(&self) -> bool {
        self.live_session().is_some()
    }

    /// A publish uses one channel, and a channel keeps publish order.
    fn keeps_order(&self) -> bool {
        true
    }

    fn recover(&self) -> BoxFuture<'_, Result<(), PublishFailure>> {
        Box::pin(async move {
            if let Some(session) = self.slot.current() {
                self.discard_session(&session, "every publish failed for a long while");
            }
            self.session().await.map(|_| ())
        })
    }

    fn client_rebuilds(&self) -> u64 {
        self.slot.rebuilds()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_a_bad_url() {
        let error = RabbitMqPublisher::new(RabbitMqPublisherConfig::new("http://nope"))
            .expect_err("bad scheme");
        assert!(error.to_string().contains("http://nope"), "{error}");
    }
}
