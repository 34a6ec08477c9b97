//! [`RabbitMqPublisherConfig`]: the broker URL, the routing keys and the
//! timeouts of a [`RabbitMqPublisher`](super::RabbitMqPublisher).

use std::collections::BTreeMap;
use std::time::Duration;

use outbox::mask_password;

use crate::publish::RoutingKey;

/// Settings of a [`RabbitMqPublisher`](super::RabbitMqPublisher).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RabbitMqPublisherConfig {
    /// `amqp://user:pass@host:port/vhost`, or `amqps://` for TLS.
    pub url: String,
    /// Routing key per exchange (`topic`), replacing `default_routing_key`
    /// for every event of that exchange.
    pub routing_keys: BTreeMap<String, RoutingKey>,
    /// Routing key of exchanges without an entry in `routing_keys`. Default:
    /// the event type.
    pub default_routing_key: RoutingKey,
    /// How long sending a batch and receiving its confirms may take; an
    /// event not confirmed by then is
    /// [`PublishFailure::Unavailable`](crate::publish::PublishFailure::Unavailable).
    /// Default 30 s.
    pub confirm_timeout: Duration,
    /// Bound of opening the connection, a channel, or an exchange lookup.
    /// Default 10 s.
    pub connect_timeout: Duration,
}

impl RabbitMqPublisherConfig {
    /// The default settings for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            routing_keys: BTreeMap::new(),
            default_routing_key: RoutingKey::EventType,
            confirm_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// Checks the URL, the timeouts and the length of every exchange name
    /// and fixed routing key (AMQP short strings, at most 255 bytes).
    pub(super) fn validate(&self) -> Result<(), crate::error::Error> {
        if let Err(reason) = self.url.parse::<lapin::uri::AMQPUri>() {
            return Err(crate::error::Error::InvalidBrokerUrl {
                url: mask_password(&self.url),
                reason,
            });
        }
        if self.confirm_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(crate::error::Error::Config {
                path: "--config".to_owned(),
                reason:
                    "rabbitmq.confirm_timeout and rabbitmq.connect_timeout must be more than zero"
                        .to_owned(),
            });
        }
        let no_exchange = String::new();
        let fixed_keys = self
            .routing_keys
            .iter()
            .chain(std::iter::once((&no_exchange, &self.default_routing_key)));
        for (exchange, routing_key) in fixed_keys {
            let key_length = match routing_key {
                RoutingKey::EventType => 0,
                RoutingKey::Fixed(key) => key.len(),
            };
            if exchange.len() > 255 || key_length > 255 {
                return Err(crate::error::Error::Config {
                    path: "--config".to_owned(),
                    reason: format!(
                        "rabbitmq.routing_keys: {exchange:?} or its routing key is longer than 255 bytes"
                    ),
                });
            }
        }
        Ok(())
    }
}

outbox::debug_masking_url!(RabbitMqPublisherConfig {
    routing_keys,
    default_routing_key,
    confirm_timeout,
    connect_timeout,
});
