//! [`RelayConfig`]: the relay's tuning, read from a TOML file (`--config`).
//!
//! Every field has a default, so an empty file, or none, is a valid
//! configuration; `relay/examples/relay.toml` lists every field with its
//! default and a test keeps the two equal. Unknown fields are errors at
//! every level, so a misspelt setting cannot be silently ignored.
//!
//! Durations are strings of whole numbers with a unit: `ms`, `s`, `m`, `h`
//! or `d`, e.g. `"250ms"`, `"30s"`, `"7d"`, or combined, `"1m30s"`.
//!
//! Every error is one line naming the file, the field, and for a parse
//! error its line and column:
//!
//! ```text
//! config relay.toml: retry.base_delay: unknown unit `w` in "2w"; use ms, s, m, h or d (line 7, column 14)
//! ```
//!
//! This module holds the schema and its defaults; the rules between fields
//! are in `validate`, duration parsing in `duration`, the field
//! deserializers in `deserialize` and the one-line errors in `diagnostics`.

mod broker_url;
mod byte_size;
mod database_url;
mod deserialize;
mod diagnostics;
mod duration;
mod nats;
mod publisher;
mod redis_streams;
mod relay_settings;
mod replay_time;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::Error;

pub use broker_url::{BrokerUrl, DEFAULT_BROKER, resolve_broker_url};
pub use byte_size::parse_byte_size;
pub use database_url::{DEFAULT_DATABASE_URL, DatabaseUrl, resolve_database_url};
pub use duration::parse_duration;
// What the relay builds from the configuration: the crate's own, and this
// project's tests' with the `test-util` feature.
#[cfg(not(feature = "test-util"))]
pub(crate) use {
    database_url::open_store, publisher::build_publisher, relay_settings::relay_settings,
};
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub use {database_url::open_store, publisher::build_publisher, relay_settings::relay_settings};

use diagnostics::describe_toml_error;

pub use crate::http::ui::UiTokens;
pub use crate::publish::{RoutingKey, StreamKey, SubjectTemplate};
pub use crate::source::{DEFAULT_MAX_BATCH_BYTES, SlotName};
pub use nats::{NatsConfig, NatsSubjectConfig};
pub use redis_streams::{RedisConfig, RedisStreamConfig};

/// Events per batch when polling, unless `batch_size` says otherwise.
pub const DEFAULT_POLLING_BATCH_SIZE: u32 = 500;
/// Events per batch on the logical source, unless `batch_size` says
/// otherwise.
pub const DEFAULT_LOGICAL_BATCH_SIZE: u32 = 2000;
/// The relay's settings. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RelayConfig {
    /// Events read and published per batch, from 1 to 10000. Default `500`
    /// when polling and `2000` with `source = "logical"` (see
    /// [`RelayConfig::batch_size`]).
    pub batch_size: Option<u32>,

    /// The payload bytes the relay holds for publishing at once: what one
    /// fetch returns and the batches in flight to the broker together, and
    /// with `source = "logical"` the stream's buffer too (the stream stops
    /// reading while it is full; the slot keeps the rest). A fetch returns
    /// at least one event, so an event larger than this still goes out,
    /// alone, and the stream takes a whole transaction at a time. A whole
    /// number of bytes or a size such as `"32MiB"`, from `64KiB` to `4GiB`.
    /// Default `"32MiB"`.
    #[serde(deserialize_with = "deserialize::byte_size")]
    pub max_batch_bytes: u64,

    /// How long a relay instance owns a partition without renewing its
    /// lease; the lease is renewed every third of it, and another instance
    /// takes a crashed instance's partitions over once it expires. At least
    /// `2s`. Default `"30s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub lease_duration: Duration,

    /// The longest one wave of a batch may take to be acknowledged. A wave
    /// is sent only while the partition leases stay valid at least this
    /// long, and the clients' own acknowledgement waits
    /// (`kafka.message_timeout`, `amqp.confirm_timeout`) must be shorter,
    /// so every acknowledgement arrives while the lease is held. Less than
    /// half of `lease_duration`. Default `"10s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub publish_timeout: Duration,

    /// The shortest wait between two polls of an idle partition: polling
    /// starts here when work runs out and backs off towards
    /// `poll_interval_max`. Default `"10ms"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub poll_interval_min: Duration,

    /// The longest wait between two polls of an idle partition, so the
    /// latency of the first event after a quiet spell. At least
    /// `poll_interval_min`. Default `"1s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub poll_interval_max: Duration,

    /// How long a stop (SIGTERM, SIGINT) waits for in-flight batches to be
    /// acknowledged before releasing them unpublished and exiting. More
    /// than zero. Default `"30s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub shutdown_timeout: Duration,

    /// How long every publish may fail with the broker unavailable while
    /// this instance holds partitions. Past it the instance reports not
    /// ready on `/readyz`, rebuilds its broker client and, when other relay
    /// instances are live, hands its partitions to them and stands by until
    /// its client can reach the broker again. An instance that is alone
    /// keeps its partitions. At least `lease_duration`. Default: none set,
    /// which means three times `lease_duration`.
    #[serde(deserialize_with = "deserialize::optional_duration")]
    pub handover_after: Option<Duration>,

    /// Where the relay finds committed events: `"poll"` reads the table
    /// under partition leases (every backend); `"logical"` streams
    /// `outbox_events` inserts from a PostgreSQL replication slot (PostgreSQL
    /// with `wal_level = logical` only). `--source` or `OUTBOX_SOURCE`
    /// override it. Default `"poll"`.
    pub source: EventSourceKind,

    /// The replication slot `source = "logical"` streams from; the
    /// publication has the same name. Both are created when missing. 1 to
    /// 63 lowercase letters, digits and underscores. `--slot` or
    /// `OUTBOX_SLOT` override it. Default `"outbox_relay"`.
    pub slot: String,

    /// This instance's name in partition leases and logs. Default: none,
    /// and the relay makes one up from the host name, the process id and a
    /// random suffix.
    pub instance_id: Option<String>,

    /// Retries of events the broker failed to take.
    pub retry: RetryConfig,

    /// What becomes of an event that used up its retries.
    pub dead_letter: DeadLetterConfig,

    /// Deletion of published events.
    pub retention: RetentionConfig,

    /// The Kafka producer (used with `--broker kafka://...`).
    pub kafka: KafkaConfig,

    /// The AMQP publisher (used with `--broker amqp://...`).
    pub amqp: AmqpConfig,

    /// The Redis Streams publisher (used with `--broker redis://...`).
    pub redis: RedisConfig,

    /// The NATS JetStream publisher (used with `--broker nats://...`).
    pub nats: NatsConfig,

    /// The HTTP endpoint for health and metrics.
    pub http: HttpConfig,

    /// The operators' page at `/ui` on the HTTP endpoint.
    pub ui: UiConfig,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch_size: None,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            lease_duration: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(10),
            poll_interval_min: Duration::from_millis(10),
            poll_interval_max: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(30),
            handover_after: None,
            source: EventSourceKind::default(),
            slot: crate::source::DEFAULT_SLOT.to_owned(),
            instance_id: None,
            retry: RetryConfig::default(),
            dead_letter: DeadLetterConfig::default(),
            retention: RetentionConfig::default(),
            kafka: KafkaConfig::default(),
            amqp: AmqpConfig::default(),
            redis: RedisConfig::default(),
            nats: NatsConfig::default(),
            http: HttpConfig::default(),
            ui: UiConfig::default(),
        }
    }
}

/// Where the relay finds committed events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EventSourceKind {
    /// `"poll"`: read pending rows of the leased partitions, mark them
    /// published.
    #[default]
    Poll,
    /// `"logical"`: stream committed inserts from a replication slot
    /// (PostgreSQL only); published events are not written to.
    Logical,
}

impl EventSourceKind {
    /// The name used in flags and files.
    pub fn as_str(self) -> &'static str {
        match self {
            EventSourceKind::Poll => "poll",
            EventSourceKind::Logical => "logical",
        }
    }
}

/// `[retry]`: exponential backoff of failed publications.
///
/// Attempt `n` (from 1) of an event waits `base_delay * 2^(n-1)`, capped
/// at `max_delay`; with `jitter` a random extra of up to that value again
/// is added, so the wait lies between the value and twice it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RetryConfig {
    /// The wait after the first failure. More than zero. Default `"1s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub base_delay: Duration,

    /// The longest wait between two attempts. At least `base_delay`.
    /// Default `"5m"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub max_delay: Duration,

    /// Failed attempts after which an event is dead-lettered. At least 1.
    /// Default `10`.
    pub max_attempts: u32,

    /// Whether to randomize each wait, so that events that failed together
    /// do not retry together. Default `true`.
    pub jitter: bool,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(5 * 60),
            max_attempts: 10,
            jitter: true,
        }
    }
}

/// `[dead_letter]`: events that used up their retries.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct DeadLetterConfig {
    /// What a dead event does to the later events of its aggregate.
    /// Default `"hold"`.
    pub policy: DeadLetterPolicy,
}

/// Whether a dead event holds back the later events of its aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DeadLetterPolicy {
    /// `"hold"`: the aggregate's later events wait until an operator
    /// retries or discards the dead one, so per-aggregate order is never
    /// broken. Other aggregates keep flowing.
    #[default]
    Hold,
    /// `"skip"`: the aggregate's later events are published past the dead
    /// one, which stays visible to operators. Gives up per-aggregate order
    /// for that event.
    Skip,
}

/// `[retention]`: deletion of published events. Unpublished and dead
/// events are never deleted by it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RetentionConfig {
    /// Whether published events are deleted at all. Default `true`.
    pub enabled: bool,

    /// How long a published event is kept after its publication; `"0s"`
    /// deletes it as it is acknowledged, in the statement that would mark
    /// it published (polling), so nothing is left for `replay`. Default
    /// `"7d"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub published: Duration,

    /// The wait between two deletion passes. More than zero.
    /// Default `"1m"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub interval: Duration,

    /// Rows deleted per statement, so a pass never holds long locks; a
    /// pass repeats batches until nothing is left to delete. From 1 to
    /// 100000. Default `1000`.
    pub batch_size: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            enabled: true,
            published: Duration::from_secs(7 * 24 * 60 * 60),
            interval: Duration::from_secs(60),
            batch_size: 1000,
        }
    }
}

/// `[kafka]`: the Kafka producer. It always runs with idempotence on,
/// `acks=all` and a partitioner that follows the key; options that would
/// weaken that are refused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct KafkaConfig {
    /// How long the producer tries to deliver one message
    /// (librdkafka's `message.timeout.ms`). More than zero and less than
    /// `publish_timeout`, so that a delivery report always arrives before
    /// the batch gives up. Default `"5s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub message_timeout: Duration,

    /// Whether the relay creates a topic it finds missing, with
    /// `new_topic_partitions` partitions and `new_topic_replication_factor`
    /// replicas. Default `false`: an event for a missing topic fails and
    /// is retried.
    pub create_missing_topics: bool,

    /// Partitions of a topic created by `create_missing_topics`. At least
    /// 1. Default `3`.
    pub new_topic_partitions: i32,

    /// Replicas of each partition of a topic created by
    /// `create_missing_topics`; at most the number of brokers. At least 1.
    /// Default `1`.
    pub new_topic_replication_factor: i32,

    /// Further librdkafka settings, passed through as given
    /// (`[kafka.options]`, e.g. `"linger.ms" = 5`,
    /// `"security.protocol" = "sasl_ssl"`). Integers, floats and booleans
    /// are turned into their text. `bootstrap.servers` comes from
    /// `--broker`, `message.timeout.ms` from `message_timeout`; settings
    /// that would turn idempotence off, weaken `acks` or spread one key
    /// over partitions (`partitioner = "random"`) are refused.
    /// Default: none.
    #[serde(deserialize_with = "deserialize::kafka_options")]
    pub options: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            message_timeout: Duration::from_secs(5),
            create_missing_topics: false,
            new_topic_partitions: 3,
            new_topic_replication_factor: 1,
            options: BTreeMap::new(),
        }
    }
}

/// `[amqp]`: the AMQP 0-9-1 (RabbitMQ) publisher. An event goes to the
/// exchange named by its `topic`, with the routing key chosen by
/// [`AmqpConfig::routing_key_for`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AmqpConfig {
    /// How long a publish waits for the broker's publisher confirm. More
    /// than zero and less than `publish_timeout`. Default `"5s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub confirm_timeout: Duration,

    /// How long connecting to the broker may take. More than zero.
    /// Default `"5s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub connect_timeout: Duration,

    /// The routing key of topics without a route of their own:
    /// `"event_type"` uses each event's type, any other string is used as
    /// it is. Default `"event_type"`.
    pub default_routing_key: RoutingKey,

    /// Routes per topic (exchange): `[amqp.routing."orders"]` with
    /// `routing_key = "..."`. Default: none.
    pub routing: BTreeMap<String, AmqpRoute>,
}

impl Default for AmqpConfig {
    fn default() -> Self {
        AmqpConfig {
            confirm_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            default_routing_key: RoutingKey::EventType,
            routing: BTreeMap::new(),
        }
    }
}

impl AmqpConfig {
    /// The routing key of an event published to the exchange `topic`: the
    /// topic's route if it has one, else `default_routing_key`.
    pub fn routing_key_for<'a>(&'a self, topic: &str, event_type: &'a str) -> &'a str {
        let routing_key = self
            .routing
            .get(topic)
            .map_or(&self.default_routing_key, |route| &route.routing_key);
        match routing_key {
            RoutingKey::EventType => event_type,
            RoutingKey::Fixed(key) => key,
        }
    }
}

/// `[amqp.routing."<topic>"]`: how events of one topic are routed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AmqpRoute {
    /// The routing key, `"event_type"` for each event's type. Required.
    pub routing_key: RoutingKey,
}

/// `[http]`: the HTTP endpoint for health checks and metrics.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct HttpConfig {
    /// The address to listen on, an IP address and a port
    /// (`"0.0.0.0:9090"`, `"[::1]:9090"`; port 0 picks a free one).
    /// Default `"127.0.0.1:9090"`.
    #[serde(deserialize_with = "deserialize::socket_addr")]
    pub listen: SocketAddr,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
        }
    }
}

/// `[ui]`: the operators' page, served at `/ui` by the HTTP endpoint
/// (`docs/operations.md`, "The operators' page"). Its actions need a named
/// token (`--ui-token`, `OUTBOX_UI_TOKEN`, `--ui-token-file` or
/// `token_file`); without one it is read-only.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct UiConfig {
    /// Whether the HTTP endpoint serves the page. Default `true`: the
    /// endpoint listens on loopback by default; beyond it, put a reverse
    /// proxy with TLS in front.
    pub enabled: bool,

    /// A file of the page's tokens, one `NAME=SECRET` a line (`#`
    /// comments), read as the relay starts, besides those of the command
    /// line. Not empty. Default: none.
    pub token_file: Option<PathBuf>,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            enabled: true,
            token_file: None,
        }
    }
}

impl RelayConfig {
    /// Events per batch: `batch_size` when set, else the source's default.
    /// Polling reads 500 at a time: each batch costs a fetch and a mark
    /// whose work grows with it. The logical source reads 2000: its batches
    /// come from the stream already in memory and write nothing, so a
    /// larger batch only saves broker round trips.
    ///
    /// ```
    /// use outbox_relay::config::{EventSourceKind, RelayConfig};
    ///
    /// let mut config = RelayConfig::default();
    /// assert_eq!(config.batch_size(), 500);
    /// config.source = EventSourceKind::Logical;
    /// assert_eq!(config.batch_size(), 2000);
    /// config.batch_size = Some(100);
    /// assert_eq!(config.batch_size(), 100);
    /// ```
    pub fn batch_size(&self) -> u32 {
        self.batch_size.unwrap_or(match self.source {
            EventSourceKind::Poll => DEFAULT_POLLING_BATCH_SIZE,
            EventSourceKind::Logical => DEFAULT_LOGICAL_BATCH_SIZE,
        })
    }

    /// Reads and checks the configuration file at `path`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the file when it cannot be read, is not
    /// valid TOML, has an unknown or ill-typed field, or fails
    /// [`RelayConfig::validate`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let path_for_errors = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| Error::Config {
            path: path_for_errors.clone(),
            reason: format!("cannot read the file: {error}"),
        })?;
        RelayConfig::from_toml_str(&text, &path_for_errors)
    }

    /// Parses and checks a configuration; `path_for_errors` names its
    /// source in errors.
    ///
    /// # Errors
    ///
    /// [`Error::Config`], one line naming the field, and for syntax and
    /// type errors the line and column.
    pub fn from_toml_str(text: &str, path_for_errors: &str) -> Result<Self, Error> {
        let config: RelayConfig = toml::from_str(text).map_err(|error| Error::Config {
            path: path_for_errors.to_owned(),
            reason: describe_toml_error(text, &error),
        })?;
        config.check().map_err(|problem| Error::Config {
            path: path_for_errors.to_owned(),
            reason: problem.describe(Some(text)),
        })?;
        Ok(config)
    }

    /// Checks ranges and the relations between fields.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] with the path `--config`, naming the first field
    /// that is out of range.
    pub fn validate(&self) -> Result<(), Error> {
        self.check().map_err(|problem| Error::Config {
            path: "--config".to_owned(),
            reason: problem.describe(None),
        })
    }

    /// How often a partition lease is renewed: a third of
    /// `lease_duration`, so two renewals can fail before it expires.
    pub fn lease_renewal_interval(&self) -> Duration {
        self.lease_duration / 3
    }

    /// `handover_after`, or its default: three times `lease_duration`.
    pub fn effective_handover_after(&self) -> Duration {
        self.handover_after.unwrap_or(self.lease_duration * 3)
    }

    /// Whether acknowledged events are deleted at once, in the statement
    /// that would mark them published, rather than marked and deleted by a
    /// later retention pass: retention on with `published = "0s"`.
    /// Nothing is then left for `replay`.
    pub fn deletes_on_publish(&self) -> bool {
        self.retention.enabled && self.retention.published.is_zero()
    }

    /// The checked slot of the logical source on `database`, or `None`
    /// when polling: the one place that refuses the logical source on a
    /// database other than PostgreSQL, or a bad `slot`.
    ///
    /// ```
    /// use outbox_relay::config::{DatabaseUrl, EventSourceKind, RelayConfig};
    ///
    /// let mut config = RelayConfig::default();
    /// let sqlite: DatabaseUrl = "sqlite://outbox.db".parse()?;
    /// assert!(config.logical_slot(&sqlite)?.is_none());
    /// config.source = EventSourceKind::Logical;
    /// assert!(config.logical_slot(&sqlite).is_err());
    /// # Ok::<(), outbox_relay::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Logical`] for the logical source on MySQL or SQLite;
    /// [`Error::InvalidArgument`] for a bad slot name.
    pub fn logical_slot(&self, database: &DatabaseUrl) -> Result<Option<SlotName>, Error> {
        self.logical_slot_on(database.backend())
    }

    /// [`RelayConfig::logical_slot`] on a database of `backend`
    /// (`postgres`, `mysql` or `sqlite`).
    pub(crate) fn logical_slot_on(&self, backend: &str) -> Result<Option<SlotName>, Error> {
        if self.source != EventSourceKind::Logical {
            return Ok(None);
        }
        if backend != "postgres" {
            return Err(Error::Logical(format!(
                "the logical source (--source logical) needs PostgreSQL (logical decoding of the \
                 WAL); this database is {backend}: use the polling source (--source poll)"
            )));
        }
        SlotName::parse(&self.slot).map(Some)
    }
}
