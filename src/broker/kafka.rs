//! What the relay's producer and the inbox's consumer and dead-letter
//! producer share about librdkafka: its log lines, forwarded to `tracing`
//! by [`forward_log!`](forward_log), and the producer options that would
//! weaken what they guarantee ([`check_client_option`]).
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

/// Checks one librdkafka producer option against what a producer of
/// events guarantees: an acknowledged record is on every in-sync replica
/// (`acks=all`), retries neither duplicate nor reorder records (the
/// idempotent producer), and the records of one key go to one partition,
/// in order (a partitioner that follows the key). `who` names the
/// producer in the refusal ("the relay").
///
/// ```
/// use outbox::broker::kafka::check_client_option;
///
/// assert!(check_client_option("linger.ms", "5", "the relay").is_ok());
/// let refusal = check_client_option("acks", "1", "the relay").unwrap_err();
/// assert!(refusal.contains("the relay requires acks=all"));
/// ```
///
/// # Errors
/// Why `name = value` would weaken the guarantee, naming the value and
/// what `who` requires instead.
pub fn check_client_option(name: &str, value: &str, who: &str) -> Result<(), String> {
    // librdkafka takes a topic property with a `topic.` prefix too.
    let property = name.strip_prefix("topic.").unwrap_or(name);
    match property {
        "enable.idempotence" if !value.eq_ignore_ascii_case("true") => Err(format!(
            "\"{value}\" would turn the idempotent producer off; {who} requires it, so that \
             producer retries neither duplicate nor reorder events; remove the setting"
        )),
        "acks" | "request.required.acks"
            if !(value.eq_ignore_ascii_case("all") || value == "-1") =>
        {
            Err(format!(
                "\"{value}\" would weaken acknowledgements; {who} requires acks=all, so that \
                 an acknowledged event cannot be lost; remove the setting"
            ))
        }
        "partitioner" if value == "random" => Err(format!(
            "\"{value}\" ignores the key, so the events of one aggregate would be spread over \
             partitions and lose their order; {who} requires a partitioner that follows the \
             key (murmur2_random by default, or murmur2, consistent, consistent_random, fnv1a, \
             fnv1a_random)"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_keep_the_guarantee_pass() {
        for (name, value) in [
            ("acks", "all"),
            ("acks", "ALL"),
            ("request.required.acks", "-1"),
            ("topic.acks", "all"),
            ("enable.idempotence", "true"),
            ("enable.idempotence", "True"),
            ("partitioner", "murmur2"),
            ("partitioner", "consistent_random"),
            ("max.in.flight.requests.per.connection", "5"),
            ("linger.ms", "5"),
            ("compression.type", "zstd"),
        ] {
            assert_eq!(
                check_client_option(name, value, "the relay"),
                Ok(()),
                "{name} = {value}"
            );
        }
    }

    #[test]
    fn options_that_weaken_it_are_refused_with_the_reason() {
        for (name, value, reason) in [
            ("acks", "1", "acks=all"),
            ("acks", "0", "acks=all"),
            ("request.required.acks", "1", "acks=all"),
            ("topic.acks", "0", "acks=all"),
            ("topic.request.required.acks", "1", "acks=all"),
            ("enable.idempotence", "false", "idempotent producer off"),
            ("enable.idempotence", "0", "idempotent producer off"),
            ("partitioner", "random", "lose their order"),
            ("topic.partitioner", "random", "lose their order"),
        ] {
            let refusal = check_client_option(name, value, "the relay").expect_err(name);
            assert!(refusal.contains(reason), "{name} = {value}: {refusal}");
            assert!(refusal.contains(&format!("\"{value}\"")), "{refusal}");
        }
    }
}
