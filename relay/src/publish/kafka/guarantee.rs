//! The client options that would weaken what the Kafka publisher
//! guarantees (`docs/guarantees.md`): an acknowledged event is on every
//! in-sync replica (`acks=all`), librdkafka's retries neither duplicate nor
//! reorder records (the idempotent producer), and the events of one
//! aggregate go to one partition, in order (a partitioner that follows the
//! key).
//!
//! [`KafkaPublisher::new`](super::KafkaPublisher::new) refuses them
//! whoever builds it, and the relay's configuration refuses them in
//! `[kafka.options]`, with the line and column. Overrides that librdkafka
//! itself refuses under idempotence are left to it: `max.in.flight` above
//! 5, `retries` 0, `queuing.strategy` other than `fifo` and
//! `queue.buffering.backpressure.threshold` above 1 fail the creation of
//! the producer.

/// Checks one librdkafka option against the guarantee
/// ([`outbox::broker::kafka::check_client_option`], the check the inbox's
/// dead-letter producer makes too).
///
/// # Errors
/// Why `name = value` would weaken the guarantee, naming the value and
/// what the relay requires instead.
pub(crate) fn check_client_option(name: &str, value: &str) -> Result<(), String> {
    outbox::broker::kafka::check_client_option(name, value, "the relay")
}
