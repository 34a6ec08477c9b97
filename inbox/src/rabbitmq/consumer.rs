//! [`RabbitMqInboxConsumer`]: consumes one queue session after session,
//! reconnecting with backoff when a connection is lost.

use std::sync::Arc;

use outbox::mask_password;
use tokio_util::sync::CancellationToken;

use super::config::RabbitMqConsumerConfig;
use super::dead_letter::DeadLetterExchange;
use super::session::{Batching, Session, SessionEnd, consume, declare_topology, open_session};
use crate::backend::InboxBackend;
use crate::consumer::BackgroundPruning;
use crate::consumer::log_consumer_stopped;
use crate::error::Error;
use crate::handler::Handler;
use crate::inbox::Inbox;
use crate::policy::DeliveryPolicy;
use crate::stats::ConsumerStats;

/// Consumes a RabbitMQ queue into an [`Inbox`]; see the
/// [module documentation](super).
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
/// use outbox::Event;
/// use outbox_inbox::{BoxError, Delivery, Inbox};
/// use outbox_inbox::rabbitmq::{RabbitMqConsumerConfig, RabbitMqInboxConsumer};
/// use serde::{Deserialize, Serialize};
/// use tokio_util::sync::CancellationToken;
///
/// #[derive(Serialize, Deserialize, Event)]
/// #[event(type = "order.created", aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated { #[event(aggregate_id)] order_id: i64, total_cents: i64 }
///
/// async fn add_revenue(
///     tx: &mut sqlx::PgConnection,
///     order: &OrderCreated,
///     _delivery: &Delivery<'_>,
/// ) -> Result<(), BoxError> {
///     sqlx::query("UPDATE revenue SET cents = cents + $1")
///         .bind(order.total_cents)
///         .execute(&mut *tx)
///         .await?;
///     Ok(())
/// }
///
/// let handler = outbox_inbox::typed(add_revenue);
/// let config = RabbitMqConsumerConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f", "billing.orders");
/// let consumer = RabbitMqInboxConsumer::new(Inbox::new(pool, "billing")?, handler, config)?;
/// let stop = CancellationToken::new();
/// let stats = consumer.run(stop).await?;
/// println!("{} processed", stats.processed);
/// # Ok(()) }
/// ```
pub struct RabbitMqInboxConsumer<DB: InboxBackend, H: Handler<DB>> {
    policy: Arc<DeliveryPolicy<DB, H>>,
    dead_letters: Arc<DeadLetterExchange>,
    config: RabbitMqConsumerConfig,
}

impl<DB: InboxBackend, H: Handler<DB>> std::fmt::Debug for RabbitMqInboxConsumer<DB, H> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RabbitMqInboxConsumer")
            .field("consumer", &self.policy.inbox().consumer())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<DB: InboxBackend, H: Handler<DB>> RabbitMqInboxConsumer<DB, H> {
    /// A consumer feeding `handler` through `inbox`. Does not connect; see
    /// [`RabbitMqInboxConsumer::run`].
    ///
    /// # Errors
    /// [`Error::Config`] for a bad URL, an empty or too long queue name, a
    /// zero prefetch, attempt limit or timeout, or a base delay above the
    /// maximum.
    pub fn new(
        inbox: Inbox<DB>,
        handler: H,
        config: RabbitMqConsumerConfig,
    ) -> Result<Self, Error> {
        config.validate()?;
        Ok(RabbitMqInboxConsumer {
            policy: Arc::new(DeliveryPolicy::new(inbox, handler, config.retry_schedule())),
            dead_letters: Arc::new(DeadLetterExchange::new(&config)),
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &RabbitMqConsumerConfig {
        &self.config
    }

    /// Declare the queue and its [`bindings`](RabbitMqConsumerConfig::bind),
    /// and the dead-letter exchange and queue, without consuming: what
    /// [`RabbitMqInboxConsumer::run`] does first. A service calls it before
    /// it reports ready, so that nothing the relay publishes meanwhile goes
    /// unrouted.
    ///
    /// # Errors
    /// [`Error::Amqp`] when the broker cannot be reached within
    /// `connect_timeout`, a queue or exchange exists with other settings,
    /// or (without bindings) the queue does not exist.
    pub async fn declare_topology(&self) -> Result<(), Error> {
        declare_topology(&self.config, self.policy.inbox().consumer()).await
    }

    /// Consume until `stop` is cancelled, then cancel the AMQP consumer,
    /// finish the deliveries in flight, close the connection and return
    /// what was done. Runs inbox pruning meanwhile.
    ///
    /// # Errors
    /// [`Error::Amqp`] when the first connection, the queue check or the
    /// dead-letter topology fails. Later connection losses are retried.
    pub async fn run(self, stop: CancellationToken) -> Result<ConsumerStats, Error> {
        let RabbitMqInboxConsumer {
            policy,
            dead_letters,
            config,
        } = self;
        let url = mask_password(&config.url);
        let consumer_name = policy.inbox().consumer().to_owned();
        let pruning = BackgroundPruning::start(policy.inbox(), config.prune.clone());
        let first = match open_session(&config, &consumer_name).await {
            Ok(session) => session,
            Err(error) => {
                tracing::error!(%url, queue = %config.queue, %error, "cannot start consuming from rabbitmq");
                pruning.stop().await;
                return Err(error);
            }
        };
        tracing::info!(
            %url,
            queue = %config.queue,
            consumer = %consumer_name,
            prefetch = config.prefetch,
            batch_size = config.batch_size,
            "consuming from rabbitmq"
        );

        let mut session = Some(first);
        while !stop.is_cancelled() {
            let current = match session.take() {
                Some(current) => current,
                None => match reconnect(&config, &consumer_name, &stop).await {
                    Some(reopened) => reopened,
                    None => break,
                },
            };
            let batching = Batching {
                size: config.batch_size,
                wait: config.batch_wait,
            };
            if consume(current, &policy, &dead_letters, batching, &stop).await
                == SessionEnd::Stopped
            {
                break;
            }
        }

        pruning.stop().await;
        let stats = policy.stats();
        log_consumer_stopped!(stats, "rabbitmq inbox consumer stopped", queue = %config.queue);
        Ok(stats)
    }
}

/// Open a new session, with backoff (`retry_base_delay` doubling up to
/// `retry_max_delay`) between failed tries; `None` when `stop` comes first.
async fn reconnect(
    config: &RabbitMqConsumerConfig,
    consumer_name: &str,
    stop: &CancellationToken,
) -> Option<Session> {
    let schedule = config.retry_schedule();
    let mut failed_connects: u32 = 0;
    loop {
        let pause = schedule.delay(failed_connects.saturating_add(1));
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(pause) => {}
        }
        match open_session(config, consumer_name).await {
            Ok(reopened) => {
                tracing::info!(
                    url = %mask_password(&config.url),
                    queue = %config.queue,
                    "reconnected to rabbitmq; consuming again"
                );
                return Some(reopened);
            }
            Err(error) => {
                failed_connects = failed_connects.saturating_add(1);
                tracing::warn!(
                    url = %mask_password(&config.url),
                    queue = %config.queue,
                    %error,
                    failed_connects,
                    "cannot reconnect to rabbitmq; retrying"
                );
            }
        }
    }
}
