//! [`RedisPublisherConfig`]: where a [`RedisPublisher`](super::RedisPublisher)
//! connects, which stream each topic goes to, how streams are trimmed, and
//! the timeouts.

use std::collections::BTreeMap;
use std::time::Duration;

use outbox::mask_password;

use crate::error::Error;
use crate::publish::StreamKey;

/// The Redis deployment a publisher writes to.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisEndpoint {
    /// One server: `redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS.
    Server(String),
    /// A Redis Cluster: one `redis://` (or `rediss://`) URL per node to
    /// start from; the client learns the others.
    Cluster(Vec<String>),
}

impl RedisEndpoint {
    /// The URLs, passwords masked, for logs and errors.
    pub fn masked(&self) -> String {
        match self {
            RedisEndpoint::Server(url) => mask_password(url),
            RedisEndpoint::Cluster(nodes) => nodes
                .iter()
                .map(|node| mask_password(node))
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

impl std::fmt::Debug for RedisEndpoint {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisEndpoint::Server(_) => formatter
                .debug_tuple("Server")
                .field(&self.masked())
                .finish(),
            RedisEndpoint::Cluster(_) => formatter
                .debug_tuple("Cluster")
                .field(&self.masked())
                .finish(),
        }
    }
}

/// How a stream is trimmed as the relay adds to it. The relay never trims
/// a stream without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamTrim {
    /// `XADD ... MAXLEN ~ n`: keep about the last `n` entries (Redis trims
    /// whole nodes of the stream, so a few more may stay).
    MaxLen(u64),
    /// `XADD ... MINID ~ <now - age>`: drop entries older than the age, by
    /// the time in their entry id.
    MaxAge(Duration),
}

/// Where the events of one topic go, and how that stream is trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStream {
    /// The stream key template. Default `{topic}`.
    pub key: StreamKey,
    /// Partitions `{partition}` spreads aggregates over; at least 1, and
    /// used only when the key has `{partition}`. Default 1.
    pub partitions: u32,
    /// Trimming; none by default.
    pub trim: Option<StreamTrim>,
}

impl Default for RedisStream {
    fn default() -> Self {
        RedisStream {
            key: StreamKey::default(),
            partitions: 1,
            trim: None,
        }
    }
}

impl RedisStream {
    /// The stream of `key`, with one partition and no trimming.
    pub fn new(key: StreamKey) -> Self {
        RedisStream {
            key,
            ..RedisStream::default()
        }
    }

    /// The same, spreading aggregates over `partitions`.
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }

    /// The same, trimmed by `trim`.
    pub fn trim(mut self, trim: StreamTrim) -> Self {
        self.trim = Some(trim);
        self
    }
}

/// Settings of a [`RedisPublisher`](super::RedisPublisher).
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::publish::redis::{
///     RedisEndpoint, RedisPublisherConfig, RedisStream, StreamKey, StreamTrim,
/// };
///
/// let mut config = RedisPublisherConfig::new(RedisEndpoint::Server(
///     "redis://127.0.0.1:6379".to_owned(),
/// ));
/// config.streams.insert(
///     "orders".to_owned(),
///     RedisStream::new(StreamKey::parse("orders:p:{partition}").unwrap())
///         .partitions(8)
///         .trim(StreamTrim::MaxLen(1_000_000)),
/// );
/// config.response_timeout = Duration::from_secs(5);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisPublisherConfig {
    /// The server or cluster.
    pub endpoint: RedisEndpoint,
    /// The stream of each topic; a topic without an entry goes to the
    /// stream named after it, untrimmed.
    pub streams: BTreeMap<String, RedisStream>,
    /// How long a batch's replies may take; an event without its reply by
    /// then is [`PublishFailure::Unavailable`](crate::publish::PublishFailure::Unavailable),
    /// and the connection is replaced. Default 5 s.
    pub response_timeout: Duration,
    /// Bound of opening a connection. Default 5 s.
    pub connect_timeout: Duration,
}

impl RedisPublisherConfig {
    /// The default settings for `endpoint`.
    pub fn new(endpoint: RedisEndpoint) -> Self {
        RedisPublisherConfig {
            endpoint,
            streams: BTreeMap::new(),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The stream settings of `topic`.
    pub(super) fn stream_of(&self, topic: &str) -> &RedisStream {
        static DEFAULT: std::sync::OnceLock<RedisStream> = std::sync::OnceLock::new();
        self.streams
            .get(topic)
            .unwrap_or_else(|| DEFAULT.get_or_init(RedisStream::default))
    }

    /// Checks the URLs (as the client reads them), the timeouts and each
    /// stream's partitions and trimming.
    pub(super) fn validate(&self) -> Result<(), Error> {
        let urls: &[String] = match &self.endpoint {
            RedisEndpoint::Server(url) => std::slice::from_ref(url),
            RedisEndpoint::Cluster(nodes) => nodes,
        };
        if urls.is_empty() {
            return Err(Error::InvalidBrokerUrl {
                url: "redis+cluster://".to_owned(),
                reason: "no cluster nodes".to_owned(),
            });
        }
        for url in urls {
            if let Err(error) = redis::Client::open(url.as_str()) {
                return Err(Error::InvalidBrokerUrl {
                    url: mask_password(url),
                    reason: error.to_string(),
                });
            }
        }
        let config_error = |reason: String| Error::Config {
            path: "--config".to_owned(),
            reason,
        };
        if self.response_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(config_error(
                "redis.response_timeout and redis.connect_timeout must be more than zero"
                    .to_owned(),
            ));
        }
        for (topic, stream) in &self.streams {
            if stream.partitions == 0 {
                return Err(config_error(format!(
                    "redis.streams.{topic:?}: partitions must be at least 1"
                )));
            }
            match stream.trim {
                Some(StreamTrim::MaxLen(0)) => {
                    return Err(config_error(format!(
                        "redis.streams.{topic:?}: maxlen must be at least 1"
                    )));
                }
                Some(StreamTrim::MaxAge(age)) if age < Duration::from_millis(1) => {
                    return Err(config_error(format!(
                        "redis.streams.{topic:?}: max_age must be at least 1 ms"
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }
}
