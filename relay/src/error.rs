//! The error type of the relay crate.

use outbox::broker::ClientError;

/// Everything that stops the relay or one of its commands.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file cannot be read or parsed, or a value in it is
    /// out of range.
    #[error("config {path}: {reason}")]
    Config {
        /// The file, or `--config` when no file is involved.
        path: String,
        /// What is wrong, naming the field.
        reason: String,
    },

    /// A `--database-url` that names no supported database.
    #[error("invalid database URL `{url}`: {reason}")]
    InvalidDatabaseUrl {
        /// The URL as given, with any password masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A `--broker` value that names no supported broker.
    #[error("invalid broker `{url}`: {reason}")]
    InvalidBrokerUrl {
        /// The value as given, with any password masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The configuration asks for something this build of the relay was
    /// compiled without: a database, a broker or the WAL source.
    #[error(
        "{needed_for} needs the `{feature}` feature of outbox-relay, and this build was compiled \
         without it; build with `--features {feature}` (the default features include it)"
    )]
    FeatureNotBuilt {
        /// The Cargo feature: `postgres`, `mysql`, `sqlite`, `kafka`,
        /// `rabbitmq` or `logical`.
        feature: &'static str,
        /// What asked for it, e.g. `--broker kafka://localhost:9092`.
        needed_for: String,
    },

    /// The outbox schema could not be created or upgraded.
    #[error(transparent)]
    Schema(#[from] outbox::Error),

    /// A database statement failed or the database could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),

    /// A database statement did not finish within its bound; names what
    /// it was doing and the bound.
    #[error("{0}")]
    DatabaseTimeout(String),

    /// The Kafka client failed outside of a single event's delivery.
    /// The client's error is an `rdkafka::error::KafkaError`
    /// ([`ClientError::downcast_ref`]).
    #[error("kafka: {0}")]
    Kafka(#[source] ClientError),

    /// Reading a file or writing to stdout failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),

    /// An operator command named something that does not exist.
    #[error("{0}")]
    NotFound(String),

    /// A command-line value that is malformed.
    #[error("{0}")]
    InvalidArgument(String),

    /// `outbox-relay replay` stopped at an event the broker did not take;
    /// the events before it in the replay's order were published.
    #[error(
        "replay of topic `{topic}` stopped after {replayed} event(s) were replayed: event {event_id} failed: {reason}"
    )]
    ReplayFailed {
        /// The topic being replayed.
        topic: String,
        /// Events the broker acknowledged before the replay stopped.
        replayed: u64,
        /// The event that failed.
        event_id: String,
        /// The broker's error.
        reason: String,
    },

    /// The logical source cannot run here: the database, its settings or
    /// the role refuse logical decoding, or the replication stream failed.
    #[error("{0}")]
    Logical(String),

    /// The relay did not stop cleanly.
    #[error("{0}")]
    Shutdown(String),

    /// Output could not be encoded as JSON.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),

    /// A metric could not be registered or encoded.
    #[error("metrics: {0}")]
    Metrics(String),

    /// The HTTP endpoint could not listen on its address.
    #[error("http endpoint {address}: {source}")]
    HttpListen {
        /// The `[http] listen` address.
        address: std::net::SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
}

impl From<prometheus::Error> for Error {
    fn from(error: prometheus::Error) -> Self {
        Error::Metrics(error.to_string())
    }
}

impl Error {
    /// The Kafka client's `error`.
    #[cfg(feature = "kafka")]
    pub(crate) fn kafka(error: rdkafka::error::KafkaError) -> Error {
        Error::Kafka(ClientError::new(error))
    }

    /// [`Error::FeatureNotBuilt`] unless `built`, the value of
    /// `cfg!(feature = ...)` for `feature`.
    pub(crate) fn require_feature(
        feature: &'static str,
        built: bool,
        needed_for: impl FnOnce() -> String,
    ) -> Result<(), Error> {
        if built {
            Ok(())
        } else {
            Err(Error::FeatureNotBuilt {
                feature,
                needed_for: needed_for(),
            })
        }
    }

    /// An invalid database or broker URL that says where its value came
    /// from (`source`: a flag, an environment variable); other errors as
    /// they are.
    pub(crate) fn with_source(self, source: &str) -> Error {
        match self {
            Error::InvalidDatabaseUrl { url, reason } => Error::InvalidDatabaseUrl {
                url,
                reason: format!("{reason} (from {source})"),
            },
            Error::InvalidBrokerUrl { url, reason } => Error::InvalidBrokerUrl {
                url,
                reason: format!("{reason} (from {source})"),
            },
            other => other,
        }
    }
}
