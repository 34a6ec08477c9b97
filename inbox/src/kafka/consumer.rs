//! [`KafkaInboxConsumer`]: a Kafka consumer group that feeds a [`Handler`]
//! through the [`Inbox`], so each event's effects are applied once however
//! often Kafka delivers it.
//!
//! Messages are read as the relay writes them (CloudEvents Kafka binding,
//! binary mode, CONTRACT §3): `ce_*` headers, the payload as the value and
//! the aggregate id as the key. For each message the consumer builds an
//! [`IncomingEvent`], decodes it with [`Handler::decode`] and runs
//! [`Handler::handle`] inside [`Inbox::process`], each attempt in an
//! `inbox.handle` span ([`crate::handler_span`]) that continues the
//! producer's trace from `ce_traceparent` (or the plain `traceparent`
//! header) with the `opentelemetry` feature.
//!
//! # Offsets
//!
//! Automatic commits and automatic offset storing are off. A message's
//! offset becomes committable only after its inbox transaction committed
//! (the event was processed, or it was a duplicate) or after it was
//! dead-lettered and the dead-letter topic acknowledged it. Offsets are
//! committed per partition up to the lowest offset that is not finished:
//! a finished message after an unfinished one is never committed past it.
//! Commits happen every [`KafkaConsumerConfig::commit_interval`], before a
//! partition is revoked in a rebalance, and when the consumer stops. A
//! crash between a database commit and the offset commit costs a
//! redelivery, which the inbox turns into [`Outcome::Duplicate`].
//!
//! # Concurrency and order
//!
//! Up to [`KafkaConsumerConfig::max_in_flight`] messages are in flight
//! (running, retrying or waiting for their turn). Messages with the same key
//! in the same partition (the events of one aggregate) are handled strictly
//! one after another, in offset order; different keys run concurrently.
//! Messages without a key are one sequence per partition. While the limit
//! is reached the consumer stops fetching; when that lasts longer than
//! `max.poll.interval.ms` (a database down for minutes), librdkafka leaves
//! the group and rejoins on the next poll, and the messages are redelivered
//! (as duplicates where they were processed).
//!
//! # Failures
//!
//! * A handler error ([`Error::Handler`], or a panic in the handler) is
//!   retried in place with exponential backoff and jitter, holding back the
//!   later messages of the same key only, up to
//!   [`KafkaConsumerConfig::max_attempts`] attempts; then the message is
//!   dead-lettered.
//! * A message that cannot be decoded ([`DecodeError`]: no `ce_id`, a body
//!   that is not the event's JSON, an unexpected type or version) is poison
//!   and is dead-lettered at once.
//! * A database error ([`Error::Database`]) is retried with backoff without
//!   counting as an attempt: the database is down, not the message.
//!
//! Dead-lettering produces the original key, value and headers, plus
//! `outbox-dead-letter-reason` (the error text) and
//! `outbox-dead-letter-source` (`topic/partition/offset`), to the
//! dead-letter topic ([`KafkaConsumerConfig::dead_letter_topic`], by default
//! `<topic>.dlq`), waits for the broker's acknowledgement and only then lets
//! the offset be committed. A dead-letter topic that does not exist is
//! created at startup (or on first use). When the dead-letter topic cannot
//! be written, the message stays in place and dead-lettering is retried:
//! nothing is ever skipped.
//!
//! # Stopping
//!
//! When the [`CancellationToken`] passed to [`KafkaInboxConsumer::run`] is
//! cancelled, the consumer stops fetching, lets running handlers finish
//! (messages waiting for a retry or for their turn are left for
//! redelivery), commits and returns its [`ConsumerStats`]. The background
//! pruning of the inbox ([`crate::prune_until_stopped`]) stops with it.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::InboxBackend;
use crate::error::{DecodeError, Error};
use crate::handler::Handler;
use crate::inbox::{Inbox, Outcome};
use crate::incoming::IncomingEvent;
use crate::prune::{PruneSettings, prune_until_stopped};
use crate::trace_context::handler_span;

/// Header naming why a message was dead-lettered.
pub const DEAD_LETTER_REASON_HEADER: &str = "outbox-dead-letter-reason";

/// Header naming where a dead-lettered message came from, as
/// `topic/partition/offset`.
pub const DEAD_LETTER_SOURCE_HEADER: &str = "outbox-dead-letter-source";

/// Suffix of the default dead-letter topic: `<topic>.dlq`.
pub const DEAD_LETTER_SUFFIX: &str = ".dlq";

/// Pause after a failed fetch, so a broken connection is not a hot loop.
const RECEIVE_ERROR_PAUSE: Duration = Duration::from_millis(200);

/// Bound of one dead-letter topic creation.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of a [`KafkaInboxConsumer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConsumerConfig {
    /// Bootstrap brokers, `host:port` each.
    pub brokers: Vec<String>,
    /// The consumer group (`group.id`).
    pub group_id: String,
    /// Topics to consume. A name starting with `^` is a regular expression
    /// (librdkafka's convention); such a subscription should not match the
    /// dead-letter topics.
    pub topics: Vec<String>,
    /// Most messages received and not yet finished (running, retrying or
    /// waiting behind an earlier message of the same key). Default 32.
    pub max_in_flight: usize,
    /// Handler attempts per message before it is dead-lettered. Default 5.
    pub max_attempts: u32,
    /// Backoff before the first retry; it doubles per retry. Default 200 ms.
    pub retry_base_delay: Duration,
    /// Longest backoff between two retries. Default 30 s.
    pub retry_max_delay: Duration,
    /// How often finished offsets are committed; zero commits after every
    /// finished message. Offsets are also committed before a partition is
    /// revoked and when the consumer stops. Default 1 s.
    pub commit_interval: Duration,
    /// The dead-letter topic of every consumed topic; `None` for
    /// `<topic>.dlq` per topic. Default `None`.
    pub dead_letter_topic: Option<String>,
    /// Create a missing dead-letter topic (at startup, or on first use).
    /// Default on.
    pub create_dead_letter_topics: bool,
    /// Partitions of a dead-letter topic the consumer creates. Default 1.
    pub dead_letter_partitions: i32,
    /// Replication factor of a dead-letter topic the consumer creates; `-1`
    /// for the broker's default. Default `-1`.
    pub dead_letter_replication_factor: i32,
    /// librdkafka client options (`security.protocol`, `sasl.*`,
    /// `session.timeout.ms`, `auto.offset.reset`, ...) for the consumer, the
    /// dead-letter producer and the admin client, applied after the
    /// consumer's own settings. `enable.auto.commit` and
    /// `enable.auto.offset.store` stay off whatever is given here.
    pub client_options: BTreeMap<String, String>,
    /// Pruning of the inbox rows, done by a background task of the consumer.
    pub prune: PruneSettings,
}

impl KafkaConsumerConfig {
    /// The default settings for consumer group `group_id` reading `topics`
    /// from `brokers`.
    pub fn new(brokers: Vec<String>, group_id: impl Into<String>, topics: Vec<String>) -> Self {
        KafkaConsumerConfig {
            brokers,
            group_id: group_id.into(),
            topics,
            max_in_flight: 32,
            max_attempts: 5,
            retry_base_delay: Duration::from_millis(200),
            retry_max_delay: Duration::from_secs(30),
            commit_interval: Duration::from_secs(1),
            dead_letter_topic: None,
            create_dead_letter_topics: true,
            dead_letter_partitions: 1,
            dead_letter_replication_factor: -1,
            client_options: BTreeMap::new(),
            prune: PruneSettings::default(),
        }
    }

    /// The dead-letter topic of messages read from `topic`.
    pub fn dead_letter_topic_for(&self, topic: &str) -> String {
        match &self.dead_letter_topic {
            Some(dead_letter_topic) => dead_letter_topic.clone(),
            None => format!("{topic}{DEAD_LETTER_SUFFIX}"),
        }
    }

    fn validate(&self) -> Result<(), Error> {
        if self.brokers.is_empty() || self.brokers.iter().any(|broker| broker.trim().is_empty()) {
            return Err(config_error("brokers", "must name at least one host:port"));
        }
        if self.group_id.trim().is_empty() {
            return Err(config_error("group_id", "is empty"));
        }
        if self.topics.is_empty() || self.topics.iter().any(|topic| topic.trim().is_empty()) {
            return Err(config_error("topics", "must name at least one topic"));
        }
        if self.max_in_flight == 0 {
            return Err(config_error("max_in_flight", "must be at least 1"));
        }
        if self.max_attempts == 0 {
            return Err(config_error("max_attempts", "must be at least 1"));
        }
        if self.retry_base_delay > self.retry_max_delay {
            return Err(config_error(
                "retry_base_delay",
                "must not exceed retry_max_delay",
            ));
        }
        if let Some(topic) = &self.dead_letter_topic
            && topic.trim().is_empty()
        {
            return Err(config_error("dead_letter_topic", "is empty"));
        }
        if self.dead_letter_partitions < 1 {
            return Err(config_error("dead_letter_partitions", "must be at least 1"));
        }
        if self.dead_letter_replication_factor < 1 && self.dead_letter_replication_factor != -1 {
            return Err(config_error(
                "dead_letter_replication_factor",
                "must be at least 1, or -1 for the broker's default",
            ));
        }
        if self.prune.interval.is_zero() {
            return Err(config_error("prune.interval", "must be more than zero"));
        }
        Ok(())
    }

    fn base_config(&self, client_id: &str) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.brokers.join(","))
            .set("client.id", client_id);
        config
    }

    fn consumer_config(&self) -> ClientConfig {
        let mut config = self.base_config("outbox-inbox");
        config
            .set("group.id", &self.group_id)
            // A new group starts at the beginning: an inbox consumer must not
            // skip events published before it first joined.
            .set("auto.offset.reset", "earliest")
            .set("allow.auto.create.topics", "false");
        for (key, value) in &self.client_options {
            config.set(key, value);
        }
        // Offsets are stored and committed by the consumer itself, only
        // after the inbox transaction committed.
        config
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        config
    }

    fn producer_config(&self) -> ClientConfig {
        let mut config = self.base_config("outbox-inbox-dead-letter");
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("allow.auto.create.topics", "false");
        for (key, value) in self.client_options.iter().filter(|(key, _)| {
            // Consumer settings would only make librdkafka warn here.
            !CONSUMER_ONLY_OPTIONS.contains(&key.as_str())
        }) {
            config.set(key, value);
        }
        config
    }

    fn admin_config(&self) -> ClientConfig {
        let mut config = self.base_config("outbox-inbox-admin");
        for (key, value) in self.client_options.iter().filter(|(key, _)| {
            !CONSUMER_ONLY_OPTIONS.contains(&key.as_str())
                && !PRODUCER_ONLY_OPTIONS.contains(&key.as_str())
        }) {
            config.set(key, value);
        }
        config
    }
}

/// Client options that only a consumer understands; not passed to the
/// dead-letter producer and the admin client.
const CONSUMER_ONLY_OPTIONS: &[&str] = &[
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.remote.assignor",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "auto.offset.reset",
    "auto.commit.interval.ms",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "fetch.wait.max.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "isolation.level",
    "check.crcs",
    "coordinator.query.interval.ms",
];

/// Client options that only a producer understands.
const PRODUCER_ONLY_OPTIONS: &[&str] = &[
    "enable.idempotence",
    "acks",
    "linger.ms",
    "queue.buffering.max.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "compression.type",
    "compression.codec",
    "batch.size",
    "batch.num.messages",
    "partitioner",
    "retries",
    "message.send.max.retries",
];

fn config_error(field: &str, reason: &str) -> Error {
    Error::Config(format!("kafka consumer: {field} {reason}"))
}

/// What a [`KafkaInboxConsumer`] did, returned by
/// [`KafkaInboxConsumer::run`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerStats {
    /// Messages whose handler ran and committed.
    pub processed: u64,
    /// Messages whose event was processed before; the handler did not run.
    pub duplicates: u64,
    /// Messages sent to the dead-letter topic (poison, or out of attempts).
    pub dead_lettered: u64,
    /// Retries: failed handler attempts, database failures and failed
    /// dead-letter sends that were tried again.
    pub retried: u64,
}

/// A Kafka consumer group feeding a [`Handler`] through an [`Inbox`]; see
/// the [module documentation](self).
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
/// use outbox::Event;
/// use outbox_inbox::Inbox;
/// use outbox_inbox::kafka::{KafkaConsumerConfig, KafkaInboxConsumer};
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
    inbox: Inbox<DB>,
    handler: Arc<H>,
    config: KafkaConsumerConfig,
    consumer: StreamConsumer<InboxContext>,
    dead_letters: DeadLetters,
}

impl<DB: InboxBackend, H: Handler<DB>> std::fmt::Debug for KafkaInboxConsumer<DB, H> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("KafkaInboxConsumer")
            .field("consumer", &self.inbox.consumer())
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
        let context = InboxContext::default();
        let consumer: StreamConsumer<InboxContext> = config
            .consumer_config()
            .create_with_context(context)
            .map_err(Error::Kafka)?;
        let producer: FutureProducer<LogContext> = config
            .producer_config()
            .create_with_context(LogContext)
            .map_err(Error::Kafka)?;
        let admin: AdminClient<LogContext> = config
            .admin_config()
            .create_with_context(LogContext)
            .map_err(Error::Kafka)?;
        let dead_letters = DeadLetters {
            producer,
            admin,
            config: config.clone(),
            existing: Mutex::new(HashSet::new()),
        };
        Ok(KafkaInboxConsumer {
            inbox,
            handler: Arc::new(handler),
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
            inbox,
            handler,
            config,
            consumer,
            dead_letters,
        } = self;
        let consumer = Arc::new(consumer);
        // Declared after `consumer`, so dropped before it: when `run` is
        // dropped mid-way (its task aborted), the consumer's close does not
        // commit anything (as after a crash); a normal stop commits below.
        let _closing = ClosingGuard(Arc::clone(consumer.context()));

        let prune_stop = CancellationToken::new();
        let _prune_guard = prune_stop.clone().drop_guard();
        let pruning = tokio::spawn(prune_until_stopped(
            inbox.pool().clone(),
            inbox.consumer().to_owned(),
            config.prune.clone(),
            prune_stop.clone(),
        ));

        let shared = Arc::new(Shared {
            inbox,
            handler,
            dead_letters,
            retried: AtomicU64::new(0),
            max_attempts: config.max_attempts,
            retry_base_delay: config.retry_base_delay,
            retry_max_delay: config.retry_max_delay,
        });

        if config.create_dead_letter_topics {
            for topic in config.topics.iter().filter(|topic| !topic.starts_with('^')) {
                let dead_letter_topic = config.dead_letter_topic_for(topic);
                let created = tokio::select! {
                    () = stop.cancelled() => break,
                    created = shared.dead_letters.ensure_topic(&dead_letter_topic) => created,
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

        let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&topics).map_err(Error::Kafka)?;
        tracing::info!(
            group_id = %config.group_id,
            topics = ?config.topics,
            consumer = %shared.inbox.consumer(),
            max_in_flight = config.max_in_flight,
            "kafka inbox consumer started"
        );

        let mut state = RunState {
            shared: Arc::clone(&shared),
            stopping: stop.child_token(),
            tasks: JoinSet::new(),
            lanes: HashMap::new(),
            in_flight: 0,
            stats: ConsumerStats::default(),
        };
        let commit_each = config.commit_interval.is_zero();
        let period = if commit_each {
            Duration::from_secs(3600)
        } else {
            config.commit_interval
        };
        let mut commit_tick =
            tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        commit_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        loop {
            // Rebalance callbacks run inside `recv`.
            state.purge_revoked(consumer.context());
            let can_fetch = state.in_flight < config.max_in_flight;
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                Some(joined) = state.tasks.join_next(), if !state.tasks.is_empty() => {
                    state.finished(joined, consumer.context());
                    if commit_each {
                        commit(&consumer, CommitMode::Async);
                    }
                }
                _ = commit_tick.tick() => commit(&consumer, CommitMode::Async),
                received = consumer.recv(), if can_fetch => match received {
                    Ok(message) => {
                        let message = ReceivedMessage::from_kafka(&message);
                        state.purge_revoked(consumer.context());
                        state.received(message, consumer.context());
                    }
                    Err(error) => {
                        tracing::warn!(%error, "kafka consumer error");
                        tokio::time::sleep(RECEIVE_ERROR_PAUSE).await;
                    }
                },
            }
        }

        tracing::info!(
            in_flight = state.in_flight,
            "kafka inbox consumer stopping; finishing running messages"
        );
        state.stopping.cancel();
        state.drop_waiting();
        while let Some(joined) = state.tasks.join_next().await {
            state.finished(joined, consumer.context());
        }
        // The final commit waits for the broker, and closing the consumer
        // (leaving the group) does too: both off the async workers.
        let closing = Arc::clone(consumer.context());
        let final_commit = tokio::task::spawn_blocking(move || {
            commit_all(&consumer, CommitMode::Sync);
            closing.closing.store(true, Ordering::Relaxed);
            drop(consumer);
        });
        if let Err(error) = final_commit.await {
            tracing::warn!(%error, "final offset commit did not run");
        }
        prune_stop.cancel();
        if let Err(error) = pruning.await {
            tracing::warn!(%error, "inbox pruning task failed");
        }
        let mut stats = state.stats;
        stats.retried = shared.retried.load(Ordering::Relaxed);
        tracing::info!(
            processed = stats.processed,
            duplicates = stats.duplicates,
            dead_lettered = stats.dead_lettered,
            retried = stats.retried,
            "kafka inbox consumer stopped"
        );
        Ok(stats)
    }
}

/// Store the committable offsets of the assigned partitions and commit them.
fn commit(consumer: &StreamConsumer<InboxContext>, mode: CommitMode) {
    let context: &InboxContext = consumer.context();
    let positions = context.offsets().committable(false);
    commit_positions(consumer, context, positions, mode);
}

/// As [`commit`], also for positions committed before (the final commit,
/// in case an asynchronous commit failed unnoticed).
fn commit_all(consumer: &StreamConsumer<InboxContext>, mode: CommitMode) {
    let context: &InboxContext = consumer.context();
    let positions = context.offsets().committable(true);
    commit_positions(consumer, context, positions, mode);
}

/// Store `positions` and commit the stored offsets.
fn commit_positions(
    consumer: &impl Consumer<InboxContext>,
    context: &InboxContext,
    positions: Vec<(TopicPartition, i64)>,
    mode: CommitMode,
) {
    if positions.is_empty() {
        return;
    }
    let mut list = TopicPartitionList::with_capacity(positions.len());
    for ((topic, partition), offset) in &positions {
        if let Err(error) = list.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
            tracing::warn!(topic = %topic, partition, %error, "cannot list an offset to commit");
        }
    }
    // An error here names partitions no longer assigned; the others are stored.
    if let Err(error) = consumer.store_offsets(&list) {
        tracing::debug!(%error, "some offsets were not stored");
    }
    match consumer.commit_consumer_state(mode) {
        Ok(()) => {
            context.offsets().mark_committed(&positions);
            for ((topic, partition), offset) in &positions {
                tracing::trace!(topic = %topic, partition, offset, "offset committed");
            }
        }
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(error) => tracing::warn!(%error, "offset commit failed; retried with the next one"),
    }
}

/// `(topic, partition)`.
type TopicPartition = (String, i32);

/// The messages of one partition with one key: handled one after another.
type LaneKey = (String, i32, Option<Vec<u8>>);

/// A message copied out of librdkafka's buffer.
#[derive(Debug)]
struct ReceivedMessage {
    topic: String,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    /// The partition's generation in [`Offsets`] when it was received.
    generation: u64,
}

impl ReceivedMessage {
    fn from_kafka(message: &impl Message) -> Self {
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|header| (header.key.to_owned(), header.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        ReceivedMessage {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            headers,
            generation: 0,
        }
    }

    fn topic_partition(&self) -> TopicPartition {
        (self.topic.clone(), self.partition)
    }

    fn lane(&self) -> LaneKey {
        (self.topic.clone(), self.partition, self.key.clone())
    }

    fn source(&self) -> String {
        format!("{}/{}/{}", self.topic, self.partition, self.offset)
    }
}

/// How the handling of one message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finished {
    Processed,
    Duplicate,
    DeadLettered,
    /// Given up because the consumer stops; the offset is not committed.
    Abandoned,
}

impl Finished {
    /// Whether the offset may be committed.
    fn is_done(self) -> bool {
        !matches!(self, Finished::Abandoned)
    }
}

/// What every message task needs.
struct Shared<DB: InboxBackend, H: Handler<DB>> {
    inbox: Inbox<DB>,
    handler: Arc<H>,
    dead_letters: DeadLetters,
    retried: AtomicU64,
    max_attempts: u32,
    retry_base_delay: Duration,
    retry_max_delay: Duration,
}

impl<DB: InboxBackend, H: Handler<DB>> Shared<DB, H> {
    /// Exponential backoff for retry number `retry` (1-based), with jitter:
    /// between half and all of `base * 2^(retry-1)`, capped at the maximum.
    fn backoff(&self, retry: u32) -> Duration {
        let exponent = retry.saturating_sub(1).min(31);
        let delay = self
            .retry_base_delay
            .saturating_mul(1u32 << exponent)
            .min(self.retry_max_delay);
        let half = delay / 2;
        let random = RandomState::new().hash_one(retry);
        let jitter_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = if jitter_nanos == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(random % jitter_nanos)
        };
        half + jitter
    }

    /// Wait `delay` unless the consumer stops first; `false` when stopping.
    async fn pause(&self, delay: Duration, stopping: &CancellationToken) -> bool {
        self.retried.fetch_add(1, Ordering::Relaxed);
        tokio::select! {
            () = stopping.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }

    /// Handle one message to the end: processed, duplicate or dead-lettered
    /// (or abandoned when the consumer stops while it waits for a retry).
    async fn handle(&self, message: &ReceivedMessage, stopping: &CancellationToken) -> Finished {
        let headers = message
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_deref()));
        let incoming = match IncomingEvent::from_kafka(
            headers,
            message.payload.as_deref().unwrap_or_default(),
        ) {
            Ok(incoming) => incoming,
            Err(error) => return self.poison(message, &error, stopping).await,
        };
        let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.decode(&incoming)));
        let event = match decoded {
            Ok(Ok(event)) => Arc::new(event),
            Ok(Err(error)) => return self.poison(message, &error, stopping).await,
            Err(panic) => {
                let reason = format!("decoding panicked: {}", panic_text(&*panic));
                tracing::error!(event_id = %incoming.id, %reason, "poison message");
                return self.dead_letter(message, &reason, stopping).await;
            }
        };
        tracing::Span::current().record("event_id", incoming.id.as_str());

        let mut attempts: u32 = 0;
        let mut database_failures: u32 = 0;
        loop {
            let handler = Arc::clone(&self.handler);
            let event_for_attempt = Arc::clone(&event);
            let attempt = self
                .inbox
                .process(&incoming.id, move |tx| {
                    Box::pin(async move { handler.handle(tx, &event_for_attempt).await })
                })
                .instrument(handler_span(self.inbox.consumer(), &incoming));
            let reason = match AssertUnwindSafe(attempt).catch_unwind().await {
                Ok(Ok(Outcome::Processed(()))) => {
                    tracing::debug!(event_id = %incoming.id, attempts = attempts + 1, "event processed");
                    return Finished::Processed;
                }
                Ok(Ok(Outcome::Duplicate)) => {
                    tracing::debug!(event_id = %incoming.id, "duplicate event skipped");
                    return Finished::Duplicate;
                }
                Ok(Err(Error::Database(error))) => {
                    database_failures = database_failures.saturating_add(1);
                    let delay = self.backoff(database_failures);
                    tracing::warn!(
                        event_id = %incoming.id,
                        %error,
                        retry_in = ?delay,
                        "database failed; retrying the message (not counted as an attempt)"
                    );
                    if !self.pause(delay, stopping).await {
                        return Finished::Abandoned;
                    }
                    continue;
                }
                // A handler error, or one this version does not know:
                // counted, so the message cannot block its key forever.
                Ok(Err(error)) => error.to_string(),
                Err(panic) => format!(
                    "handler panicked for event {}: {}",
                    incoming.id,
                    panic_text(&*panic)
                ),
            };
            database_failures = 0;
            attempts += 1;
            if attempts >= self.max_attempts {
                tracing::error!(
                    event_id = %incoming.id,
                    attempts,
                    error = %reason,
                    "handler failed on every attempt; dead-lettering the message"
                );
                return self.dead_letter(message, &reason, stopping).await;
            }
            let delay = self.backoff(attempts);
            tracing::warn!(
                event_id = %incoming.id,
                attempt = attempts,
                max_attempts = self.max_attempts,
                error = %reason,
                retry_in = ?delay,
                "handler failed; retrying"
            );
            if !self.pause(delay, stopping).await {
                return Finished::Abandoned;
            }
        }
    }

    async fn poison(
        &self,
        message: &ReceivedMessage,
        error: &DecodeError,
        stopping: &CancellationToken,
    ) -> Finished {
        tracing::error!(%error, "poison message; dead-lettering it");
        self.dead_letter(message, &error.to_string(), stopping)
            .await
    }

    /// Produce to the dead-letter topic until the broker acknowledges it.
    async fn dead_letter(
        &self,
        message: &ReceivedMessage,
        reason: &str,
        stopping: &CancellationToken,
    ) -> Finished {
        let mut failures = 0;
        loop {
            match self.dead_letters.send(message, reason).await {
                Ok(topic) => {
                    tracing::warn!(dead_letter_topic = %topic, reason, "message dead-lettered");
                    return Finished::DeadLettered;
                }
                Err(error) => {
                    failures += 1;
                    let delay = self.backoff(failures);
                    tracing::error!(
                        %error,
                        retry_in = ?delay,
                        "cannot dead-letter the message; it stays in place and is retried"
                    );
                    if !self.pause(delay, stopping).await {
                        return Finished::Abandoned;
                    }
                }
            }
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a non-text panic".to_owned()
    }
}

/// The message loop's bookkeeping.
struct RunState<DB: InboxBackend, H: Handler<DB>> {
    shared: Arc<Shared<DB, H>>,
    stopping: CancellationToken,
    tasks: JoinSet<(Arc<ReceivedMessage>, Finished)>,
    /// Keys with a running message, and the messages waiting behind it.
    lanes: HashMap<LaneKey, VecDeque<ReceivedMessage>>,
    /// Messages received and not finished: running or waiting in a lane.
    in_flight: usize,
    stats: ConsumerStats,
}

impl<DB: InboxBackend, H: Handler<DB>> RunState<DB, H> {
    fn received(&mut self, mut message: ReceivedMessage, context: &InboxContext) {
        message.generation = context
            .offsets()
            .received(message.topic_partition(), message.offset);
        self.in_flight += 1;
        match self.lanes.entry(message.lane()) {
            Entry::Occupied(mut waiting) => {
                tracing::trace!(
                    topic = %message.topic,
                    partition = message.partition,
                    offset = message.offset,
                    "message waits for an earlier one of its key"
                );
                waiting.get_mut().push_back(message);
            }
            Entry::Vacant(lane) => {
                lane.insert(VecDeque::new());
                self.start(message);
            }
        }
    }

    fn start(&mut self, message: ReceivedMessage) {
        let shared = Arc::clone(&self.shared);
        let stopping = self.stopping.clone();
        let message = Arc::new(message);
        let span = tracing::info_span!(
            "inbox_message",
            topic = %message.topic,
            partition = message.partition,
            offset = message.offset,
            event_id = tracing::field::Empty,
        );
        self.tasks.spawn(
            async move {
                let work = shared.handle(&message, &stopping);
                let finished = match AssertUnwindSafe(work).catch_unwind().await {
                    Ok(finished) => finished,
                    Err(panic) => {
                        tracing::error!(
                            panic = %panic_text(&*panic),
                            "message handling panicked; the offset stays uncommitted"
                        );
                        Finished::Abandoned
                    }
                };
                (message, finished)
            }
            .instrument(span),
        );
    }

    fn finished(
        &mut self,
        joined: Result<(Arc<ReceivedMessage>, Finished), tokio::task::JoinError>,
        context: &InboxContext,
    ) {
        let (message, finished) = match joined {
            Ok(done) => done,
            Err(error) => {
                // Tasks catch panics and are only aborted with the consumer.
                tracing::error!(%error, "message task ended abnormally");
                return;
            }
        };
        self.in_flight = self.in_flight.saturating_sub(1);
        match finished {
            Finished::Processed => self.stats.processed += 1,
            Finished::Duplicate => self.stats.duplicates += 1,
            Finished::DeadLettered => self.stats.dead_lettered += 1,
            Finished::Abandoned => {}
        }
        if finished.is_done() {
            context.offsets().finished(
                message.topic_partition(),
                message.offset,
                message.generation,
            );
        }
        let lane = message.lane();
        let next = match self.lanes.get_mut(&lane) {
            Some(waiting) if !self.stopping.is_cancelled() => waiting.pop_front(),
            _ => None,
        };
        match next {
            Some(next) => self.start(next),
            None => {
                if let Some(waiting) = self.lanes.remove(&lane) {
                    self.in_flight = self.in_flight.saturating_sub(waiting.len());
                }
            }
        }
    }

    /// Forget the waiting messages of partitions revoked in a rebalance:
    /// their new owner reads them again from the committed offset.
    fn purge_revoked(&mut self, context: &InboxContext) {
        let revoked = std::mem::take(
            &mut *context
                .revoked
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if revoked.is_empty() {
            return;
        }
        let mut dropped = 0;
        for (lane, waiting) in &mut self.lanes {
            if revoked.contains(&(lane.0.clone(), lane.1)) {
                dropped += waiting.len();
                waiting.clear();
            }
        }
        self.in_flight = self.in_flight.saturating_sub(dropped);
        tracing::info!(
            partitions = ?revoked,
            dropped_waiting = dropped,
            "partitions revoked"
        );
    }

    /// On stop: the messages waiting behind a running one are left for
    /// redelivery.
    fn drop_waiting(&mut self) {
        for waiting in self.lanes.values_mut() {
            self.in_flight = self.in_flight.saturating_sub(waiting.len());
            waiting.clear();
        }
    }
}

/// Finished and unfinished offsets of the partitions this consumer reads.
#[derive(Debug, Default)]
struct Offsets {
    partitions: HashMap<TopicPartition, PartitionOffsets>,
    next_generation: u64,
}

#[derive(Debug)]
struct PartitionOffsets {
    /// Changes when the partition is revoked and assigned again, so that
    /// messages of an earlier assignment do not move the new one's offsets.
    generation: u64,
    /// Received and not finished, with multiplicity.
    unfinished: BTreeMap<i64, u32>,
    /// The offset after the highest received.
    next: i64,
    /// The last committed position, if any.
    committed: Option<i64>,
}

impl PartitionOffsets {
    /// The offset to commit: the lowest unfinished one, else the next.
    fn position(&self) -> i64 {
        self.unfinished.keys().next().copied().unwrap_or(self.next)
    }
}

impl Offsets {
    fn received(&mut self, partition: TopicPartition, offset: i64) -> u64 {
        let next_generation = &mut self.next_generation;
        let entry = self.partitions.entry(partition).or_insert_with(|| {
            *next_generation += 1;
            PartitionOffsets {
                generation: *next_generation,
                unfinished: BTreeMap::new(),
                next: offset,
                committed: None,
            }
        });
        *entry.unfinished.entry(offset).or_insert(0) += 1;
        entry.next = entry.next.max(offset + 1);
        entry.generation
    }

    fn finished(&mut self, partition: TopicPartition, offset: i64, generation: u64) {
        let Some(entry) = self.partitions.get_mut(&partition) else {
            return;
        };
        if entry.generation != generation {
            return;
        }
        if let Some(count) = entry.unfinished.get_mut(&offset) {
            *count -= 1;
            if *count == 0 {
                entry.unfinished.remove(&offset);
            }
        }
    }

    /// Positions that moved since the last commit (`all`: every known one).
    fn committable(&self, all: bool) -> Vec<(TopicPartition, i64)> {
        self.partitions
            .iter()
            .filter_map(|(partition, entry)| {
                let position = entry.position();
                (all || entry.committed < Some(position)).then(|| (partition.clone(), position))
            })
            .collect()
    }

    /// An asynchronous commit failed: commit these partitions again.
    fn commit_failed(&mut self, list: &TopicPartitionList) {
        for element in list.elements() {
            if let Some(entry) = self
                .partitions
                .get_mut(&(element.topic().to_owned(), element.partition()))
            {
                entry.committed = None;
            }
        }
    }

    fn mark_committed(&mut self, positions: &[(TopicPartition, i64)]) {
        for (partition, position) in positions {
            if let Some(entry) = self.partitions.get_mut(partition) {
                entry.committed = Some(entry.committed.map_or(*position, |c| c.max(*position)));
            }
        }
    }

    /// Forget `partitions`; returns their positions to commit.
    fn revoke(&mut self, partitions: &[TopicPartition]) -> Vec<(TopicPartition, i64)> {
        partitions
            .iter()
            .filter_map(|partition| {
                let entry = self.partitions.remove(partition)?;
                let position = entry.position();
                (entry.committed < Some(position)).then(|| (partition.clone(), position))
            })
            .collect()
    }
}

/// The consumer's librdkafka context: logs, and the offsets bookkeeping
/// the rebalance callbacks need.
#[derive(Debug, Default)]
struct InboxContext {
    offsets: Mutex<Offsets>,
    /// Partitions revoked since the message loop last looked.
    revoked: Mutex<Vec<TopicPartition>>,
    /// Set when the consumer is dropped without a normal stop.
    closing: AtomicBool,
}

impl InboxContext {
    fn offsets(&self) -> std::sync::MutexGuard<'_, Offsets> {
        self.offsets.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct ClosingGuard(Arc<InboxContext>);

impl Drop for ClosingGuard {
    fn drop(&mut self) {
        self.0.closing.store(true, Ordering::Relaxed);
    }
}

fn forward_log(level: RDKafkaLogLevel, facility: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(facility, message, "librdkafka"),
        RDKafkaLogLevel::Warning => tracing::warn!(facility, message, "librdkafka"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(facility, message, "librdkafka")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(facility, message, "librdkafka"),
    }
}

impl ClientContext for InboxContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        forward_log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka consumer client error");
    }
}

impl ConsumerContext for InboxContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                let partitions: Vec<TopicPartition> = list
                    .elements()
                    .iter()
                    .map(|element| (element.topic().to_owned(), element.partition()))
                    .collect();
                let positions = self.offsets().revoke(&partitions);
                if !self.closing.load(Ordering::Relaxed) {
                    // Commit what is finished before another member takes
                    // the partitions over; a commit here is synchronous, as
                    // the partitions are gone afterwards.
                    commit_positions(consumer, self, positions, CommitMode::Sync);
                }
                self.revoked
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(partitions);
            }
            Rebalance::Assign(list) => {
                tracing::info!(
                    partitions = ?list
                        .elements()
                        .iter()
                        .map(|element| format!("{}/{}", element.topic(), element.partition()))
                        .collect::<Vec<_>>(),
                    "partitions assigned"
                );
            }
            Rebalance::Error(error) => tracing::warn!(%error, "kafka rebalance failed"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => {}
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                tracing::warn!(
                    %error,
                    partitions = offsets.count(),
                    "offset commit failed; retried with the next one"
                );
                self.offsets().commit_failed(offsets);
            }
        }
    }
}

/// Context of the dead-letter producer and the admin client: logs only.
struct LogContext;

impl ClientContext for LogContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        forward_log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka dead-letter client error");
    }
}

/// Produces dead letters, creating their topics when missing.
struct DeadLetters {
    producer: FutureProducer<LogContext>,
    admin: AdminClient<LogContext>,
    config: KafkaConsumerConfig,
    /// Topics known to exist.
    existing: Mutex<HashSet<String>>,
}

impl DeadLetters {
    /// Create `topic` unless it is known to exist.
    async fn ensure_topic(&self, topic: &str) -> Result<(), Error> {
        if self
            .existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(topic)
        {
            return Ok(());
        }
        let new_topic = NewTopic::new(
            topic,
            self.config.dead_letter_partitions,
            TopicReplication::Fixed(self.config.dead_letter_replication_factor),
        );
        let options = AdminOptions::new()
            .request_timeout(Some(ADMIN_TIMEOUT))
            .operation_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .admin
            .create_topics([&new_topic], &options)
            .await
            .map_err(Error::Kafka)?;
        for result in results {
            match result {
                Ok(_) => tracing::info!(topic, "created the dead-letter topic"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(Error::Kafka(KafkaError::AdminOp(code)));
                }
            }
        }
        self.existing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.to_owned());
        Ok(())
    }

    /// Produce `message` with the dead-letter headers and wait for the
    /// broker's acknowledgement; returns the dead-letter topic.
    async fn send(&self, message: &ReceivedMessage, reason: &str) -> Result<String, Error> {
        let topic = self.config.dead_letter_topic_for(&message.topic);
        if self.config.create_dead_letter_topics
            && let Err(error) = self.ensure_topic(&topic).await
        {
            // Perhaps it exists and only creating is not allowed: try anyway.
            tracing::warn!(topic = %topic, %error, "cannot create the dead-letter topic");
        }
        let mut headers = OwnedHeaders::new_with_capacity(message.headers.len() + 2);
        for (name, value) in &message.headers {
            headers = headers.insert(Header {
                key: name.as_str(),
                value: value.as_deref(),
            });
        }
        let source = message.source();
        headers = headers
            .insert(Header {
                key: DEAD_LETTER_REASON_HEADER,
                value: Some(reason),
            })
            .insert(Header {
                key: DEAD_LETTER_SOURCE_HEADER,
                value: Some(source.as_str()),
            });
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic).headers(headers);
        if let Some(key) = &message.key {
            record = record.key(key.as_slice());
        }
        if let Some(payload) = &message.payload {
            record = record.payload(payload.as_slice());
        }
        self.producer
            .send(record, Duration::from_secs(5))
            .await
            .map_err(|(error, _)| Error::Kafka(error))?;
        Ok(topic)
    }
}
