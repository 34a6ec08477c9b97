//! [`NatsPublisher`]: publishes outbox events to NATS JetStream, one
//! message per event, after the CloudEvents NATS binding in binary content
//! mode: one `ce-<attribute>` header per attribute (`docs/wire-format.md`).
//!
//! An event goes to the subject named by its `topic`, or by the
//! [`SubjectTemplate`] configured for the topic (`{topic}`,
//! `{event_type}`, `{aggregate_type}`, `{aggregate_id}`); a JetStream stream
//! must take that subject. A publish counts as done when the stream
//! acknowledged it; an acknowledgement marked duplicate (the event id was
//! stored within the stream's duplicate window, `Nats-Msg-Id`) counts too.
//!
//! Publishes are pipelined on one client, in order, so one aggregate's
//! events are stored in order, and the relay hands the next batch over
//! before this one is acknowledged. No stream for the subject ("no
//! responders") and a stream that refuses the message (its limits with
//! `discard: new`, a message too large) reject the event. A client whose
//! connection was lost, or that did not acknowledge within `ack_timeout`,
//! fails every event still unacknowledged on it as unavailable and is
//! replaced: a client never reconnects by itself (`connection`).
//!
//! The parts: `config` (settings), `connection` (one client per
//! generation), `message` (an event's subject and headers), `send` (the
//! batch's publishes and their acknowledgements) and `outcome` (what an
//! answer means).

mod config;
mod connection;
mod message;
mod outcome;
mod send;

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;

pub use crate::publish::SubjectTemplate;
pub use config::{NatsCredentials, NatsPublisherConfig};

use crate::event::OutboundEvent;
use crate::publish::client_slot::ClientSlot;
use crate::publish::send_order::SendOrder;
use crate::publish::{Broker, PublishFailure};
use connection::Session;
use send::HandedOver;

/// Publishes outbox events to NATS JetStream (see the module
/// documentation).
///
/// ```no_run
/// use outbox_relay::publish::nats::{NatsPublisher, NatsPublisherConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let publisher =
///     NatsPublisher::new(NatsPublisherConfig::new(vec!["nats://127.0.0.1:4222".to_owned()]))?;
/// publisher.connect().await.map_err(|failure| failure.to_string())?;
/// # Ok(())
/// # }
/// ```
pub struct NatsPublisher {
    config: NatsPublisherConfig,
    /// The client, opened on demand and replaced once it failed.
    slot: ClientSlot<Session>,
    /// Sends whose acknowledgements are still to come, per client: a send
    /// on a new client waits until those of the replaced one are settled.
    send_order: Arc<SendOrder>,
}

impl std::fmt::Debug for NatsPublisher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("NatsPublisher")
            .field("servers", &self.config.servers)
            .field("connected", &Broker::is_connected(self))
            .finish_non_exhaustive()
    }
}

impl NatsPublisher {
    /// A publisher for `config`. Does not connect: the client is opened by
    /// the first publish or by [`NatsPublisher::connect`].
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidBrokerUrl`] for a server URL the
    /// client cannot read, and [`crate::error::Error::Config`] for a zero
    /// timeout or a `.creds` file that cannot be read.
    pub fn new(config: NatsPublisherConfig) -> Result<Self, crate::error::Error> {
        config.validate()?;
        Ok(NatsPublisher {
            config,
            slot: ClientSlot::default(),
            send_order: SendOrder::new(),
        })
    }

    /// The settings this publisher was created with.
    pub fn config(&self) -> &NatsPublisherConfig {
        &self.config
    }

    /// Open the client now (publishes open it on demand). The relay calls
    /// it as it starts.
    ///
    /// # Errors
    /// [`PublishFailure::Unavailable`] when NATS cannot be reached or
    /// refuses the login.
    pub async fn connect(&self) -> Result<(), PublishFailure> {
        self.session().await.map(drop)
    }

    /// The live client, opened when there is none.
    async fn session(&self) -> Result<Arc<Session>, PublishFailure> {
        self.slot
            .get_or_open(|generation| async move {
                let session = connection::open(&self.config, generation).await?;
                tracing::info!(
                    servers = %self.config.servers_text(),
                    generation,
                    "connected to nats"
                );
                Ok(session)
            })
            .await
    }

    /// Drop `session` (if it is still the current one): the next publish
    /// opens a new client.
    fn discard_session(&self, session: &Arc<Session>, reason: &str) {
        session.mark_broken();
        if self.slot.take_if_current(session).is_some() {
            tracing::warn!(
                servers = %self.config.servers_text(),
                generation = session.generation,
                reason,
                "dropping the nats client; the next publish opens a new one"
            );
        }
    }
}

impl Broker for NatsPublisher {
    type HandedOver = HandedOver;

    fn hand_over(&self, events: &[OutboundEvent]) -> impl Future<Output = HandedOver> + Send {
        self.hand_over_messages(events)
    }

    fn acknowledgements(
        &self,
        handed: HandedOver,
        events: &[OutboundEvent],
    ) -> impl Future<Output = Vec<Result<(), PublishFailure>>> + Send {
        self.await_acknowledgements(handed, events)
    }

    /// When every message was handed over and no event failed so far: the
    /// next batch's messages are written behind these on the same
    /// connection, and a client never writes on another.
    fn in_order_in_flight(&self, handed: &HandedOver) -> bool {
        handed.in_order_in_flight()
    }

    fn is_connected(&self) -> bool {
        self.slot.live().is_some()
    }

    /// One client writes the messages in the order they were handed over.
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
mod tests {
    use super::*;

    #[test]
    fn rejects_a_bad_url_and_zero_settings() {
        let error = NatsPublisher::new(NatsPublisherConfig::new(Vec::new())).expect_err("none");
        assert!(error.to_string().contains("no servers"), "{error}");
        let mut config = NatsPublisherConfig::new(vec!["nats://127.0.0.1:4222".to_owned()]);
        config.ack_timeout = std::time::Duration::ZERO;
        let error = NatsPublisher::new(config).expect_err("zero ack_timeout");
        assert!(error.to_string().contains("ack_timeout"), "{error}");
        let mut config = NatsPublisherConfig::new(vec!["nats://127.0.0.1:4222".to_owned()]);
        config.credentials = NatsCredentials::CredsFile("/nonexistent/relay.creds".into());
        let error = NatsPublisher::new(config).expect_err("no creds file");
        assert!(
            error
                .to_string()
                .contains("nats.creds_file: cannot read /nonexistent/relay.creds"),
            "{error}"
        );
        let mut config = NatsPublisherConfig::new(vec!["tls://127.0.0.1:4222".to_owned()]);
        config.tls_ca_file = Some("/nonexistent/ca.pem".into());
        let error = NatsPublisher::new(config).expect_err("no CA file");
        assert!(
            error
                .to_string()
                .contains("nats.tls_ca_file: cannot read /nonexistent/ca.pem"),
            "{error}"
        );
    }
}
