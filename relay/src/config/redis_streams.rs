//! `[redis]`: the Redis Streams publisher's settings, the stream of each
//! topic and its trimming.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::deserialize;
use crate::publish::StreamKey;

/// `[redis]`: the Redis Streams publisher (used with `--broker redis://...`
/// or `redis+cluster://...`). An event is added to the stream named by its
/// `topic`, unless `[redis.streams."<topic>"]` names another.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisConfig {
    /// How long a batch's replies may take. More than zero and less than
    /// `publish_timeout`. Default `"5s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub response_timeout: Duration,

    /// How long connecting may take. More than zero. Default `"5s"`.
    #[serde(deserialize_with = "deserialize::duration")]
    pub connect_timeout: Duration,

    /// Streams per topic: `[redis.streams."orders"]` with `key`,
    /// `partitions`, `maxlen` or `max_age`. Default: none (each topic's
    /// stream is named after it, untrimmed).
    pub streams: BTreeMap<String, RedisStreamConfig>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            streams: BTreeMap::new(),
        }
    }
}

/// `[redis.streams."<topic>"]`: the stream of one topic.
///
/// ```
/// use outbox_relay::config::RelayConfig;
///
/// let config = RelayConfig::from_toml_str(
///     r#"
///     [redis.streams."orders"]
///     key = "orders:p:{partition}"
///     partitions = 8
///     maxlen = 1000000
///     "#,
///     "relay.toml",
/// )
/// .unwrap();
/// assert_eq!(config.redis.streams["orders"].partitions, Some(8));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisStreamConfig {
    /// The stream key, a template with `{topic}`, `{aggregate_type}` and
    /// `{partition}`. Default `"{topic}"`.
    pub key: Option<String>,

    /// How many partitions `{partition}` spreads aggregates over (Kafka's
    /// default partitioner on the aggregate id). Required with
    /// `{partition}`, refused without it.
    pub partitions: Option<u32>,

    /// Keep about this many entries (`XADD ... MAXLEN ~`). At least 1. Not
    /// with `max_age`. Default: no trimming.
    pub maxlen: Option<u64>,

    /// Drop entries older than this (`XADD ... MINID ~`). At least 1 ms.
    /// Not with `maxlen`. Default: no trimming.
    #[serde(deserialize_with = "deserialize::optional_duration")]
    pub max_age: Option<Duration>,
}

impl RedisStreamConfig {
    /// The key template, parsed; `{topic}` when none is set.
    ///
    /// # Errors
    /// What is wrong with the template.
    pub fn stream_key(&self) -> Result<StreamKey, String> {
        match &self.key {
            Some(template) => StreamKey::parse(template),
            None => Ok(StreamKey::default()),
        }
    }

    /// What is wrong with these settings, if anything.
    pub(super) fn problem(&self) -> Option<(&'static str, String)> {
        let key = match self.stream_key() {
            Ok(key) => key,
            Err(reason) => return Some(("key", reason)),
        };
        match (key.uses_partition(), self.partitions) {
            (true, None) => {
                return Some((
                    "partitions",
                    format!(
                        "the key `{}` has {{partition}}: set partitions to the number of partitions",
                        key.template()
                    ),
                ));
            }
            (_, Some(0)) => return Some(("partitions", "must be at least 1".to_owned())),
            (false, Some(_)) => {
                return Some((
                    "partitions",
                    format!(
                        "the key `{}` has no {{partition}} to spread aggregates over",
                        key.template()
                    ),
                ));
            }
            _ => {}
        }
        match (self.maxlen, self.max_age) {
            (Some(_), Some(_)) => Some((
                "max_age",
                "set maxlen or max_age, not both: Redis trims a stream one way per XADD".to_owned(),
            )),
            (Some(0), None) => Some(("maxlen", "must be at least 1".to_owned())),
            (None, Some(age)) if age < Duration::from_millis(1) => {
                Some(("max_age", "must be at least 1ms".to_owned()))
            }
            _ => None,
        }
    }
}
