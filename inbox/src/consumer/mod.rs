//! What the broker consumers share: the methods of their configurations'
//! retry settings ([`impl_retry_settings!`]) and batch settings
//! ([`impl_batch_settings!`]), the log line of a stopped consumer
//! ([`log_consumer_stopped!`]), the counters of their stats
//! (`counters.rs`), the pruning task beside them (`pruning.rs`), and the
//! per-key lanes of the consumers that keep a key's order, Kafka, Redis
//! Streams and NATS JetStream (`lanes.rs`), and the session loop of the
//! Redis and NATS consumers (`sessions.rs`).

mod counters;
#[cfg(any(feature = "kafka", feature = "redis", feature = "nats"))]
mod lanes;
mod pruning;
#[cfg(any(feature = "redis", feature = "nats"))]
mod sessions;

pub(crate) use counters::StatsCounters;
#[cfg(feature = "kafka")]
pub(crate) use lanes::TaskResult;
#[cfg(feature = "kafka")]
pub(crate) use lanes::sleep_until_due;
#[cfg(any(feature = "kafka", feature = "redis", feature = "nats"))]
pub(crate) use lanes::{LaneBroker, LaneMessage, MessageLanes};
pub(crate) use pruning::BackgroundPruning;
#[cfg(any(feature = "redis", feature = "nats"))]
pub(crate) use sessions::{AbortOnDrop, OpenError, SessionEnd, reconnecting, run_lanes};

/// Suffix of the default dead-letter topic, stream or subject:
/// `<topic>.dlq`, `<stream>.dlq`, `<subject>.dlq`.
#[cfg(any(feature = "kafka", feature = "redis", feature = "nats"))]
pub const DEAD_LETTER_SUFFIX: &str = ".dlq";

/// Header (Kafka, NATS) or field (Redis Streams) of a dead letter naming
/// why it was dead-lettered.
#[cfg(any(feature = "kafka", feature = "redis", feature = "nats"))]
pub const DEAD_LETTER_REASON: &str = "outbox-dead-letter-reason";

/// Header (Kafka, NATS) or field (Redis Streams) of a dead letter naming
/// where it came from: Kafka's `topic/partition/offset`, Redis's
/// `stream/entry id`, NATS's `stream/sequence`.
#[cfg(any(feature = "kafka", feature = "redis", feature = "nats"))]
pub const DEAD_LETTER_SOURCE: &str = "outbox-dead-letter-source";

/// Give an adapter's configuration `$config` the methods the shared code
/// needs of its retry settings, the fields `max_attempts`,
/// `retry_base_delay` and `retry_max_delay` that every adapter's
/// configuration has: `retry_schedule`, the delivery policy's attempts and
/// backoff, and `check_retry_schedule`, whose error names the `$adapter`'s
/// consumer (`kafka consumer: ...`).
macro_rules! impl_retry_settings {
    ($config:ty, $adapter:literal) => {
        impl $config {
            /// The attempts and backoff of the delivery policy.
            pub(crate) fn retry_schedule(&self) -> $crate::policy::RetrySchedule {
                $crate::policy::RetrySchedule {
                    max_attempts: self.max_attempts,
                    base_delay: self.retry_base_delay,
                    max_delay: self.retry_max_delay,
                }
            }

            /// Why the retry settings cannot work, as a configuration error.
            fn check_retry_schedule(&self) -> Result<(), $crate::error::Error> {
                self.retry_schedule().check().map_err(|reason| {
                    $crate::error::Error::Config(format!("{} consumer: {reason}", $adapter))
                })
            }
        }
    };
}

/// Give an adapter's configuration `$config` its batch settings' methods:
/// the fields `batch_size` and `batch_wait`, bounded by `$limit`, the
/// field of the most messages in flight (`$limit_name` in errors):
/// `batch`, the builder, and `check_batch_settings`.
macro_rules! impl_batch_settings {
    ($config:ty, $adapter:literal, $limit:ident, $limit_name:literal) => {
        impl $config {
            /// Handle up to `size` messages in one inbox transaction,
            /// waiting at most `wait` for a batch to fill once its first
            /// message arrived (see `batch_size`). `size` 1 handles each
            /// message in a transaction of its own.
            #[must_use]
            pub fn batch(mut self, size: usize, wait: std::time::Duration) -> Self {
                self.batch_size = size;
                self.batch_wait = wait;
                self
            }

            /// Why the batch settings cannot work, as a configuration error.
            fn check_batch_settings(&self) -> Result<(), $crate::error::Error> {
                if self.batch_size == 0 {
                    return Err($crate::error::Error::Config(format!(
                        "{} consumer: batch_size must be at least 1 (1 handles each message in \
                         a transaction of its own)",
                        $adapter
                    )));
                }
                let limit = usize::from(self.$limit);
                if self.batch_size > limit {
                    return Err($crate::error::Error::Config(format!(
                        "{} consumer: batch_size {} is above {} {limit}: a batch is taken from \
                         the messages in flight, so it could never fill; raise {} or lower \
                         batch_size",
                        $adapter, self.batch_size, $limit_name, $limit_name
                    )));
                }
                Ok(())
            }
        }
    };
}

/// Log at info level, under the caller's target, that a consumer stopped,
/// with every count of its [`ConsumerStats`](crate::ConsumerStats): the
/// fields given after the message first, then the counts, then the message.
/// A macro, as a tracing event's target and message are fixed where it is
/// written; the stats are taken apart whole, so a new count does not build
/// until it is logged here too.
macro_rules! log_consumer_stopped {
    ($stats:expr, $message:literal $(, $($field:tt)+)?) => {{
        let $crate::ConsumerStats {
            processed,
            duplicates,
            dead_lettered,
            retried,
            database_outages,
        } = $stats;
        ::tracing::info!(
            $($($field)+,)?
            processed,
            duplicates,
            dead_lettered,
            retried,
            database_outages,
            $message
        );
    }};
}

pub(crate) use {impl_batch_settings, impl_retry_settings, log_consumer_stopped};
