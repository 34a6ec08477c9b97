//! [`ConsumerStats`]: what a broker consumer did, with one meaning for the
//! Kafka and the RabbitMQ adapter.

/// What an inbox consumer did during one `run`, returned by
/// [`KafkaInboxConsumer::run`](crate::kafka::KafkaInboxConsumer::run) and
/// [`RabbitMqInboxConsumer::run`](crate::rabbitmq::RabbitMqInboxConsumer::run).
///
/// Every message the consumer finished is counted once, in exactly one of
/// `processed`, `duplicates` and `dead_lettered`; a message it left to the
/// broker (the consumer stopped or lost its connection while the message
/// waited for a retry) is counted in none of them and is delivered again.
/// `retried` and `database_outages` count attempts, not messages. The
/// policy behind the counts is described in `docs/inbox.md`.
///
/// ```
/// let stats = outbox_inbox::ConsumerStats::default();
/// assert_eq!(stats.finished(), 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerStats {
    /// Messages whose handler ran and committed, with the inbox row.
    pub processed: u64,
    /// Messages whose event was processed before (by this consumer, or a
    /// racing delivery that committed first); the handler did not run.
    pub duplicates: u64,
    /// Messages the broker accepted into the dead-letter topic or exchange:
    /// poison (not decodable) at once, or after `max_attempts` failed
    /// handler attempts.
    pub dead_lettered: u64,
    /// Failed handler attempts (an error or a panic) that were followed by
    /// another attempt of the same message. A message that succeeds at its
    /// third attempt adds 2; one dead-lettered after `max_attempts`
    /// attempts adds `max_attempts - 1`. Database outages are not counted
    /// here.
    pub retried: u64,
    /// Attempts that found the database unreachable (an
    /// [`Error::Database`](crate::Error::Database), or a handler error
    /// caused by a lost connection) and were tried again after a pause,
    /// without counting as one of the message's attempts.
    pub database_outages: u64,
}

impl ConsumerStats {
    /// Messages finished: `processed + duplicates + dead_lettered`.
    pub fn finished(&self) -> u64 {
        self.processed + self.duplicates + self.dead_lettered
    }
}
