//! What the Kafka and the RabbitMQ consumer share: the methods of their
//! configurations' retry settings ([`impl_retry_settings!`]), the log
//! line of a stopped consumer ([`log_consumer_stopped!`]), the counters of
//! their stats (`counters.rs`) and the pruning task beside them
//! (`pruning.rs`).

mod counters;
mod pruning;

pub(crate) use counters::StatsCounters;
pub(crate) use pruning::BackgroundPruning;

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

pub(crate) use {impl_retry_settings, log_consumer_stopped};
