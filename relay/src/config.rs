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

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::Error;

/// The relay's settings. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelayConfig {
    /// Events read and published per batch, from 1 to 10000. Default `500`.
    pub batch_size: u32,

    /// How long a relay instance owns a partition without renewing its
    /// lease; the lease is renewed every third of it, and another instance
    /// takes a crashed instance's partitions over once it expires. At least
    /// `2s`. Default `"30s"`.
    #[serde(deserialize_with = "deserialize_duration")]
    pub lease_duration: Duration,

    /// The longest one wave of a batch may take to be acknowledged. A wave
    /// is sent only while the partition leases stay valid at least this
    /// long, and the clients' own acknowledgement waits
    /// (`kafka.message_timeout`, `amqp.confirm_timeout`) must be shorter,
    /// so every acknowledgement arrives while the lease is held. Less than
    /// half of `lease_duration`. Default `"10s"`.
    #[serde(deserialize_with = "deserialize_duration")]
    pub publish_timeout: Duration,

    /// The shortest wait between two polls of an idle partition: polling
    /// starts here when work runs out and backs off towards
    /// `poll_interval_max`. Default `"10ms"`.
    #[serde(deserialize_with = "deserialize_duration")]
    pub poll_interval_min: Duration,

    /// The longest wait between two polls of an idle partition, so the
    /// latency of the first event after a quiet spell. At least
    /// `poll_interval_min`. Default `"1s"`.
    #[serde(deserialize_with = "deserialize_duration")]
    pub poll_interval_max: Duration,

    /// How long a stop (SIGTERM, SIGINT) waits for in-flight batches to be
    /// acknowledged before releasing them unpublished and exiting. More
    /// than zero. Default `"30s"`.
    #[serde(deserialize_with = "deserialize_duration")]
    pub shutdown_timeout: Duration,

    /// How long every publish may fail with the broker unavailable while
    /// this instance holds partitions. Past it the instance reports not
    /// ready on `/readyz`, rebuilds its broker client and, when other relay
    /// instances are live, hands its partitions to them and stands by until
    /// its client can reach the broker again. An instance that is alone
    /// keeps its partitions. At least `lease_duration`. Default: none set,
    /// which means three times `lease_duration`.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    pub handover_after: Option<Duration>,

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

    /// The HTTP endpoint for health and metrics.
    pub http: HttpConfig,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch_size: 500,
            lease_duration: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(10),
            poll_interval_min: Duration::from_millis(10),
            poll_interval_max: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(30),
            handover_after: None,
            instance_id: None,
            retry: RetryConfig::default(),
            dead_letter: DeadLetterConfig::default(),
            retention: RetentionConfig::default(),
            kafka: KafkaConfig::default(),
            amqp: AmqpConfig::default(),
            http: HttpConfig::default(),
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
pub struct RetryConfig {
    /// The wait after the first failure. More than zero. Default `"1s"`.
    #[serde(deserialize_with = "deserialize_duration")]
    pub base_delay: Duration,

    /// The longest wait between two attempts. At least `base_delay`.
    /// Default `"5m"`.
    #[serde(deserialize_with = "deserialize_duration")]
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
pub struct DeadLetterConfig {
    /// What a dead event does to the later events of its aggregate.
    /// Default `"hold"`.
    pub policy: DeadLetterPolicy,
}

/// Whether a dead event holds back the later events of its aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
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
pub struct RetentionConfig {
    /// Whether published events are deleted at all. Default `true`.
    pub enabled: bool,

    /// How long a published event is kept after its publication; `"0s"`
    /// deletes it on the next pass. Default `"7d"`.
    #[serde(deserialize_with = "deserialize_duration")]
    pub published: Duration,

    /// The wait between two deletion passes. More than zero.
    /// Default `"1m"`.
    #[serde(deserialize_with = "deserialize_duration")]
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

/// `[kafka]`: the Kafka producer. It always runs with idempotence on and
/// `acks=all`; options that would weaken that are refused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// How long the producer tries to deliver one message
    /// (librdkafka's `message.timeout.ms`). More than zero and less than
    /// `publish_timeout`, so that a delivery report always arrives before
    /// the batch gives up. Default `"5s"`.
    #[serde(deserialize_with = "deserialize_duration")]
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
    /// that would turn idempotence off or weaken `acks` are refused.
    /// Default: none.
    #[serde(deserialize_with = "deserialize_kafka_options")]
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
pub struct AmqpConfig {
    /// How long a publish waits for the broker's publisher confirm. More
    /// than zero and less than `publish_timeout`. Default `"5s"`.
    #[serde(deserialize_with = "deserialize_duration")]
    pub confirm_timeout: Duration,

    /// How long connecting to the broker may take. More than zero.
    /// Default `"5s"`.
    #[serde(deserialize_with = "deserialize_duration")]
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
pub struct AmqpRoute {
    /// The routing key, `"event_type"` for each event's type. Required.
    pub routing_key: RoutingKey,
}

/// An AMQP routing key setting. Written in TOML as a string: `"event_type"`
/// or any fixed key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RoutingKey {
    /// `"event_type"`: the event's `event_type`, e.g. `order.created`.
    #[default]
    EventType,
    /// Any other string: this key for every event.
    Fixed(String),
}

impl<'de> Deserialize<'de> for RoutingKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(if text == "event_type" {
            RoutingKey::EventType
        } else {
            RoutingKey::Fixed(text)
        })
    }
}

/// `[http]`: the HTTP endpoint for health checks and metrics.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// The address to listen on, an IP address and a port
    /// (`"0.0.0.0:9090"`, `"[::1]:9090"`; port 0 picks a free one).
    /// Default `"127.0.0.1:9090"`.
    #[serde(deserialize_with = "deserialize_socket_addr")]
    pub listen: SocketAddr,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
        }
    }
}

impl RelayConfig {
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

    fn check(&self) -> Result<(), Problem> {
        check_range(&["batch_size"], self.batch_size, 1, 10_000)?;
        if self.lease_duration < Duration::from_secs(2) {
            return Err(Problem::new(
                &["lease_duration"],
                format!(
                    "{} is too short; use at least 2s, since the lease is renewed every third of it",
                    show(self.lease_duration)
                ),
            ));
        }
        check_positive(&["publish_timeout"], self.publish_timeout)?;
        if self.publish_timeout >= self.lease_duration / 2 {
            return Err(Problem::new(
                &["publish_timeout"],
                format!(
                    "{} must be less than half of lease_duration ({} / 2 = {}), leaving the other \
                     half for marking the batch and renewing the lease: a batch still publishing \
                     when its lease runs out is taken over and published again by another \
                     instance; lower publish_timeout or raise lease_duration",
                    show(self.publish_timeout),
                    show(self.lease_duration),
                    show(self.lease_duration / 2)
                ),
            )
            .related_to(&["lease_duration"]));
        }
        check_positive(&["poll_interval_min"], self.poll_interval_min)?;
        if self.poll_interval_min > self.poll_interval_max {
            return Err(Problem::new(
                &["poll_interval_max"],
                format!(
                    "{} is less than poll_interval_min ({}); the idle poll backs off from \
                     poll_interval_min up to poll_interval_max",
                    show(self.poll_interval_max),
                    show(self.poll_interval_min)
                ),
            )
            .related_to(&["poll_interval_min"]));
        }
        check_positive(&["shutdown_timeout"], self.shutdown_timeout)?;
        if let Some(handover_after) = self.handover_after
            && handover_after < self.lease_duration
        {
            return Err(Problem::new(
                &["handover_after"],
                format!(
                    "{} is shorter than lease_duration ({}); a relay would hand its partitions \
                     over before one lease has passed, on a broker hiccup",
                    show(handover_after),
                    show(self.lease_duration)
                ),
            )
            .related_to(&["lease_duration"]));
        }
        if let Some(instance_id) = &self.instance_id {
            check_instance_id(instance_id)?;
        }
        self.check_retry()?;
        self.check_retention()?;
        self.check_kafka()?;
        self.check_amqp()
    }

    fn check_retry(&self) -> Result<(), Problem> {
        let retry = &self.retry;
        check_positive(&["retry", "base_delay"], retry.base_delay)?;
        if retry.max_delay < retry.base_delay {
            return Err(Problem::new(
                &["retry", "max_delay"],
                format!(
                    "{} is less than retry.base_delay ({}); the backoff grows from base_delay \
                     up to max_delay",
                    show(retry.max_delay),
                    show(retry.base_delay)
                ),
            )
            .related_to(&["retry", "base_delay"]));
        }
        if retry.max_attempts == 0 {
            return Err(Problem::new(
                &["retry", "max_attempts"],
                "0 is out of range; use at least 1 (the first attempt counts)".to_owned(),
            ));
        }
        Ok(())
    }

    fn check_retention(&self) -> Result<(), Problem> {
        check_positive(&["retention", "interval"], self.retention.interval)?;
        check_range(
            &["retention", "batch_size"],
            self.retention.batch_size,
            1,
            100_000,
        )
    }

    fn check_kafka(&self) -> Result<(), Problem> {
        let kafka = &self.kafka;
        check_positive(&["kafka", "message_timeout"], kafka.message_timeout)?;
        if kafka.message_timeout >= self.publish_timeout {
            return Err(Problem::new(
                &["kafka", "message_timeout"],
                format!(
                    "{} must be less than publish_timeout ({}), so that the producer reports a \
                     failed delivery before the batch stops waiting for it",
                    show(kafka.message_timeout),
                    show(self.publish_timeout)
                ),
            )
            .related_to(&["publish_timeout"]));
        }
        if kafka.new_topic_partitions < 1 {
            return Err(Problem::new(
                &["kafka", "new_topic_partitions"],
                format!(
                    "{} is out of range; use at least 1",
                    kafka.new_topic_partitions
                ),
            ));
        }
        if kafka.new_topic_replication_factor < 1 {
            return Err(Problem::new(
                &["kafka", "new_topic_replication_factor"],
                format!(
                    "{} is out of range; use at least 1",
                    kafka.new_topic_replication_factor
                ),
            ));
        }
        for (name, value) in &kafka.options {
            check_kafka_option(name, value)?;
        }
        Ok(())
    }

    fn check_amqp(&self) -> Result<(), Problem> {
        let amqp = &self.amqp;
        check_positive(&["amqp", "connect_timeout"], amqp.connect_timeout)?;
        check_positive(&["amqp", "confirm_timeout"], amqp.confirm_timeout)?;
        if amqp.confirm_timeout >= self.publish_timeout {
            return Err(Problem::new(
                &["amqp", "confirm_timeout"],
                format!(
                    "{} must be less than publish_timeout ({}), so that a missing confirm is \
                     reported before the batch stops waiting for it",
                    show(amqp.confirm_timeout),
                    show(self.publish_timeout)
                ),
            )
            .related_to(&["publish_timeout"]));
        }
        Ok(())
    }
}

fn check_instance_id(instance_id: &str) -> Result<(), Problem> {
    let reason = if instance_id.trim().is_empty() {
        "is empty; remove it to let the relay make one up, or give a name"
    } else if instance_id.chars().count() > 200 {
        "is longer than 200 characters"
    } else if instance_id.chars().any(char::is_control) {
        "contains control characters"
    } else {
        return Ok(());
    };
    Err(Problem::new(&["instance_id"], reason.to_owned()))
}

/// Refuses librdkafka settings that the relay owns or that would break the
/// contract's `acks=all` and idempotence.
fn check_kafka_option(name: &str, value: &str) -> Result<(), Problem> {
    let field = ["kafka", "options", name];
    let reason = match name {
        "bootstrap.servers" | "metadata.broker.list" => {
            "is set from --broker (kafka://HOST:PORT,...); remove it here".to_owned()
        }
        "message.timeout.ms" | "delivery.timeout.ms" => {
            "is set from [kafka] message_timeout; remove it here".to_owned()
        }
        "enable.idempotence" if !value.eq_ignore_ascii_case("true") => format!(
            "\"{value}\" would turn the idempotent producer off; the relay requires it, so that \
             producer retries neither duplicate nor reorder events; remove the setting"
        ),
        "acks" | "request.required.acks"
            if !(value.eq_ignore_ascii_case("all") || value == "-1") =>
        {
            format!(
                "\"{value}\" would weaken acknowledgements; the relay requires acks=all, so that \
                 an acknowledged event cannot be lost; remove the setting"
            )
        }
        _ => return Ok(()),
    };
    Err(Problem::new(&field, reason))
}

fn check_positive(field: &[&str], value: Duration) -> Result<(), Problem> {
    if value.is_zero() {
        return Err(Problem::new(field, "must be more than 0s".to_owned()));
    }
    Ok(())
}

fn check_range(field: &[&str], value: u32, min: u32, max: u32) -> Result<(), Problem> {
    if !(min..=max).contains(&value) {
        return Err(Problem::new(
            field,
            format!("{value} is out of range; use {min} to {max}"),
        ));
    }
    Ok(())
}

/// A value that failed validation: the field's key path and what is wrong.
struct Problem {
    field: Vec<String>,
    /// For a relation between fields: the other field, whose position is
    /// shown when `field` keeps its default.
    related: Option<Vec<String>>,
    reason: String,
}

impl Problem {
    fn new(field: &[&str], reason: String) -> Self {
        Problem {
            field: key_path(field),
            related: None,
            reason,
        }
    }

    fn related_to(mut self, field: &[&str]) -> Self {
        self.related = Some(key_path(field));
        self
    }

    /// `field: reason`, with the line and column of the field, or of the
    /// related one, when `text` sets it.
    fn describe(&self, text: Option<&str>) -> String {
        let position = text
            .and_then(|text| {
                find_key_offset(text, &self.field)
                    .or_else(|| find_key_offset(text, self.related.as_deref()?))
                    .map(|offset| format!(" ({})", line_and_column(text, offset)))
            })
            .unwrap_or_default();
        format!("{}: {}{position}", dotted(&self.field), self.reason)
    }
}

fn key_path(field: &[&str]) -> Vec<String> {
    field.iter().map(|key| (*key).to_owned()).collect()
}

// ---------------------------------------------------------------------------
// Durations

/// Parses a duration such as `"250ms"`, `"30s"`, `"5m"`, `"2h"`, `"7d"` or
/// `"1m30s"`: whole numbers, each followed by a unit (`ms`, `s`, `m`, `h`,
/// `d`). Fits clap's `value_parser` as it is.
///
/// # Errors
///
/// A sentence naming what is wrong and the accepted units.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const UNITS: &str = "units: ms, s, m, h, d";
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(format!("empty duration; write e.g. \"30s\" ({UNITS})"));
    }
    if trimmed.starts_with('-') {
        return Err(format!(
            "\"{trimmed}\" is negative; durations are 0 or more"
        ));
    }
    let mut total_millis: u64 = 0;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|character: char| !character.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits_end == 0 {
            return Err(format!(
                "\"{trimmed}\" is not a duration; write a whole number and a unit, e.g. \"30s\" ({UNITS})"
            ));
        }
        let too_long = || format!("\"{trimmed}\" is too long a duration");
        let number: u64 = rest[..digits_end].parse().map_err(|_| too_long())?;
        let after_number = rest[digits_end..].trim_start();
        let unit_end = after_number
            .find(|character: char| character.is_ascii_digit() || character.is_whitespace())
            .unwrap_or(after_number.len());
        let unit = &after_number[..unit_end];
        let unit_millis: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => {
                return Err(format!(
                    "\"{trimmed}\" has no unit; write e.g. \"{number}s\" ({UNITS})"
                ));
            }
            _ if unit.starts_with(['.', ',']) => {
                return Err(format!(
                    "\"{trimmed}\" has a fraction; use whole numbers of a smaller unit, e.g. \"1500ms\" ({UNITS})"
                ));
            }
            _ => {
                return Err(format!(
                    "unknown unit `{unit}` in \"{trimmed}\"; use ms, s, m, h or d"
                ));
            }
        };
        total_millis = number
            .checked_mul(unit_millis)
            .and_then(|millis| total_millis.checked_add(millis))
            .ok_or_else(too_long)?;
        rest = after_number[unit_end..].trim_start();
    }
    Ok(Duration::from_millis(total_millis))
}

/// A duration in the largest unit that shows it exactly, e.g. `15s`.
fn show(duration: Duration) -> String {
    let millis = duration.as_millis();
    if Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX)) != duration {
        return format!("{duration:?}");
    }
    if millis == 0 {
        return "0s".to_owned();
    }
    let units: [(u128, &str); 5] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
        (1, "ms"),
    ];
    units
        .iter()
        .find(|(unit_millis, _)| millis.is_multiple_of(*unit_millis))
        .map_or_else(
            || format!("{millis}ms"),
            |(unit_millis, unit)| format!("{}{unit}", millis / unit_millis),
        )
}

fn deserialize_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a duration string such as \"30s\" (units: ms, s, m, h, d)")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
            parse_duration(text).map_err(E::custom)
        }
    }

    deserializer.deserialize_str(DurationVisitor)
}

fn deserialize_optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    deserialize_duration(deserializer).map(Some)
}

fn deserialize_socket_addr<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    struct SocketAddrVisitor;

    impl Visitor<'_> for SocketAddrVisitor {
        type Value = SocketAddr;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("an address string such as \"127.0.0.1:9090\"")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<SocketAddr, E> {
            text.parse().map_err(|_| {
                E::custom(format!(
                    "\"{text}\" is not an IP address and port; write e.g. \"127.0.0.1:9090\", \
                     \"0.0.0.0:9090\" or \"[::1]:9090\" (host names are not resolved)"
                ))
            })
        }
    }

    deserializer.deserialize_str(SocketAddrVisitor)
}

fn deserialize_kafka_options<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct OptionsVisitor;

    impl<'de> Visitor<'de> for OptionsVisitor {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a table of librdkafka settings")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut options = BTreeMap::new();
            while let Some((name, value)) = map.next_entry::<String, OptionValue>()? {
                options.insert(name, value.0);
            }
            Ok(options)
        }
    }

    deserializer.deserialize_map(OptionsVisitor)
}

/// One librdkafka setting, as the text librdkafka takes.
struct OptionValue(String);

impl<'de> Deserialize<'de> for OptionValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OptionValueVisitor;

        impl Visitor<'_> for OptionValueVisitor {
            type Value = OptionValue;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a string, integer, float or boolean librdkafka setting")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<OptionValue, E> {
                Ok(OptionValue(text.to_owned()))
            }

            fn visit_i64<E: de::Error>(self, number: i64) -> Result<OptionValue, E> {
                Ok(OptionValue(number.to_string()))
            }

            fn visit_u64<E: de::Error>(self, number: u64) -> Result<OptionValue, E> {
                Ok(OptionValue(number.to_string()))
            }

            fn visit_f64<E: de::Error>(self, number: f64) -> Result<OptionValue, E> {
                Ok(OptionValue(number.to_string()))
            }

            fn visit_bool<E: de::Error>(self, flag: bool) -> Result<OptionValue, E> {
                Ok(OptionValue(flag.to_string()))
            }
        }

        deserializer.deserialize_any(OptionValueVisitor)
    }
}

// ---------------------------------------------------------------------------
// One-line errors

/// Turns toml's error into one line: the field's key path, the message,
/// and the line and column. An unknown field names its table instead,
/// e.g. ``unknown field `batchsize` in [root], expected one of ...``.
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error
        .message()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let offset = error.span().map(|span| span.start);
    let key_path = offset.and_then(|offset| locate_key_path(text, offset));
    let mut description = match &key_path {
        Some(key_path) if message.starts_with("unknown field `") => {
            describe_unknown_field(&message, &key_path[..key_path.len() - 1])
        }
        Some(key_path) => format!("{}: {message}", dotted(key_path)),
        // toml names no key for a duplicate; quote it.
        None if message == "duplicate key" => match error.span().and_then(|span| text.get(span)) {
            Some(key) => format!("duplicate key `{}`", key.trim()),
            None => message,
        },
        None => message,
    };
    if let Some(offset) = offset {
        description.push_str(&format!(" ({})", line_and_column(text, offset)));
    }
    description
}

/// ``unknown field `x`, expected ...`` becomes
/// ``unknown field `x` in [table], expected ...; did you mean `y`?``.
fn describe_unknown_field(message: &str, table: &[String]) -> String {
    let table_name = if table.is_empty() {
        "[root]".to_owned()
    } else {
        format!("[{}]", dotted(table))
    };
    let prefix = "unknown field `";
    let Some(name_length) = message[prefix.len()..].find('`') else {
        return format!("{message} in {table_name}");
    };
    let name_end = prefix.len() + name_length + 1;
    let unknown = &message[prefix.len()..name_end - 1];
    let mut description = format!(
        "{} in {table_name}{}",
        &message[..name_end],
        &message[name_end..]
    );
    let expected: Vec<&str> = message[name_end..].split('`').skip(1).step_by(2).collect();
    if let Some(suggestion) = closest(unknown, &expected) {
        description.push_str(&format!("; did you mean `{suggestion}`?"));
    }
    description
}

/// The expected name nearest to `unknown`, if it is a plausible typo.
fn closest<'a>(unknown: &str, expected: &[&'a str]) -> Option<&'a str> {
    expected
        .iter()
        .map(|candidate| (edit_distance(unknown, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, counting `-` and `_` as the same character.
fn edit_distance(left: &str, right: &str) -> usize {
    let normalize = |character: char| if character == '-' { '_' } else { character };
    let left: Vec<char> = left.chars().map(normalize).collect();
    let right: Vec<char> = right.chars().map(normalize).collect();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    for (left_index, left_char) in left.iter().enumerate() {
        let mut current = vec![left_index + 1];
        for (right_index, right_char) in right.iter().enumerate() {
            let substitution = previous[right_index] + usize::from(left_char != right_char);
            let deletion = previous[right_index + 1] + 1;
            let insertion = current[right_index] + 1;
            current.push(substitution.min(deletion).min(insertion));
        }
        previous = current;
    }
    previous[right.len()]
}

/// The key path of the key or value at byte `offset` of the document,
/// e.g. `["retry", "base_delay"]`.
fn locate_key_path(text: &str, offset: usize) -> Option<Vec<String>> {
    let document = toml::de::DeTable::parse(text).ok()?;
    locate_in_table(document.get_ref(), offset)
}

fn locate_in_table(table: &toml::de::DeTable<'_>, offset: usize) -> Option<Vec<String>> {
    for (key, value) in table.iter() {
        let with_key = |mut inner: Vec<String>| {
            inner.insert(0, key.get_ref().to_string());
            inner
        };
        if key.span().contains(&offset) {
            return Some(with_key(Vec::new()));
        }
        if let toml::de::DeValue::Table(inner) = value.get_ref()
            && let Some(inner_path) = locate_in_table(inner, offset)
        {
            return Some(with_key(inner_path));
        }
    }
    // No key at the offset: the value it is in (a whole table for a missing
    // field). Take the innermost.
    table
        .iter()
        .filter(|(_, value)| value.span().contains(&offset))
        .min_by_key(|(_, value)| value.span().len())
        .map(|(key, _)| vec![key.get_ref().to_string()])
}

/// Byte offset of the key at `key_path` in the document, if it is set there.
fn find_key_offset(text: &str, key_path: &[String]) -> Option<usize> {
    let document = toml::de::DeTable::parse(text).ok()?;
    let mut table = document.get_ref();
    let (last, parents) = key_path.split_last()?;
    for parent in parents {
        let value = table.get(parent.as_str())?;
        let toml::de::DeValue::Table(inner) = value.get_ref() else {
            return None;
        };
        table = inner;
    }
    let (key, _) = table.get_key_value(last.as_str())?;
    Some(key.span().start)
}

/// `line L, column C`, both counted from 1, for a byte offset into `text`.
fn line_and_column(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before[line_start..].chars().count() + 1;
    format!("line {line}, column {column}")
}

/// A key path as TOML writes it: `kafka.options."linger.ms"`.
fn dotted(key_path: &[String]) -> String {
    key_path
        .iter()
        .map(|key| {
            let bare = !key.is_empty()
                && key.chars().all(|character| {
                    character.is_ascii_alphanumeric() || matches!(character, '-' | '_')
                });
            if bare {
                key.clone()
            } else {
                format!("\"{}\"", key.escape_default())
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}
