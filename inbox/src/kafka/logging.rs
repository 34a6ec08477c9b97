//! librdkafka's log lines and client errors, forwarded to `tracing`.

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

/// Forward one librdkafka log line at the matching `tracing` level.
pub(crate) fn forward_log(level: RDKafkaLogLevel, facility: &str, message: &str) {
    outbox::broker::kafka::forward_log!(level, facility, message);
}

/// Context of the dead-letter producer and the admin client: logs only.
pub(crate) struct LogContext;

impl ClientContext for LogContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        forward_log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka dead-letter client error");
    }
}
