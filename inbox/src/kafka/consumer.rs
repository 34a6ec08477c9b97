//! [`KafkaInboxConsumer`]: the consumer group's message loop, which
//! receives messages, hands them to the [`MessageLanes`] and commits the
//! finished offsets.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::config::KafkaConsumerConfig;
use super::dead_letter::DeadLetterProducer;
use super::lanes::MessageLanes;
use super::message::ReceivedMessage;
use super::offset_commits::{ClosingGuard, OffsetCommitContext, commit, commit_all};
use crate::backend::InboxBackend;
use crate::consumer::log_consumer_stopped;
use crate::consumer::{BackgroundPruning, sleep_until_due};
use crate::error::Error;
use crate::handler::Handler;
use crate::inbox::Inbox;
use crate::policy::DeliveryPolicy;
use crate::stats::ConsumerStats;

/// Pause after a failed fetch, so a broken connection is not a hot loop.
const RECEIVE_ERROR_PAUSE: Duration = Duration::from_millis(200);

/// A Kafka consumer group feeding a [`Handler`] through an [`Inbox`]; see
/// the [module documentation](super).
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
/// use outbox::Event;
/// use outbox_inbox::{BoxError, Delivery, Inbox};
/// use outbox_inbox::kafka::{KafkaConsumerConfig, KafkaInboxConsumer};
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
/// let config = KafkaConsumerConfig::new(
///     vec!["127.0.0.1:9092".to_owned()],
///     "billing",
///     vec!["orders".to_owned()],
/// );
/// let consumer = KafkaInboxConsumer::new(Inbox::new(pool, "billing")?, handler, config)?;
/// let stop = CancellationToken::new();
/// let stats = consumer.run(stop).await?;
/// println!("processed {}", stats.processed);
/// # Ok(()) }
/// ```
pub struct KafkaInboxConsumer<DB: InboxBackend, H: Handler<DB>> {
    policy: Arc<DeliveryPolicy<DB, H>>,
    config: KafkaConsumerConfig,
    consumer: StreamConsumer<OffsetCommitContext>,
    dead_letters: Arc<DeadLetterProducer>,
}

impl<DB: InboxBackend, H: Handler<DB>> std::fmt::Debug for KafkaInboxConsumer<DB, H> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("KafkaInboxConsumer")
            .field("consumer", &self.policy.inbox().consumer())
            .field("group_id", &self.config.group_id)
            .field("topics", &self.config.topics)
            .finish_non_exhaustive()
    }
}

impl<DB: InboxBackend, H: Handler<DB>> KafkaInboxConsumer<DB, H> {
    /// Create the Kafka clients. Does not contact the brokers yet, but fails
    /// at once on a bad setting or a client option librdkafka rejects. Must
    /// be called inside a Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Config`] for a setting out of range or no Tokio runtime;
    /// [`Error::Kafka`] when librdkafka rejects the configuration.
    pub fn new(inbox: Inbox<DB>, handler: H, config: KafkaConsumerConfig) -> Result<Self, Error> {
        config.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Config(
                "kafka consumer: must be created inside a Tokio runtime".to_owned(),
            ));
        }
        let consumer: StreamConsumer<OffsetCommitContext> = config
            .consumer_config()
            .create_with_context(OffsetCommitContext::default())
            .map_err(Error::kafka)?;
        let dead_letters = Arc::new(DeadLetterProducer::new(&config)?);
        let policy = Arc::new(DeliveryPolicy::new(inbox, handler, config.retry_schedule()));
        Ok(KafkaInboxConsumer {
            policy,
            config,
            consumer,
            dead_letters,
        })
    }

    /// The settings this consumer was created with.
    pub fn config(&self) -> &KafkaConsumerConfig {
        &self.config
    }

    /// Consume until `stop` is cancelled, then finish the running handlers,
    /// commit and return what was done (see the module documentation).
    /// Failures of single messages, of the broker or of the database are
    /// logged and retried; they do not end the consumer.
    ///
    /// # Errors
    /// [`Error::Kafka`] when the subscription is refused.
    pub async fn run(self, stop: CancellationToken) -> Result<ConsumerStats, Error> {
        let KafkaInboxConsumer {
            policy,
            config,
            consumer,
            dead_letters,
        } = self;
        let consumer = Arc::new(consumer);
        // Declared after `consumer`, so dropped before it: when `run` is
        // dropped mid-way (its task aborted), the consumer's close does not
        // commit anything (as after a crash); a normal stop commits below.
        let _closing = ClosingGuard(Arc::clone(consumer.context()));
        let pruning = BackgroundPruning::start(policy.inbox(), config.prune.clone());

        if config.create_dead_letter_topics {
            create_dead_letter_topics(&config, &dead_letters, &stop).await;
        }
        let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&topics).map_err(Error::kafka)?;
        tracing::info!(
            group_id = %config.group_id,
            topics = ?config.topics,
            consumer = %policy.inbox().consumer(),
            max_in_flight = config.max_in_flight,
            batch_size = config.batch_size,
            "kafka inbox consumer started"
        );

        let mut lanes = MessageLanes::new(
            Arc::clone(&policy),
            dead_letters,
            stop.child_token(),
            config.batch_size,
            config.batch_wait,
        );
        receive_until_stopped(&consumer, &config, &mut lanes, &stop).await;

        tracing::info!(
            in_flight = lanes.in_flight(),
            "kafka inbox consumer stopping; finishing running messages"
        );
        lanes.stop();
        while let Some(joined) = lanes.next_finished().await {
            lanes.finished(joined, consumer.context());
        }
        commit_and_close(consumer).await;
        pruning.stop().await;
        let stats = policy.stats();
        log_consumer_stopped!(stats, "kafka inbox consumer stopped");
        Ok(stats)
    }
}

/// Create the dead-letter topic of every topic named (not a pattern); one
/// that cannot be created now is tried again on first use.
async fn create_dead_letter_topics(
    config: &KafkaConsumerConfig,
    dead_letters: &DeadLetterProducer,
    stop: &CancellationToken,
) {
    for topic in config.topics.iter().filter(|topic| !topic.starts_with('^')) {
        let dead_letter_topic = config.dead_letter_topic_for(topic);
        let created = tokio::select! {
            () = stop.cancelled() => return,
            created = dead_letters.ensure_topic(&dead_letter_topic) => created,
        };
        if let Err(error) = created {
            tracing::warn!(
                topic = %dead_letter_topic,
                %error,
                "cannot create the dead-letter topic now; trying again on first use"
            );
        }
    }
}

/// The message loop: receive while fewer than `max_in_flight` messages are
/// in flight, collect finished message tasks and commit, until `stop`.
async fn receive_until_stopped<DB: InboxBackend, H: Handler<DB>>(
    consumer: &StreamConsumer<OffsetCommitContext>,
    config: &KafkaConsumerConfig,
    lanes: &mut MessageLanes<DB, H>,
    stop: &CancellationToken,
) {
    let commit_each = config.commit_interval.is_zero();
    let mut commit_tick = commit_ticker(config.commit_interval);
    loop {
        // Rebalance callbacks run inside `recv`.
        lanes.purge_revoked(consumer.context());
        let can_fetch = lanes.in_flight() < config.max_in_flight;
        if !can_fetch {
            // Nothing more arrives until something finishes: a gathered
            // batch starts now rather than at its deadline.
            lanes.start_gathered();
        }
        let running = lanes.has_running();
        let batch_due = lanes.batch_due();
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = sleep_until_due(batch_due), if batch_due.is_some() => lanes.start_gathered(),
            Some(joined) = lanes.next_finished(), if running => {
                lanes.finished(joined, consumer.context());
                if commit_each {
                    commit(consumer, CommitMode::Async);
                }
            }
            _ = commit_tick.tick() => commit(consumer, CommitMode::Async),
            received = consumer.recv(), if can_fetch => match received {
                Ok(message) => {
                    let message = ReceivedMessage::from_kafka(&message);
                    lanes.purge_revoked(consumer.context());
                    lanes.received(message, consumer.context());
                }
                Err(error) => {
                    tracing::warn!(%error, "kafka consumer error");
                    tokio::time::sleep(RECEIVE_ERROR_PAUSE).await;
                }
            },
        }
    }
}

/// Ticks every `interval`; hourly when `interval` is zero (the loop then
/// commits after every finished message instead).
fn commit_ticker(interval: Duration) -> Interval {
    let period = if interval.is_zero() {
        Duration::from_secs(3600)
    } else {
        interval
    };
    let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}

/// The final commit, then leaving the group: both wait for the broker, so
/// both run off the async workers.
async fn commit_and_close(consumer: Arc<StreamConsumer<OffsetCommitContext>>) {
    let closing = Arc::clone(consumer.context());
    let final_commit = tokio::task::spawn_blocking(move || {
        commit_all(&consumer, CommitMode::Sync);
        closing.closing.store(true, Ordering::Relaxed);
        drop(consumer);
    });
    if let Err(error) = final_commit.await {
        tracing::warn!(%error, "final offset commit did not run");
    }
}
