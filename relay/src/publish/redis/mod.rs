//! [`RedisPublisher`]: publishes outbox events to Redis Streams, one
//! `XADD` per event, as CloudEvents with one field per attribute
//! (`docs/wire-format.md`).
//!
//! An event goes to the stream named by its `topic`, or by the
//! [`StreamKey`] template configured for the topic (`{topic}`,
//! `{aggregate_type}`, `{partition}`), and that stream is trimmed only when
//! configured ([`StreamTrim`]). A publish counts as done when Redis
//! answered the `XADD` with an entry id.
//!
//! A batch goes out as one pipeline on one multiplexed connection, in
//! order, so one aggregate's events are stored in order; the relay sends
//! the next batch's pipeline behind it before this one is answered. On a
//! cluster, a batch is one pipeline per stream, sent together, and the
//! next batch waits for their replies. A reply that is an error is a
//! rejection of its event, except Redis's "not now" errors (`OOM`,
//! `LOADING`, `MOVED`, ...), which leave it unavailable; a connection that
//! fails or does not answer within `response_timeout` fails every event
//! still unanswered on it as unavailable and is replaced.
//!
//! The connection is opened on the first publish and again on the first
//! publish after it failed; every event of a publish that cannot connect is
//! [`PublishFailure::Unavailable`].
//!
//! The parts: `config` (settings), `stream_key` (the stream of an event),
//! `entry` (its `XADD`), `connection` (the link to a server or a cluster),
//! `send` (the batch's pipeline and its replies) and `outcome` (what a
//! reply means).

mod config;
mod connection;
mod entry;
mod outcome;
mod send;

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;

pub use crate::publish::StreamKey;
pub use config::{RedisEndpoint, RedisPublisherConfig, RedisStream, StreamTrim};

use crate::event::OutboundEvent;
use crate::publish::client_slot::ClientSlot;
use crate::publish::send_order::SendOrder;
use crate::publish::{Broker, PublishFailure};
use connection::Session;
use send::Pipelined;

/// Publishes outbox events to Redis Streams (see the module
/// documentation).
///
/// ```no_run
/// use outbox_relay::publish::redis::{RedisEndpoint, RedisPublisher, RedisPublisherConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let publisher = RedisPublisher::new(RedisPublisherConfig::new(RedisEndpoint::Server(
///     "redis://127.0.0.1:6379".to_owned(),
/// )))?;
/// publisher.connect().await.map_err(|failure| failure.to_string())?;
/// # Ok(())
/// # }
/// ```
pub struct RedisPublisher {
    config: RedisPublisherConfig,
    /// The connection, opened on demand and replaced once it failed.
    slot: ClientSlot<Session>,
    /// Sends whose replies are still to come, per connection: a send on a
    /// new connection waits until those of the replaced one are settled.
    send_order: Arc<SendOrder>,
}

impl std::fmt::Debug for RedisPublisher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RedisPublisher")
            .field("endpoint", &self.config.endpoint)
            .field("connected", &Broker::is_connected(self))
            .finish_non_exhaustive()
    }
}

impl RedisPublisher {
    /// A publisher for `config`. Does not connect: the connection is opened
    /// by the first publish or by [`RedisPublisher::connect`].
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidBrokerUrl`] for a URL the client
    /// cannot read, and [`crate::error::Error::Config`] for a zero timeout,
    /// zero partitions or a zero trimming bound.
    pub fn new(config: RedisPublisherConfig) -> Result<Self, crate::error::Error> {
        config.validate()?;
        Ok(RedisPublisher {
            config,
            slot: ClientSlot::default(),
            send_order: SendOrder::new(),
        })
    }

    /// The settings this publisher was created with.
    pub fn config(&self) -> &RedisPublisherConfig {
        &self.config
    }

    /// Open the connection now and check that Redis answers (publishes
    /// open it on demand). The relay calls it as it starts.
    ///
    /// # Errors
    /// [`PublishFailure::Unavailable`] when Redis cannot be reached.
    pub async fn connect(&self) -> Result<(), PublishFailure> {
        self.session().await.map(drop)
    }

    /// The live connection, opened when there is none.
    async fn session(&self) -> Result<Arc<Session>, PublishFailure> {
        self.slot
            .get_or_open(|generation| async move {
                let session = connection::open(&self.config, generation).await?;
                tracing::info!(
                    endpoint = %self.config.endpoint.masked(),
                    generation,
                    "connected to redis"
                );
                Ok(session)
            })
            .await
    }

    /// Drop `session` (if it is still the current one): the next publish
    /// opens a new connection.
    fn discard_session(&self, session: &Arc<Session>, reason: &str) {
        session.mark_broken();
        if self.slot.take_if_current(session).is_some() {
            tracing::warn!(
                endpoint = %self.config.endpoint.masked(),
                generation = session.generation,
                reason,
                "dropping the redis connection; the next publish opens a new one"
            );
        }
    }
}

impl Broker for RedisPublisher {
    type HandedOver = Pipelined;

    fn hand_over(&self, events: &[OutboundEvent]) -> impl Future<Output = Pipelined> + Send {
        self.hand_over_entries(events)
    }

    fn acknowledgements(
        &self,
        handed: Pipelined,
        events: &[OutboundEvent],
    ) -> impl Future<Output = Vec<Result<(), PublishFailure>>> + Send {
        self.await_replies(handed, events)
    }

    /// On one server, when every pipeline was written and no event failed
    /// so far: the next batch's pipeline is written behind this one.
    fn in_order_in_flight(&self, handed: &Pipelined) -> bool {
        handed.in_order_in_flight()
    }

    fn is_connected(&self) -> bool {
        self.slot.live().is_some()
    }

    /// A pipeline keeps the order of its commands, and one aggregate's
    /// events of a batch go to one stream, so into one pipeline.
    fn keeps_order(&self) -> bool {
        true
    }

    fn recover(&self) -> BoxFuture<'_, Result<(), PublishFailure>> {
        Box::pin(async move {
            if let Some(session) = self.slot.current() {
                self.discard_session(&session, "every publish failed for a long while");
            }
            self.session().await.map(drop)
        })
    }

    fn client_rebuilds(&self) -> u64 {
        self.slot.rebuilds()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An `order.created` event of `aggregate_id` to the topic `orders`.
    pub(crate) fn order_event(aggregate_id: &str) -> OutboundEvent {
        OutboundEvent {
            id: 1,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".to_owned(),
            event_version: 1,
            source: "/orders".to_owned(),
            aggregate_type: "order".to_owned(),
            aggregate_id: aggregate_id.to_owned(),
            topic: "orders".to_owned(),
            payload: "{}".into(),
            headers: Default::default(),
            created_at: chrono::Utc::now(),
            attempts: 0,
            replay: false,
        }
    }

    #[test]
    fn rejects_a_bad_url_and_zero_settings() {
        let error = RedisPublisher::new(RedisPublisherConfig::new(RedisEndpoint::Server(
            "http://nope".to_owned(),
        )))
        .expect_err("bad scheme");
        assert!(error.to_string().contains("http://nope"), "{error}");

        let mut config =
            RedisPublisherConfig::new(RedisEndpoint::Server("redis://127.0.0.1".to_owned()));
        config
            .streams
            .insert("orders".to_owned(), RedisStream::default().partitions(0));
        let error = RedisPublisher::new(config).expect_err("zero partitions");
        assert!(error.to_string().contains("partitions"), "{error}");
    }
}
