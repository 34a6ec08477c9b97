//! The connection of a [`RabbitMqPublisher`] and its pool of channels in
//! confirm mode: opened on demand, and dropped when the broker closed it
//! or it is stuck, so that the next publish opens a new one.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lapin::options::ConfirmSelectOptions;
use lapin::types::ShortString;
use lapin::{Channel, Connection, ConnectionProperties};

use super::RabbitMqPublisher;
use crate::publish::PublishFailure;
use crate::publish::client_slot::SlotClient;

/// How long closing a broken channel may take before it is abandoned.
const CHANNEL_CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Idle channels kept open for later publishes.
const MAX_IDLE_CHANNELS: usize = 8;

/// One open connection and its idle channels in confirm mode.
pub(super) struct Session {
    pub(super) connection: Connection,
    /// Which connection of the publisher this is, counting from 1.
    pub(super) generation: u64,
    idle_channels: Mutex<Vec<Channel>>,
}

impl SlotClient for Session {
    fn is_live(&self) -> bool {
        self.connection.status().connected()
    }
}

impl RabbitMqPublisher {
    /// The current session, if its connection is open.
    pub(super) fn live_session(&self) -> Option<Arc<Session>> {
        self.slot.live()
    }

    /// The open session, connecting when there is none.
    pub(super) async fn session(&self) -> Result<Arc<Session>, PublishFailure> {
        self.slot
            .get_or_open(|generation| async move {
                let connection = self.open_connection().await?;
                if generation > 1 {
                    tracing::info!(url = %self.display_url, generation, "reconnected to rabbitmq");
                } else {
                    tracing::info!(url = %self.display_url, "connected to rabbitmq");
                }
                Ok(Session {
                    connection,
                    generation,
                    idle_channels: Mutex::new(Vec::new()),
                })
            })
            .await
    }

    /// A new connection to the broker, bounded by `connect_timeout`.
    async fn open_connection(&self) -> Result<Connection, PublishFailure> {
        let properties =
            ConnectionProperties::default().with_connection_name("outbox-relay".into());
        let connected = tokio::time::timeout(
            self.config.connect_timeout,
            Connection::connect(&self.config.url, properties),
        )
        .await;
        match connected {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(error)) => {
                tracing::warn!(url = %self.display_url, %error, "cannot connect to rabbitmq");
                Err(PublishFailure::Unavailable(format!(
                    "cannot connect to rabbitmq at {}: {error}",
                    self.display_url
                )))
            }
            Err(_elapsed) => {
                tracing::warn!(url = %self.display_url, timeout_ms = self.config.connect_timeout.as_millis(), "rabbitmq connection timed out");
                Err(PublishFailure::Unavailable(format!(
                    "cannot connect to rabbitmq at {}: no connection within {} ms",
                    self.display_url,
                    self.config.connect_timeout.as_millis()
                )))
            }
        }
    }

    /// Drop `session` if it is still the current one, so that the next
    /// publish opens a new connection; it is closed in the background.
    pub(super) fn discard_session(&self, session: &Arc<Session>, reason: &str) {
        let Some(discarded) = self.slot.take_if_current(session) else {
            return;
        };
        tracing::warn!(url = %self.display_url, reason, "dropping the rabbitmq connection; the next publish opens a new one");
        self.tasks.spawn(async move {
            let closing = discarded.connection.close(200, ShortString::from("OK"));
            if let Ok(Err(error)) = tokio::time::timeout(CHANNEL_CLOSE_TIMEOUT, closing).await {
                tracing::debug!(%error, "closing a dropped rabbitmq connection failed");
            }
        });
    }

    /// An idle channel of `session` in confirm mode, or a new one.
    pub(super) async fn take_channel(&self, session: &Session) -> Result<Channel, PublishFailure> {
        loop {
            let idle = session
                .idle_channels
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match idle {
                Some(channel) if channel.status().connected() => return Ok(channel),
                Some(_closed) => continue,
                None => break,
            }
        }
        let opened = tokio::time::timeout(self.config.connect_timeout, async {
            let channel = session.connection.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            Ok::<Channel, lapin::Error>(channel)
        })
        .await;
        match opened {
            Ok(Ok(channel)) => Ok(channel),
            Ok(Err(error)) => Err(PublishFailure::Unavailable(format!(
                "cannot open a rabbitmq channel: {error}"
            ))),
            Err(_elapsed) => Err(PublishFailure::Unavailable(format!(
                "cannot open a rabbitmq channel: no answer within {} ms",
                self.config.connect_timeout.as_millis()
            ))),
        }
    }

    /// Keep a still open channel for a later publish, up to
    /// [`MAX_IDLE_CHANNELS`].
    pub(super) fn return_channel(&self, session: &Session, channel: Channel) {
        let mut idle = session
            .idle_channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if channel.status().connected() && idle.len() < MAX_IDLE_CHANNELS {
            idle.push(channel);
        }
    }
}

/// Close a channel that will not be used again, giving up after
/// [`CHANNEL_CLOSE_TIMEOUT`].
pub(super) async fn close_channel(channel: &Channel) {
    if channel.status().connected() {
        let closing = channel.close(200, ShortString::from("OK"));
        if let Ok(Err(error)) = tokio::time::timeout(CHANNEL_CLOSE_TIMEOUT, closing).await {
            tracing::debug!(%error, "closing a rabbitmq channel failed");
        }
    }
}
