//! [`RedisConsumerConfig`]: the settings of a Redis Streams inbox consumer.

use std::time::Duration;

use outbox::mask_password;

pub use crate::consumer::DEAD_LETTER_SUFFIX;
use crate::consumer::{impl_batch_settings, impl_retry_settings};
use crate::error::Error;
use crate::prune::PruneSettings;

/// Where a consumer group the consumer creates starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GroupStart {
    /// At the start of the stream (`XGROUP CREATE ... 0`): entries written
    /// before the group existed are read too. The default: an inbox
    /// consumer must not skip events published before it first ran.
    #[default]
    Beginning,
    /// After the stream's last entry (`XGROUP CREATE ... $`): only entries
    /// written from then on.
    NewEntries,
}

impl GroupStart {
    /// The id `XGROUP CREATE` takes.
    pub(crate) fn id(self) -> &'static str {
        match self {
            GroupStart::Beginning => "0",
            GroupStart::NewEntries => "$",
        }
    }
}

/// Settings of a [`RedisInboxConsumer`](super::RedisInboxConsumer).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisConsumerConfig {
    /// `redis://[user:password@]host:port[/db]`. TLS (`rediss://`) and
    /// Redis Cluster (`redis+cluster://`) are refused: the inbox's Redis
    /// client is built without them.
    pub url: String,
    /// The streams to read, each through the consumer group; the relay
    /// writes a topic's events to the stream of the topic's name.
    pub streams: Vec<String>,
    /// The consumer group. Created on each stream when missing (see
    /// `group_start`).
    pub group: String,
    /// This consumer's name in the group: its pending entries are kept
    /// under it. Default: unique per process (`<host>-<pid>-<random>`), so
    /// a restarted process leaves its predecessor's pending entries to be
    /// claimed after `claim_idle`; a stable name (one per replica) makes a
    /// restart read them again at once.
    pub consumer_name: String,
    /// Where a group the consumer creates starts. Default
    /// [`GroupStart::Beginning`].
    pub group_start: GroupStart,
    /// Most entries received and not yet finished (running, retrying or
    /// waiting behind an earlier entry of the same aggregate). At least
    /// `batch_size`. Default 32.
    pub max_in_flight: usize,
    /// Most entries one `XREADGROUP` (or `XAUTOCLAIM`) asks for, bounded by
    /// the free room of `max_in_flight`. Default 32.
    pub read_count: usize,
    /// How long one `XREADGROUP` waits for new entries (`BLOCK`); also the
    /// longest a due claim waits. Default 1 s.
    pub block: Duration,
    /// How long an entry stays pending on another consumer, unacknowledged
    /// and not refreshed, before this consumer takes it over with
    /// `XAUTOCLAIM` (the other consumer died). Checked every half of it.
    /// The consumer refreshes its own entries in flight every third of it,
    /// so an entry in a long retry is not taken from a living consumer.
    /// Default 30 s.
    pub claim_idle: Duration,
    /// Entries handled in one inbox transaction: their event ids are
    /// recorded with one statement, the handler runs for the new ones
    /// ([`Handler::handle_batch`](crate::Handler::handle_batch)) in stream
    /// order per aggregate, one commit, then every entry of the batch is
    /// acknowledged. 1 (the default): a transaction per entry. A handler
    /// failure rolls the batch back and its entries run again one at a
    /// time (`docs/inbox.md`, "Batches").
    pub batch_size: usize,
    /// Longest a batch waits to fill once its first entry arrived.
    /// Default 20 ms.
    pub batch_wait: Duration,
    /// Handler attempts per entry before it is dead-lettered; at least 1.
    /// Earlier deliveries of the entry (its delivery count) count as
    /// attempts. Default 5.
    pub max_attempts: u32,
    /// Backoff before the first retry; it doubles per retry, with jitter.
    /// Also the first pause after a database outage, a failed dead letter
    /// or a lost connection. Default 200 ms.
    pub retry_base_delay: Duration,
    /// Longest backoff. Default 30 s.
    pub retry_max_delay: Duration,
    /// The dead-letter stream of every stream read; `None` for
    /// `<stream>.dlq` per stream. Default `None`.
    pub dead_letter_stream: Option<String>,
    /// Bound of connecting and of every command but the blocking read.
    /// Default 10 s.
    pub command_timeout: Duration,
    /// Pruning of the inbox rows, done by a background task of the consumer.
    pub prune: PruneSettings,
}

impl_retry_settings!(RedisConsumerConfig, "redis");
impl_batch_settings!(RedisConsumerConfig, "redis", max_in_flight, "max_in_flight");

impl RedisConsumerConfig {
    /// The default settings for consumer group `group` reading `streams`
    /// at `url`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_inbox::redis::RedisConsumerConfig;
    ///
    /// let mut config = RedisConsumerConfig::new("redis://127.0.0.1:6379", "billing", ["orders"]);
    /// config.claim_idle = Duration::from_secs(60);
    /// assert_eq!(config.dead_letter_stream_for("orders"), "orders.dlq");
    /// ```
    pub fn new(
        url: impl Into<String>,
        group: impl Into<String>,
        streams: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        RedisConsumerConfig {
            url: url.into(),
            streams: streams.into_iter().map(Into::into).collect(),
            group: group.into(),
            consumer_name: unique_consumer_name(),
            group_start: GroupStart::default(),
            max_in_flight: 32,
            read_count: 32,
            block: Duration::from_secs(1),
            claim_idle: Duration::from_secs(30),
            batch_size: 1,
            batch_wait: Duration::from_millis(20),
            max_attempts: 5,
            retry_base_delay: Duration::from_millis(200),
            retry_max_delay: Duration::from_secs(30),
            dead_letter_stream: None,
            command_timeout: Duration::from_secs(10),
            prune: PruneSettings::default(),
        }
    }

    /// The dead-letter stream of entries read from `stream`.
    pub fn dead_letter_stream_for(&self, stream: &str) -> String {
        match &self.dead_letter_stream {
            Some(dead_letter_stream) => dead_letter_stream.clone(),
            None => format!("{stream}{DEAD_LETTER_SUFFIX}"),
        }
    }

    /// How often due claims and the refresh of the entries in flight run:
    /// half of `claim_idle`.
    pub(crate) fn claim_interval(&self) -> Duration {
        self.claim_idle / 2
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        check_url(&self.url)?;
        if self.streams.is_empty() || self.streams.iter().any(|stream| stream.trim().is_empty()) {
            return Err(config_error(
                "streams",
                "must name at least one stream, none empty",
            ));
        }
        if let Some(stream) = self
            .streams
            .iter()
            .find(|stream| self.streams.contains(&self.dead_letter_stream_for(stream)))
        {
            return Err(config_error(
                "streams",
                &format!("hold {stream} and its own dead-letter stream"),
            ));
        }
        if self.group.trim().is_empty() {
            return Err(config_error("group", "is empty"));
        }
        if self.consumer_name.trim().is_empty() {
            return Err(config_error("consumer_name", "is empty"));
        }
        if self.max_in_flight == 0 {
            return Err(config_error("max_in_flight", "must be at least 1"));
        }
        if self.read_count == 0 {
            return Err(config_error("read_count", "must be at least 1"));
        }
        if self.block.is_zero() {
            return Err(config_error(
                "block",
                "must be more than zero (a zero BLOCK waits forever)",
            ));
        }
        if self.claim_idle < Duration::from_millis(2) {
            return Err(config_error(
                "claim_idle",
                "must be at least 2 ms: a pending entry is taken over once idle this long",
            ));
        }
        if self.command_timeout.is_zero() {
            return Err(config_error("command_timeout", "must be more than zero"));
        }
        self.check_retry_schedule()?;
        self.check_batch_settings()?;
        if let Some(stream) = &self.dead_letter_stream
            && stream.trim().is_empty()
        {
            return Err(config_error("dead_letter_stream", "is empty"));
        }
        if self.prune.interval.is_zero() {
            return Err(config_error("prune.interval", "must be more than zero"));
        }
        Ok(())
    }
}

impl std::fmt::Debug for RedisConsumerConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RedisConsumerConfig")
            .field("url", &mask_password(&self.url))
            .field("streams", &self.streams)
            .field("group", &self.group)
            .field("consumer_name", &self.consumer_name)
            .field("group_start", &self.group_start)
            .field("max_in_flight", &self.max_in_flight)
            .field("read_count", &self.read_count)
            .field("block", &self.block)
            .field("claim_idle", &self.claim_idle)
            .field("batch_size", &self.batch_size)
            .field("batch_wait", &self.batch_wait)
            .field("max_attempts", &self.max_attempts)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .field("dead_letter_stream", &self.dead_letter_stream)
            .field("command_timeout", &self.command_timeout)
            .field("prune", &self.prune)
            .finish()
    }
}

/// Refuse what the consumer cannot connect to, naming why.
fn check_url(url: &str) -> Result<(), Error> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    let refusal = match scheme {
        Some("redis") => None,
        Some("rediss") => Some(
            "uses TLS (rediss://), which the inbox's Redis adapter does not support: its redis \
             client is built without TLS; reach the server over redis:// (e.g. through a TLS \
             tunnel)",
        ),
        Some("redis+cluster" | "rediss+cluster") => Some(
            "names a Redis Cluster, which the inbox's Redis adapter does not support; give one \
             server's redis:// URL",
        ),
        _ => Some("must be redis://[user:password@]host:port[/db]"),
    };
    if let Some(reason) = refusal {
        return Err(config_error(&format!("url {}", mask_password(url)), reason));
    }
    redis::Client::open(url).map(drop).map_err(|error| {
        config_error(
            &format!("url {}", mask_password(url)),
            &format!("does not parse: {error}"),
        )
    })
}

/// `<host>-<pid>-<random>`: a consumer name no other process takes.
fn unique_consumer_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|host| !host.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|host| host.trim().to_owned())
                .filter(|host| !host.is_empty())
        })
        .unwrap_or_else(|| "inbox".to_owned());
    let random = std::collections::hash_map::RandomState::new();
    let salt = std::hash::BuildHasher::hash_one(&random, std::time::SystemTime::now());
    format!("{host}-{}-{salt:016x}", std::process::id())
}

fn config_error(field: &str, reason: &str) -> Error {
    Error::Config(format!("redis consumer: {field} {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RedisConsumerConfig {
        RedisConsumerConfig::new("redis://:secret@127.0.0.1:6379/0", "billing", ["orders"])
    }

    fn refusal(config: RedisConsumerConfig) -> String {
        match config.validate() {
            Err(Error::Config(message)) => message,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn validates_the_settings() {
        assert!(config().validate().is_ok());
        assert!(!format!("{:?}", config()).contains("secret"));
        let no_streams = RedisConsumerConfig {
            streams: vec![" ".to_owned()],
            ..config()
        };
        assert!(refusal(no_streams).contains("streams"));
        let zero_claim = RedisConsumerConfig {
            claim_idle: Duration::ZERO,
            ..config()
        };
        assert!(refusal(zero_claim).contains("claim_idle"));
        let zero_block = RedisConsumerConfig {
            block: Duration::ZERO,
            ..config()
        };
        assert!(refusal(zero_block).contains("block"));
        let unfillable = config().batch(64, Duration::ZERO);
        assert!(refusal(unfillable).contains("max_in_flight 32"));
        let own_dead_letters = RedisConsumerConfig::new("redis://h", "g", ["orders", "orders.dlq"]);
        assert!(refusal(own_dead_letters).contains("dead-letter"));
    }

    #[test]
    fn refuses_urls_it_cannot_connect_to() {
        for (url, named) in [
            ("rediss://127.0.0.1:6380", "TLS"),
            ("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", "Cluster"),
            ("amqp://127.0.0.1", "redis://"),
            ("127.0.0.1:6379", "redis://"),
            ("redis://127.0.0.1:6379/notadb", "does not parse"),
        ] {
            let message = refusal(RedisConsumerConfig::new(url, "g", ["s"]));
            assert!(message.contains(named), "{url}: {message}");
        }
    }

    #[test]
    fn consumer_names_are_unique() {
        assert_ne!(config().consumer_name, config().consumer_name);
    }
}
