//! [`RabbitMqConsumerConfig`]: the settings of a RabbitMQ inbox consumer.

use std::time::Duration;

use outbox::mask_password;

use crate::consumer::impl_retry_settings;
use crate::error::Error;
use crate::prune::PruneSettings;

/// Longest AMQP queue / exchange name.
pub(crate) const MAX_NAME_BYTES: usize = 255;

/// Settings of a [`RabbitMqInboxConsumer`](super::RabbitMqInboxConsumer).
#[derive(Clone, PartialEq, Eq)]
pub struct RabbitMqConsumerConfig {
    /// `amqp://user:pass@host:port/vhost`, or `amqps://` for TLS.
    pub url: String,
    /// The queue to consume. It must exist, bound to the relay's exchange.
    pub queue: String,
    /// Most messages in flight (AMQP `basic.qos` prefetch count), processed
    /// concurrently. At least 1. Default 32.
    pub prefetch: u16,
    /// Handler runs per message before it is dead-lettered. At least 1.
    /// Default 5.
    pub max_attempts: u32,
    /// Backoff before the first retry; doubled per attempt, with jitter.
    /// Also the first pause after a database outage or a lost connection.
    /// Default 1 s.
    pub retry_base_delay: Duration,
    /// Longest backoff. Default 30 s.
    pub retry_max_delay: Duration,
    /// Exchange that receives dead letters, which must exist; `None` to
    /// declare a durable fanout exchange `<queue>.dlx` bound to a durable
    /// queue `<queue>.dlq`. Default `None`.
    pub dead_letter_exchange: Option<String>,
    /// Pruning of the inbox while the consumer runs.
    pub prune: PruneSettings,
    /// Bound of connecting, of opening the topology, and of every publisher
    /// confirm. Default 10 s.
    pub connect_timeout: Duration,
}

impl_retry_settings!(RabbitMqConsumerConfig, "rabbitmq");

impl RabbitMqConsumerConfig {
    /// The default settings for consuming `queue` at `url`.
    pub fn new(url: impl Into<String>, queue: impl Into<String>) -> Self {
        RabbitMqConsumerConfig {
            url: url.into(),
            queue: queue.into(),
            prefetch: 32,
            max_attempts: 5,
            retry_base_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(30),
            dead_letter_exchange: None,
            prune: PruneSettings::default(),
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// The dead-letter exchange in use: the configured one or `<queue>.dlx`.
    pub fn dead_letter_exchange_name(&self) -> String {
        self.dead_letter_exchange
            .clone()
            .unwrap_or_else(|| format!("{}.dlx", self.queue))
    }

    /// The queue declared for dead letters when no exchange is configured:
    /// `<queue>.dlq`.
    pub fn default_dead_letter_queue_name(&self) -> String {
        format!("{}.dlq", self.queue)
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if let Err(reason) = self.url.parse::<lapin::uri::AMQPUri>() {
            return Err(Error::Config(format!(
                "bad rabbitmq url {}: {reason}",
                mask_password(&self.url)
            )));
        }
        if self.queue.trim().is_empty() {
            return Err(Error::Config("the rabbitmq queue name is empty".to_owned()));
        }
        let names = [
            ("queue", self.queue.clone()),
            ("dead-letter exchange", self.dead_letter_exchange_name()),
            ("dead-letter queue", self.default_dead_letter_queue_name()),
        ];
        for (what, name) in names {
            if name.len() > MAX_NAME_BYTES {
                return Err(Error::Config(format!(
                    "the rabbitmq {what} name is longer than {MAX_NAME_BYTES} bytes: {name:.40}..."
                )));
            }
        }
        if self
            .dead_letter_exchange
            .as_ref()
            .is_some_and(|exchange| exchange.is_empty())
        {
            return Err(Error::Config(
                "the dead-letter exchange cannot be the default exchange".to_owned(),
            ));
        }
        if self.prefetch == 0 {
            return Err(Error::Config(
                "the rabbitmq prefetch must be at least 1".to_owned(),
            ));
        }
        self.check_retry_schedule()?;
        if self.connect_timeout.is_zero() {
            return Err(Error::Config(
                "the rabbitmq connect_timeout must be more than zero".to_owned(),
            ));
        }
        Ok(())
    }
}

outbox::debug_masking_url!(RabbitMqConsumerConfig {
    queue,
    prefetch,
    max_attempts,
    retry_base_delay,
    retry_max_delay,
    dead_letter_exchange,
    prune,
    connect_timeout,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_the_settings() {
        let good = RabbitMqConsumerConfig::new("amqp://guest:secret@localhost:5672/%2f", "q");
        assert!(good.validate().is_ok());
        assert_eq!(good.dead_letter_exchange_name(), "q.dlx");
        assert!(!format!("{good:?}").contains("secret"));
        let bad_url = RabbitMqConsumerConfig::new("http://nope", "q");
        assert!(matches!(bad_url.validate(), Err(Error::Config(_))));
        let no_prefetch = RabbitMqConsumerConfig {
            prefetch: 0,
            ..good.clone()
        };
        assert!(matches!(no_prefetch.validate(), Err(Error::Config(_))));
        let no_attempts = RabbitMqConsumerConfig {
            max_attempts: 0,
            ..good.clone()
        };
        assert!(matches!(no_attempts.validate(), Err(Error::Config(_))));
        let long_queue = RabbitMqConsumerConfig::new("amqp://localhost", "q".repeat(252));
        assert!(matches!(long_queue.validate(), Err(Error::Config(_))));
    }
}
