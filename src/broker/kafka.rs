//! What the relay's producer and the inbox's consumer and dead-letter
//! producer share about librdkafka: its log lines, forwarded to `tracing`
//! by [`forward_log!`](forward_log).
//!
//! ```
//! use rdkafka::client::ClientContext;
//! use rdkafka::config::RDKafkaLogLevel;
//!
//! /// A client context that only forwards librdkafka's logs.
//! struct Logs;
//!
//! impl ClientContext for Logs {
//!     fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
//!         outbox::broker::kafka::forward_log!(level, facility, message);
//!     }
//! }
//!
//! Logs.log(RDKafkaLogLevel::Warning, "BROKER", "connection refused");
//! ```

/// Forward one librdkafka log line to `tracing` at the matching level
/// (emergency to error as `error`, warning as `warn`, notice and info as
/// `info`, debug as `debug`), with `facility` and `message` as fields and
/// `librdkafka` as the message: for a client context's `log`.
///
/// `forward_log!(level, facility, message)` takes an
/// `rdkafka::config::RDKafkaLogLevel` and two `&str`. A macro rather than
/// a function so that the events keep the caller's module as their
/// `tracing` target, which log filters (`RUST_LOG`) and the JSON log
/// output name.
#[doc(hidden)]
#[macro_export]
macro_rules! __forward_librdkafka_log {
    ($level:expr, $facility:expr, $message:expr $(,)?) => {{
        use $crate::broker::kafka::__private::RDKafkaLogLevel;
        let (facility, message): (&str, &str) = ($facility, $message);
        match $level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                $crate::broker::kafka::__private::tracing::error!(facility, message, "librdkafka")
            }
            RDKafkaLogLevel::Warning => {
                $crate::broker::kafka::__private::tracing::warn!(facility, message, "librdkafka")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                $crate::broker::kafka::__private::tracing::info!(facility, message, "librdkafka")
            }
            RDKafkaLogLevel::Debug => {
                $crate::broker::kafka::__private::tracing::debug!(facility, message, "librdkafka")
            }
        }
    }};
}

#[doc(inline)]
pub use crate::__forward_librdkafka_log as forward_log;

/// What [`forward_log!`](forward_log) names from the caller's crate.
#[doc(hidden)]
pub mod __private {
    pub use rdkafka::config::RDKafkaLogLevel;
    pub use tracing;
}
