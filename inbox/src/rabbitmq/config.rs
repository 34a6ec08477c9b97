//! [`RabbitMqConsumerConfig`]: the settings of a RabbitMQ inbox consumer.

use std::time::Duration;

use outbox::mask_password;

use crate::consumer::{impl_batch_settings, impl_retry_settings};
use crate::error::Error;
use crate::prune::PruneSettings;

/// Longest AMQP queue / exchange name.
pub(crate) const MAX_NAME_BYTES: usize = 255;

/// Settings of a [`RabbitMqInboxConsumer`](super::RabbitMqInboxConsumer).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RabbitMqConsumerConfig {
    /// `amqp://user:pass@host:port/vhost`, or `amqps://` for TLS.
    pub url: String,
    /// The queue to consume. It must exist, bound to the relay's exchange,
    /// unless `bindings` asks the consumer to declare it.
    pub queue: String,
    /// Exchanges the consumer binds its queue to before it consumes,
    /// declaring the queue (durable) and each exchange (durable, topic: what
    /// the relay publishes to) when they are missing, as
    /// [`RabbitMqConsumerConfig::bind`] adds them. Empty (the default): the
    /// queue must exist already, and the consumer declares nothing but its
    /// dead-letter objects.
    pub bindings: Vec<QueueBinding>,
    /// Most messages in flight (AMQP `basic.qos` prefetch count), processed
    /// concurrently. At least 1, and at least `batch_size`. Default 32.
    pub prefetch: u16,
    /// Deliveries handled in one inbox transaction: their event ids are
    /// recorded with one statement, the handler runs for the new ones
    /// ([`Handler::handle_batch`](crate::Handler::handle_batch)), one
    /// commit, then every delivery of the batch is acked. 1 (the default):
    /// a transaction per delivery. A handler failure rolls the batch back
    /// and its deliveries run again one at a time (`docs/inbox.md`,
    /// "Batches"). Set `prefetch` to twice this or more, so the next batch
    /// fills while one commits.
    pub batch_size: usize,
    /// Longest a batch waits to fill once its first delivery arrived; a
    /// delivery waits at most this before its transaction starts.
    /// Default 20 ms.
    pub batch_wait: Duration,
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
impl_batch_settings!(RabbitMqConsumerConfig, "rabbitmq", prefetch, "prefetch");

impl RabbitMqConsumerConfig {
    /// The default settings for consuming `queue` at `url`.
    pub fn new(url: impl Into<String>, queue: impl Into<String>) -> Self {
        RabbitMqConsumerConfig {
            url: url.into(),
            queue: queue.into(),
            bindings: Vec::new(),
            prefetch: 32,
            batch_size: 1,
            batch_wait: Duration::from_millis(20),
            max_attempts: 5,
            retry_base_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(30),
            dead_letter_exchange: None,
            prune: PruneSettings::default(),
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// Declare the queue and bind it to `exchange` (a relay topic) with
    /// `routing_key` (the relay's default routing key is the event type)
    /// before consuming; see [`RabbitMqConsumerConfig::bindings`].
    ///
    /// ```
    /// use outbox_inbox::rabbitmq::RabbitMqConsumerConfig;
    ///
    /// let config = RabbitMqConsumerConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f", "billing.orders")
    ///     .bind("orders", "order.created");
    /// assert_eq!(config.bindings[0].exchange, "orders");
    /// ```
    #[must_use]
    pub fn bind(mut self, exchange: impl Into<String>, routing_key: impl Into<String>) -> Self {
        self.bindings.push(QueueBinding {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
        });
        self
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
        let bound = self.bindings.iter().flat_map(|binding| {
            [
                ("binding exchange", binding.exchange.clone()),
                ("binding routing key", binding.routing_key.clone()),
            ]
        });
        for (what, name) in names.into_iter().chain(bound) {
            if name.len() > MAX_NAME_BYTES {
                return Err(Error::Config(format!(
                    "the rabbitmq {what} name is longer than {MAX_NAME_BYTES} bytes: {name:.40}..."
                )));
            }
        }
        if self
            .bindings
            .iter()
            .any(|binding| binding.exchange.is_empty())
        {
            return Err(Error::Config(
                "a binding's exchange cannot be the default exchange, which routes by queue name"
                    .to_owned(),
            ));
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
        self.check_batch_settings()?;
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
    bindings,
    prefetch,
    batch_size,
    batch_wait,
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
        let no_batch = good.clone().batch(0, Duration::ZERO);
        assert!(matches!(no_batch.validate(), Err(Error::Config(_))));
        let unfillable = good.clone().batch(64, Duration::ZERO);
        assert!(
            matches!(unfillable.validate(), Err(Error::Config(message)) if message.contains("prefetch 32")),
        );
        let batched = RabbitMqConsumerConfig {
            prefetch: 1024,
            ..good.clone().batch(512, Duration::from_millis(5))
        };
        assert!(batched.validate().is_ok());
        let long_queue = RabbitMqConsumerConfig::new("amqp://localhost", "q".repeat(252));
        assert!(matches!(long_queue.validate(), Err(Error::Config(_))));
    }
}

/// One binding of the consumer's queue: messages of `exchange` whose
/// routing key matches `routing_key` (a topic pattern: `order.*`, `#`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueBinding {
    /// The exchange: a relay topic.
    pub exchange: String,
    /// The binding key.
    pub routing_key: String,
}
