//! [`RabbitMqInboxConsumer`]: consume a RabbitMQ queue fed by the relay
//! (CONTRACT §3) and apply each event's effects once through an [`Inbox`].
//!
//! # Delivery
//!
//! The consumer reads one queue with manual acknowledgements and a prefetch
//! ([`RabbitMqConsumerConfig::prefetch`]) that bounds the messages in flight;
//! up to that many are processed concurrently. For each delivery it builds
//! an [`IncomingEvent`] from the `cloudEvents:` headers and the `message_id`
//! / `type` properties, decodes it with [`Handler::decode`], and runs
//! [`Handler::handle`] inside [`Inbox::process`], in an `inbox.handle` span
//! ([`crate::handler_span`]) that continues the producer's trace from the
//! `cloudEvents:traceparent` (or plain `traceparent`) header with the
//! `opentelemetry` feature. The delivery is acked only
//! after the inbox transaction committed ([`Outcome::Processed`]) or found
//! the event already processed ([`Outcome::Duplicate`]). Every redelivery
//! the broker makes (after a lost connection, a crash, a requeue) is
//! therefore harmless: the inbox deduplicates it.
//!
//! # Retries and attempt counting
//!
//! RabbitMQ classic queues do not count redeliveries, so the consumer counts
//! attempts itself, in the `x-outbox-attempts` header ([`ATTEMPTS_HEADER`]):
//! the number of failed attempts before this delivery (absent = 0).
//!
//! * **Handler failure** (the handler returned an error or panicked): while
//!   the original delivery stays unacked, the consumer waits an exponential
//!   backoff with jitter (`retry_base_delay * 2^(n-1)`, at most
//!   `retry_max_delay`), then publishes a copy to the same queue (default
//!   exchange, routing key = queue name, `mandatory`, persistent, publisher
//!   confirms) with `x-outbox-attempts` = n + 1 and the error in
//!   `x-outbox-last-error`; only once the broker confirmed the copy is the
//!   original acked. A crash at any point loses nothing: before the ack the
//!   broker redelivers the original (the copy, if confirmed, is then a
//!   duplicate the inbox absorbs). The delay is spent in the consumer, not
//!   in a TTL'd retry queue: dead-lettering out of a classic queue is
//!   at-most-once, and the wait keeps the message safe in the broker. The
//!   cost is that a waiting retry occupies one prefetch slot; keep
//!   `retry_max_delay` short compared to the prefetch.
//! * **Exhausted attempts**: the attempt that fails with n + 1 =
//!   `max_attempts` sends the message to the dead-letter exchange instead
//!   (the handler ran exactly `max_attempts` times).
//! * **Database outage** ([`Error::Database`], or a handler error that is a
//!   `sqlx` connection error): not the message's fault and not counted; the
//!   consumer pauses (backoff over consecutive outages) and nacks with
//!   requeue.
//! * **Poison** (a [`DecodeError`](crate::DecodeError): no id, unknown
//!   type or version, a body that does not decode): dead-lettered at once.
//!
//! A stop or a lost connection during a retry's backoff ends the wait
//! early: on stop the copy is published right away (the attempt stays
//! counted); on a lost connection nothing more can be sent and the broker
//! redelivers the original, the failed attempt uncounted.
//!
//! # Dead letters
//!
//! Dead-lettered messages are published (confirmed, `mandatory`) to the
//! dead-letter exchange with the original body, properties and headers
//! plus [`DEAD_LETTER_REASON_HEADER`], [`DEAD_LETTER_QUEUE_HEADER`] and
//! [`ATTEMPTS_HEADER`], then the original is acked. With no
//! [`RabbitMqConsumerConfig::dead_letter_exchange`] the consumer declares a
//! durable fanout exchange `<queue>.dlx` bound to a durable queue
//! `<queue>.dlq` at every connect; a configured exchange must exist. When a
//! dead letter cannot be published (unroutable, nacked, broker trouble), the
//! original is requeued after a pause: it is never dropped.
//!
//! # Connection
//!
//! The queue must exist (it is checked with a passive declare). A failure
//! to connect when [`RabbitMqInboxConsumer::run`] starts is returned; a
//! connection lost later is reopened with backoff (`retry_base_delay` up to
//! `retry_max_delay`) and consuming resumes; so is a session whose channel
//! the broker closed. Unacked messages of the lost connection are
//! redelivered by the broker and deduplicated by the inbox. (If the ack of
//! a retried original is lost with the connection, the original comes back
//! next to its confirmed copy: both are then processed, deduplicated on
//! success, so a message can get up to twice its attempts in that case.)
//!
//! The consumer also runs [`crate::prune_until_stopped`] for its inbox
//! while it runs.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer, ExchangeKind};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::InboxBackend;
use crate::error::{BoxError, Error};
use crate::handler::Handler;
use crate::inbox::{Inbox, Outcome};
use crate::incoming::IncomingEvent;
use crate::prune::{PruneSettings, prune_until_stopped};
use crate::trace_context::handler_span;

/// Header counting the failed attempts before this delivery (absent = 0).
pub const ATTEMPTS_HEADER: &str = "x-outbox-attempts";

/// Header of a retry copy: the error of the attempt that failed last.
pub const LAST_ERROR_HEADER: &str = "x-outbox-last-error";

/// Header of a dead letter: why it was dead-lettered.
pub const DEAD_LETTER_REASON_HEADER: &str = "x-outbox-dead-letter-reason";

/// Header of a dead letter: the queue it was consumed from.
pub const DEAD_LETTER_QUEUE_HEADER: &str = "x-outbox-dead-letter-queue";

/// Longest error text carried in a header.
const MAX_REASON_BYTES: usize = 4_096;

/// Longest AMQP queue / exchange name.
const MAX_NAME_BYTES: usize = 255;

/// How long closing a channel or the connection, or sending an ack, may
/// take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the consumer checks that its channels are still open.
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Settings of a [`RabbitMqInboxConsumer`].
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

    fn validate(&self) -> Result<(), Error> {
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
        if self.max_attempts == 0 {
            return Err(Error::Config("max_attempts must be at least 1".to_owned()));
        }
        if self.retry_base_delay > self.retry_max_delay {
            return Err(Error::Config(
                "retry_base_delay must not exceed retry_max_delay".to_owned(),
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::Config(
                "the rabbitmq connect_timeout must be more than zero".to_owned(),
            ));
        }
        Ok(())
    }
}

impl std::fmt::Debug for RabbitMqConsumerConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RabbitMqConsumerConfig")
            .field("url", &mask_password(&self.url))
            .field("queue", &self.queue)
            .field("prefetch", &self.prefetch)
            .field("max_attempts", &self.max_attempts)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .field("dead_letter_exchange", &self.dead_letter_exchange)
            .field("prune", &self.prune)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// What a [`RabbitMqInboxConsumer`] did during one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerStats {
    /// Deliveries whose handler ran and committed.
    pub processed: u64,
    /// Deliveries of events processed before; the handler did not run.
    pub duplicates: u64,
    /// Failed attempts republished for a retry.
    pub retried: u64,
    /// Messages sent to the dead-letter exchange (poison or exhausted).
    pub dead_lettered: u64,
}

#[derive(Default)]
struct Counters {
    processed: AtomicU64,
    duplicates: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ConsumerStats {
        ConsumerStats {
            processed: self.processed.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
        }
    }
}

/// Everything the delivery tasks share.
struct Shared<DB: InboxBackend, H> {
    inbox: Inbox<DB>,
    handler: H,
    config: RabbitMqConsumerConfig,
    display_url: String,
    dead_letter_exchange: String,
    counters: Counters,
    /// Consecutive database outages, for the pause before a requeue.
    outages: AtomicU32,
    /// Consecutive failures to dead-letter, for the pause before a requeue.
    dead_letter_failures: AtomicU32,
}

/// Consumes a RabbitMQ queue into an [`Inbox`]; see the module
/// documentation.
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
/// use outbox::Event;
/// use outbox_inbox::Inbox;
/// use outbox_inbox::rabbitmq::{RabbitMqConsumerConfig, RabbitMqInboxConsumer};
/// use serde::{Deserialize, Serialize};
/// use tokio_util::sync::CancellationToken;
///
/// #[derive(Serialize, Deserialize, Event)]
/// #[event(type = "order.created", aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated { #[event(aggregate_id)] order_id: i64, total_cents: i64 }
///
/// let handler = outbox_inbox::typed::<OrderCreated, _, sqlx::Postgres>(|tx, order: &OrderCreated| {
///     let total = order.total_cents;
///     Box::pin(async move {
///         sqlx::query("UPDATE revenue SET cents = cents + $1").bind(total).execute(&mut **tx).await?;
///         Ok(())
///     })
/// });
/// let config = RabbitMqConsumerConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f", "billing.orders");
/// let consumer = RabbitMqInboxConsumer::new(Inbox::new(pool, "billing")?, handler, config)?;
/// let stop = CancellationToken::new();
/// let stats = consumer.run(stop).await?;
/// println!("{} processed", stats.processed);
/// # Ok(()) }
/// ```
pub struct RabbitMqInboxConsumer<DB: InboxBackend, H> {
    shared: Arc<Shared<DB, H>>,
}

impl<DB: InboxBackend, H> std::fmt::Debug for RabbitMqInboxConsumer<DB, H> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RabbitMqInboxConsumer")
            .field("consumer", &self.shared.inbox.consumer())
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// How one consuming session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionEnd {
    Stopped,
    Lost,
}

/// One open connection with its channels and consumer.
struct Session {
    connection: Connection,
    consume_channel: Channel,
    publish_channel: Channel,
    consumer: Consumer,
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
        let display_url = mask_password(&config.url);
        let dead_letter_exchange = config.dead_letter_exchange_name();
        Ok(RabbitMqInboxConsumer {
            shared: Arc::new(Shared {
                inbox,
                handler,
                config,
                display_url,
                dead_letter_exchange,
                counters: Counters::default(),
                outages: AtomicU32::new(0),
                dead_letter_failures: AtomicU32::new(0),
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &RabbitMqConsumerConfig {
        &self.shared.config
    }

    /// Consume until `stop` is cancelled, then cancel the AMQP consumer,
    /// finish the deliveries in flight, close the connection and return
    /// what was done. Runs inbox pruning meanwhile.
    ///
    /// # Errors
    /// [`Error::Amqp`] when the first connection, the queue check or the
    /// dead-letter topology fails. Later connection losses are retried.
    pub async fn run(self, stop: CancellationToken) -> Result<ConsumerStats, Error> {
        let shared = self.shared;
        let prune_stop = CancellationToken::new();
        let _prune_guard = prune_stop.clone().drop_guard();
        let pruner = tokio::spawn(prune_until_stopped(
            shared.inbox.pool().clone(),
            shared.inbox.consumer().to_owned(),
            shared.config.prune.clone(),
            prune_stop.clone(),
        ));

        let first = match open_session(&shared).await {
            Ok(session) => session,
            Err(error) => {
                tracing::error!(
                    url = %shared.display_url,
                    queue = %shared.config.queue,
                    %error,
                    "cannot start consuming from rabbitmq"
                );
                prune_stop.cancel();
                let _ = pruner.await;
                return Err(error);
            }
        };
        tracing::info!(
            url = %shared.display_url,
            queue = %shared.config.queue,
            consumer = %shared.inbox.consumer(),
            prefetch = shared.config.prefetch,
            "consuming from rabbitmq"
        );

        let mut session = Some(first);
        let mut failed_connects: u32 = 0;
        while !stop.is_cancelled() {
            let current = match session.take() {
                Some(current) => current,
                None => {
                    let pause = backoff(&shared.config, failed_connects.saturating_add(1));
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(pause) => {}
                    }
                    match open_session(&shared).await {
                        Ok(reopened) => {
                            tracing::info!(
                                url = %shared.display_url,
                                queue = %shared.config.queue,
                                "reconnected to rabbitmq; consuming again"
                            );
                            failed_connects = 0;
                            reopened
                        }
                        Err(error) => {
                            failed_connects = failed_connects.saturating_add(1);
                            tracing::warn!(
                                url = %shared.display_url,
                                queue = %shared.config.queue,
                                %error,
                                failed_connects,
                                "cannot reconnect to rabbitmq; retrying"
                            );
                            continue;
                        }
                    }
                }
            };
            let end = consume(&shared, current, &stop).await;
            if end == SessionEnd::Stopped {
                break;
            }
        }

        prune_stop.cancel();
        if let Err(error) = pruner.await {
            tracing::warn!(%error, "the inbox pruning task failed");
        }
        let stats = shared.counters.snapshot();
        tracing::info!(
            queue = %shared.config.queue,
            processed = stats.processed,
            duplicates = stats.duplicates,
            retried = stats.retried,
            dead_lettered = stats.dead_lettered,
            "rabbitmq inbox consumer stopped"
        );
        Ok(stats)
    }
}

/// Connect, check the queue, declare the dead-letter topology, and start
/// consuming; bounded by `connect_timeout`.
async fn open_session<DB: InboxBackend, H>(shared: &Shared<DB, H>) -> Result<Session, Error> {
    let config = &shared.config;
    let opening = async {
        let properties = ConnectionProperties::default().with_connection_name(LongString::from(
            format!("outbox-inbox {}", shared.inbox.consumer()),
        ));
        let connection = Connection::connect(&config.url, properties).await?;
        let consume_channel = connection.create_channel().await?;
        consume_channel
            .basic_qos(config.prefetch, BasicQosOptions { global: false })
            .await?;
        let queue = short(&config.queue)?;
        consume_channel
            .queue_declare(
                queue.clone(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await?;

        let exchange = short(&shared.dead_letter_exchange)?;
        if config.dead_letter_exchange.is_some() {
            consume_channel
                .exchange_declare(
                    exchange,
                    ExchangeKind::Fanout,
                    ExchangeDeclareOptions {
                        passive: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?;
        } else {
            let dead_letter_queue = short(&config.default_dead_letter_queue_name())?;
            consume_channel
                .exchange_declare(
                    exchange.clone(),
                    ExchangeKind::Fanout,
                    ExchangeDeclareOptions {
                        durable: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?;
            consume_channel
                .queue_declare(
                    dead_letter_queue.clone(),
                    QueueDeclareOptions {
                        durable: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?;
            consume_channel
                .queue_bind(
                    dead_letter_queue,
                    exchange,
                    ShortString::from(""),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }

        let publish_channel = connection.create_channel().await?;
        publish_channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let consumer = consume_channel
            .basic_consume(
                queue,
                ShortString::from(""),
                BasicConsumeOptions {
                    no_ack: false,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        Ok::<Session, lapin::Error>(Session {
            connection,
            consume_channel,
            publish_channel,
            consumer,
        })
    };
    match tokio::time::timeout(config.connect_timeout, opening).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(error)) => Err(Error::Amqp(error)),
        Err(_elapsed) => Err(Error::Amqp(lapin::Error::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "rabbitmq at {} did not answer within {} ms",
                shared.display_url,
                config.connect_timeout.as_millis()
            ),
        )))),
    }
}

/// Consume deliveries of `session` until `stop` or until the connection is
/// lost; every delivery in flight is finished before returning.
async fn consume<DB: InboxBackend, H: Handler<DB>>(
    shared: &Arc<Shared<DB, H>>,
    session: Session,
    stop: &CancellationToken,
) -> SessionEnd {
    let Session {
        connection,
        consume_channel,
        publish_channel,
        mut consumer,
    } = session;
    let lost = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let mut health = tokio::time::interval(HEALTH_CHECK_INTERVAL);
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = loop {
        tokio::select! {
            () = stop.cancelled() => break SessionEnd::Stopped,
            delivery = consumer.next() => match delivery {
                Some(Ok(delivery)) => {
                    tasks.spawn(handle_delivery(
                        Arc::clone(shared),
                        publish_channel.clone(),
                        delivery,
                        stop.clone(),
                        lost.clone(),
                    ));
                }
                Some(Err(error)) => {
                    tracing::warn!(queue = %shared.config.queue, %error, "rabbitmq consumer failed; reconnecting");
                    break SessionEnd::Lost;
                }
                None => {
                    tracing::warn!(queue = %shared.config.queue, "rabbitmq cancelled the consumer; reconnecting");
                    break SessionEnd::Lost;
                }
            },
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => log_join(joined),
            _ = health.tick() => {
                // A channel the broker closed (e.g. a publish to a deleted
                // dead-letter exchange) ends the session, to open new ones.
                if !consume_channel.status().connected() || !publish_channel.status().connected() {
                    tracing::warn!(queue = %shared.config.queue, "a rabbitmq channel was closed; reconnecting");
                    break SessionEnd::Lost;
                }
            }
        }
    };

    match end {
        SessionEnd::Stopped => {
            // No new deliveries; those already buffered but not started are
            // requeued by the broker when the channel closes.
            let cancel =
                consume_channel.basic_cancel(consumer.tag(), BasicCancelOptions::default());
            match tokio::time::timeout(CLOSE_TIMEOUT, cancel).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::debug!(%error, "cancelling the rabbitmq consumer failed");
                }
                Err(_elapsed) => tracing::debug!("cancelling the rabbitmq consumer timed out"),
            }
        }
        SessionEnd::Lost => lost.cancel(),
    }
    let in_flight = tasks.len();
    if in_flight > 0 {
        tracing::info!(in_flight, "finishing the deliveries in flight");
    }
    while let Some(joined) = tasks.join_next().await {
        log_join(joined);
    }
    drop(consumer);
    for channel in [&consume_channel, &publish_channel] {
        if channel.status().connected() {
            let _ =
                tokio::time::timeout(CLOSE_TIMEOUT, channel.close(200, ShortString::from("OK")))
                    .await;
        }
    }
    if connection.status().connected() {
        let _ = tokio::time::timeout(
            CLOSE_TIMEOUT,
            connection.close(200, ShortString::from("OK")),
        )
        .await;
    }
    end
}

fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(error) = joined {
        tracing::error!(%error, "a rabbitmq delivery task failed; the broker redelivers its message");
    }
}

/// How one attempt of a delivery went.
enum Attempt {
    Done(Outcome<()>),
    /// The database is unreachable: requeue uncounted.
    Outage(String),
    /// The handler failed: retry or dead-letter.
    Failed(String),
}

/// Process one delivery to its end: acked after commit, retried,
/// dead-lettered, or requeued.
async fn handle_delivery<DB: InboxBackend, H: Handler<DB>>(
    shared: Arc<Shared<DB, H>>,
    publisher: Channel,
    delivery: Delivery,
    stop: CancellationToken,
    lost: CancellationToken,
) {
    let properties = &delivery.properties;
    let headers: Vec<(String, String)> = properties
        .headers()
        .as_ref()
        .map(|table| {
            table
                .inner()
                .iter()
                .filter_map(|(name, value)| header_text(value).map(|text| (name.to_string(), text)))
                .collect()
        })
        .unwrap_or_default();
    let previous_attempts = properties
        .headers()
        .as_ref()
        .and_then(|table| table.inner().get(ATTEMPTS_HEADER))
        .and_then(header_count)
        .unwrap_or(0);
    let message_id = properties.message_id().as_ref().map(ShortString::as_str);
    let message_type = properties.kind().as_ref().map(ShortString::as_str);

    let decoded = IncomingEvent::from_amqp(headers, message_id, message_type, &delivery.data)
        .and_then(|incoming| {
            let event = shared.handler.decode(&incoming)?;
            Ok((incoming, event))
        });
    let (incoming, event) = match decoded {
        Ok(decoded) => decoded,
        Err(error) => {
            tracing::warn!(
                queue = %shared.config.queue,
                message_id = message_id.unwrap_or_default(),
                %error,
                "poison message; dead-lettering it"
            );
            let reason = format!("poison message: {error}");
            dead_letter(
                &shared,
                &publisher,
                &delivery,
                &reason,
                previous_attempts,
                &stop,
                &lost,
            )
            .await;
            return;
        }
    };
    let event_id = incoming.id.as_str();
    let attempt = previous_attempts.saturating_add(1);

    let task_shared = Arc::clone(&shared);
    let processing = shared
        .inbox
        .process(event_id, move |tx| {
            Box::pin(async move { task_shared.handler.handle(tx, &event).await })
        })
        .instrument(handler_span(shared.inbox.consumer(), &incoming));
    let outcome = match AssertUnwindSafe(processing).catch_unwind().await {
        Ok(Ok(outcome)) => Attempt::Done(outcome),
        Ok(Err(Error::Database(error))) => Attempt::Outage(error.to_string()),
        Ok(Err(Error::Handler { source, .. })) if is_connection_error(&source) => {
            Attempt::Outage(source.to_string())
        }
        Ok(Err(error)) => Attempt::Failed(error.to_string()),
        Err(panic) => Attempt::Failed(format!(
            "handler panicked for event {event_id}: {}",
            panic_text(panic.as_ref())
        )),
    };

    match outcome {
        Attempt::Done(outcome) => {
            shared.outages.store(0, Ordering::Relaxed);
            let counter = if outcome.is_processed() {
                tracing::debug!(event_id, attempt, "event processed");
                &shared.counters.processed
            } else {
                tracing::debug!(event_id, "duplicate delivery acked");
                &shared.counters.duplicates
            };
            counter.fetch_add(1, Ordering::Relaxed);
            ack(&delivery, event_id).await;
        }
        Attempt::Outage(error) => {
            let outages = shared
                .outages
                .fetch_add(1, Ordering::Relaxed)
                .saturating_add(1);
            let pause = backoff(&shared.config, outages);
            tracing::warn!(
                event_id,
                %error,
                pause_ms = pause.as_millis() as u64,
                "database unavailable; requeueing the message (attempt not counted)"
            );
            pause_unless(pause, &stop, &lost).await;
            requeue(&delivery, event_id).await;
        }
        Attempt::Failed(error) if attempt >= shared.config.max_attempts => {
            tracing::warn!(event_id, attempt, %error, "handler failed on the last attempt; dead-lettering");
            let reason = format!("failed {attempt} attempts; last error: {error}");
            dead_letter(
                &shared, &publisher, &delivery, &reason, attempt, &stop, &lost,
            )
            .await;
        }
        Attempt::Failed(error) => {
            retry(
                &shared, &publisher, &delivery, event_id, attempt, &error, &stop, &lost,
            )
            .await;
        }
    }
}

/// Wait the backoff of `attempt`, publish a copy counting it, then ack the
/// original.
#[allow(clippy::too_many_arguments)]
async fn retry<DB: InboxBackend, H>(
    shared: &Shared<DB, H>,
    publisher: &Channel,
    delivery: &Delivery,
    event_id: &str,
    attempt: u32,
    error: &str,
    stop: &CancellationToken,
    lost: &CancellationToken,
) {
    let pause = backoff(&shared.config, attempt);
    tracing::info!(
        event_id,
        attempt,
        max_attempts = shared.config.max_attempts,
        %error,
        retry_in_ms = pause.as_millis() as u64,
        "handler failed; retrying"
    );
    tokio::select! {
        () = tokio::time::sleep(pause) => {}
        () = stop.cancelled() => {}
        () = lost.cancelled() => {
            tracing::info!(event_id, "connection lost while waiting to retry; the broker redelivers the message");
            return;
        }
    }
    let mut headers = delivery.properties.headers().clone().unwrap_or_default();
    headers.insert(
        ShortString::from(ATTEMPTS_HEADER),
        AMQPValue::LongLongInt(i64::from(attempt)),
    );
    headers.insert(
        ShortString::from(LAST_ERROR_HEADER),
        AMQPValue::LongString(LongString::from(truncated(error))),
    );
    let properties = delivery
        .properties
        .clone()
        .with_delivery_mode(2)
        .with_headers(headers);
    let routing_key = ShortString::from(shared.config.queue.as_str());
    match publish_confirmed(
        publisher,
        ShortString::from(""),
        routing_key,
        &delivery.data,
        properties,
        shared.config.connect_timeout,
    )
    .await
    {
        Ok(()) => {
            shared.counters.retried.fetch_add(1, Ordering::Relaxed);
            ack(delivery, event_id).await;
        }
        Err(publish_error) => {
            tracing::warn!(event_id, error = %publish_error, "cannot republish the message for a retry; requeueing it");
            requeue(delivery, event_id).await;
        }
    }
}

/// Publish `delivery` to the dead-letter exchange with `reason`, then ack
/// it; when that fails, requeue it after a pause.
async fn dead_letter<DB: InboxBackend, H>(
    shared: &Shared<DB, H>,
    publisher: &Channel,
    delivery: &Delivery,
    reason: &str,
    attempts: u32,
    stop: &CancellationToken,
    lost: &CancellationToken,
) {
    let event_id = delivery
        .properties
        .message_id()
        .as_ref()
        .map(ShortString::as_str)
        .unwrap_or_default();
    let mut headers = delivery.properties.headers().clone().unwrap_or_default();
    headers.insert(
        ShortString::from(DEAD_LETTER_REASON_HEADER),
        AMQPValue::LongString(LongString::from(truncated(reason))),
    );
    headers.insert(
        ShortString::from(DEAD_LETTER_QUEUE_HEADER),
        AMQPValue::LongString(LongString::from(shared.config.queue.as_str())),
    );
    headers.insert(
        ShortString::from(ATTEMPTS_HEADER),
        AMQPValue::LongLongInt(i64::from(attempts)),
    );
    let properties = delivery
        .properties
        .clone()
        .with_delivery_mode(2)
        .with_headers(headers);
    let published = match ShortString::try_new(shared.dead_letter_exchange.as_str()) {
        Ok(exchange) => {
            publish_confirmed(
                publisher,
                exchange,
                delivery.routing_key.clone(),
                &delivery.data,
                properties,
                shared.config.connect_timeout,
            )
            .await
        }
        Err(_) => Err("the dead-letter exchange name is too long".to_owned()),
    };
    match published {
        Ok(()) => {
            shared.dead_letter_failures.store(0, Ordering::Relaxed);
            shared
                .counters
                .dead_lettered
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                event_id,
                exchange = %shared.dead_letter_exchange,
                %reason,
                "message dead-lettered"
            );
            ack(delivery, event_id).await;
        }
        Err(error) => {
            let failures = shared
                .dead_letter_failures
                .fetch_add(1, Ordering::Relaxed)
                .saturating_add(1);
            let pause = backoff(&shared.config, failures);
            tracing::error!(
                event_id,
                exchange = %shared.dead_letter_exchange,
                %error,
                "cannot dead-letter the message; requeueing it"
            );
            pause_unless(pause, stop, lost).await;
            requeue(delivery, event_id).await;
        }
    }
}

/// Publish one message (`mandatory`) and wait for its confirm; an
/// unroutable, nacked or unconfirmed message is an error.
async fn publish_confirmed(
    channel: &Channel,
    exchange: ShortString,
    routing_key: ShortString,
    body: &[u8],
    properties: BasicProperties,
    timeout: Duration,
) -> Result<(), String> {
    let publishing = async {
        let confirm = channel
            .basic_publish(
                exchange.clone(),
                routing_key.clone(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                body,
                properties,
            )
            .await?;
        confirm.await
    };
    match tokio::time::timeout(timeout, publishing).await {
        Ok(Ok(confirmation)) => {
            if confirmation.is_nack() {
                return Err(format!(
                    "rabbitmq nacked the message to exchange `{exchange}`"
                ));
            }
            if !confirmation.is_ack() {
                return Err("the rabbitmq channel is not in confirm mode".to_owned());
            }
            match confirmation.take_message() {
                Some(returned) => Err(format!(
                    "unroutable: no queue bound to exchange `{exchange}` for routing key `{routing_key}` ({} {})",
                    returned.reply_code, returned.reply_text
                )),
                None => Ok(()),
            }
        }
        Ok(Err(error)) => Err(format!("rabbitmq: {error}")),
        Err(_elapsed) => Err(format!(
            "no rabbitmq publisher confirm within {} ms",
            timeout.as_millis()
        )),
    }
}

async fn ack(delivery: &Delivery, event_id: &str) {
    let acking = delivery.acker.ack(BasicAckOptions::default());
    match tokio::time::timeout(CLOSE_TIMEOUT, acking)
        .await
        .unwrap_or(Ok(false))
    {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            event_id,
            "cannot ack: the channel is closed; the broker redelivers the message (a duplicate)"
        ),
        Err(error) => tracing::warn!(
            event_id,
            %error,
            "ack failed; the broker redelivers the message (a duplicate)"
        ),
    }
}

async fn requeue(delivery: &Delivery, event_id: &str) {
    let options = BasicNackOptions {
        multiple: false,
        requeue: true,
    };
    let nacking = delivery.acker.nack(options);
    match tokio::time::timeout(CLOSE_TIMEOUT, nacking)
        .await
        .unwrap_or(Ok(false))
    {
        Ok(true) => {}
        Ok(false) => tracing::debug!(
            event_id,
            "cannot nack: the channel is closed; the broker redelivers the message"
        ),
        Err(error) => {
            tracing::debug!(event_id, %error, "nack failed; the broker redelivers the message")
        }
    }
}

/// Sleep `pause`, ending early on a stop or a lost connection.
async fn pause_unless(pause: Duration, stop: &CancellationToken, lost: &CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(pause) => {}
        () = stop.cancelled() => {}
        () = lost.cancelled() => {}
    }
}

/// Exponential backoff for the `attempt`th failure (1-based), with jitter
/// between half and all of it.
fn backoff(config: &RabbitMqConsumerConfig, attempt: u32) -> Duration {
    let exponent = attempt.saturating_sub(1).min(31);
    let full = config
        .retry_base_delay
        .saturating_mul(1_u32 << exponent)
        .min(config.retry_max_delay);
    let half = full / 2;
    let spread = u64::try_from(half.as_micros()).unwrap_or(u64::MAX);
    if spread == 0 {
        return full;
    }
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    half + Duration::from_micros(hasher.finish() % (spread + 1))
}

/// A header value as text, for the CloudEvents attributes.
fn header_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(text) => Some(String::from_utf8_lossy(text.as_bytes()).into_owned()),
        AMQPValue::ShortString(text) => Some(text.to_string()),
        AMQPValue::Boolean(value) => Some(value.to_string()),
        AMQPValue::ShortShortInt(value) => Some(value.to_string()),
        AMQPValue::ShortShortUInt(value) => Some(value.to_string()),
        AMQPValue::ShortInt(value) => Some(value.to_string()),
        AMQPValue::ShortUInt(value) => Some(value.to_string()),
        AMQPValue::LongInt(value) => Some(value.to_string()),
        AMQPValue::LongUInt(value) => Some(value.to_string()),
        AMQPValue::LongLongInt(value) => Some(value.to_string()),
        AMQPValue::Timestamp(value) => Some(value.to_string()),
        _ => None,
    }
}

/// The attempt count of an `x-outbox-attempts` header.
fn header_count(value: &AMQPValue) -> Option<u32> {
    let count: i64 = match value {
        AMQPValue::ShortShortInt(value) => i64::from(*value),
        AMQPValue::ShortShortUInt(value) => i64::from(*value),
        AMQPValue::ShortInt(value) => i64::from(*value),
        AMQPValue::ShortUInt(value) => i64::from(*value),
        AMQPValue::LongInt(value) => i64::from(*value),
        AMQPValue::LongUInt(value) => i64::from(*value),
        AMQPValue::LongLongInt(value) => *value,
        AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes())
            .ok()?
            .trim()
            .parse()
            .ok()?,
        AMQPValue::ShortString(text) => text.as_str().trim().parse().ok()?,
        _ => return None,
    };
    u32::try_from(count.max(0)).ok()
}

/// Whether a handler's error is the database connection failing (an
/// outage), not the message's fault.
fn is_connection_error(error: &BoxError) -> bool {
    matches!(
        error.downcast_ref::<sqlx::Error>(),
        Some(
            sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
        )
    )
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-text panic".to_owned()
    }
}

fn short(name: &str) -> Result<ShortString, lapin::Error> {
    ShortString::try_new(name).map_err(|_| {
        lapin::Error::from(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("AMQP name longer than {MAX_NAME_BYTES} bytes: {name:.40}..."),
        ))
    })
}

/// `text` cut to at most [`MAX_REASON_BYTES`], on a character boundary.
fn truncated(text: &str) -> String {
    if text.len() <= MAX_REASON_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_REASON_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// `url` with the password of its user info replaced by `***`.
fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((user_info, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match user_info.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_attempts_from_any_integer_or_text() {
        assert_eq!(header_count(&AMQPValue::LongLongInt(3)), Some(3));
        assert_eq!(header_count(&AMQPValue::ShortUInt(2)), Some(2));
        assert_eq!(
            header_count(&AMQPValue::LongString(LongString::from("4"))),
            Some(4)
        );
        assert_eq!(header_count(&AMQPValue::LongLongInt(-1)), Some(0));
        assert_eq!(header_count(&AMQPValue::Boolean(true)), None);
    }

    #[test]
    fn backs_off_exponentially_within_bounds() {
        let mut config = RabbitMqConsumerConfig::new("amqp://localhost", "q");
        config.retry_base_delay = Duration::from_millis(100);
        config.retry_max_delay = Duration::from_millis(1_000);
        for attempt in 1..40 {
            let full = (Duration::from_millis(100) * 2_u32.pow(attempt.min(20) - 1))
                .min(Duration::from_millis(1_000));
            let delay = backoff(&config, attempt);
            assert!(delay >= full / 2 && delay <= full, "{attempt}: {delay:?}");
        }
    }

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

    #[test]
    fn truncates_on_a_character_boundary() {
        let text = "é".repeat(MAX_REASON_BYTES);
        let cut = truncated(&text);
        assert!(cut.len() <= MAX_REASON_BYTES + 3);
        assert!(cut.ends_with("..."));
    }
}
