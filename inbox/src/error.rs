//! The error type of the inbox crate.

use outbox::broker::ClientError;

/// A boxed error from user code (a handler).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while processing an incoming event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The handler failed. Its transaction was rolled back, nothing was
    /// recorded, and the message should be redelivered.
    #[error("handler failed for event {event_id}: {source}")]
    Handler {
        /// The event's id.
        event_id: String,
        /// The handler's error.
        #[source]
        source: BoxError,
    },

    /// The message is not an event this consumer can decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),

    /// A database statement failed or the database could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),

    /// The Kafka client failed.
    /// The client's error is an `rdkafka::error::KafkaError`
    /// ([`ClientError::downcast_ref`]).
    #[error("kafka: {0}")]
    Kafka(#[source] ClientError),

    /// The AMQP client failed.
    /// The client's error is a `lapin::Error`
    /// ([`ClientError::downcast_ref`]).
    #[error("amqp: {0}")]
    Amqp(#[source] ClientError),

    /// The Redis client failed: a command, or reaching the server.
    /// The client's error is a `redis::RedisError`
    /// ([`ClientError::downcast_ref`]).
    #[error("redis: {0}")]
    Redis(#[source] ClientError),

    /// The broker did not take a dead letter: it nacked it, could not
    /// route it, or did not confirm it in time. The message stays
    /// unacknowledged and dead-lettering is tried again.
    #[error("dead letter not accepted: {0}")]
    DeadLetter(String),

    /// A setting is out of range.
    #[error("invalid inbox setting: {0}")]
    Config(String),
}

impl Error {
    /// The Kafka client's `error`.
    #[cfg(feature = "kafka")]
    pub(crate) fn kafka(error: rdkafka::error::KafkaError) -> Error {
        Error::Kafka(ClientError::new(error))
    }

    /// The AMQP client's `error`.
    #[cfg(feature = "rabbitmq")]
    pub(crate) fn amqp(error: lapin::Error) -> Error {
        Error::Amqp(ClientError::new(error))
    }

    /// The Redis client's `error`.
    #[cfg(feature = "redis")]
    pub(crate) fn redis(error: redis::RedisError) -> Error {
        Error::Redis(ClientError::new(error))
    }
}

/// Why an incoming message is not a usable event. Such a message is
/// poison: redelivering it cannot help, so the adapters dead-letter it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A required CloudEvents attribute is missing.
    #[error("message has no CloudEvents `{attribute}` attribute")]
    MissingAttribute {
        /// The attribute, e.g. `id` or `type`.
        attribute: &'static str,
    },

    /// An attribute is present but not valid.
    #[error("CloudEvents `{attribute}` attribute is invalid: {reason}")]
    InvalidAttribute {
        /// The attribute.
        attribute: &'static str,
        /// What is wrong.
        reason: String,
    },

    /// The event type is not the one the consumer expects.
    #[error("unexpected event type `{actual}`, expected `{expected}`")]
    UnexpectedType {
        /// The type the consumer handles.
        expected: String,
        /// The type the message carries.
        actual: String,
    },

    /// The payload's schema version is newer (or older) than supported.
    #[error(
        "unsupported version {actual} of event type `{event_type}`; this consumer reads versions {supported}"
    )]
    UnsupportedVersion {
        /// The event type.
        event_type: String,
        /// The version the message carries.
        actual: i32,
        /// The versions the consumer reads, e.g. `1..=2`.
        supported: String,
    },

    /// A structured-mode message is not a CloudEvents JSON event.
    #[error("not a CloudEvents JSON event: {reason}")]
    NotStructured {
        /// What is wrong.
        reason: String,
    },

    /// The body is not JSON, or not the JSON the event type describes.
    #[error("payload of event `{event_type}` does not decode: {reason}")]
    Payload {
        /// The event type.
        event_type: String,
        /// The JSON error.
        reason: String,
    },
}
