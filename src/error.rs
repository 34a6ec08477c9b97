//! The error type of the `outbox` crate.

/// Everything that can go wrong while enqueueing events or migrating the schema.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The event's `Serialize` implementation failed.
    #[error("failed to serialize the payload of event `{event_type}`: {source}")]
    Serialize {
        /// CloudEvents type of the event.
        event_type: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },

    /// The payload is larger than the writer's limit. Nothing was written, and
    /// the caller's transaction is still usable.
    #[error("payload of event `{event_type}` is {size} bytes, above the limit of {limit} bytes")]
    PayloadTooLarge {
        /// CloudEvents type of the event.
        event_type: String,
        /// Size of the serialized payload in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },

    /// A field of the event does not fit the `outbox_events` contract.
    /// Nothing was written, and the caller's transaction is still usable.
    #[error("invalid event `{event_type}`: {field} {reason}")]
    InvalidEvent {
        /// CloudEvents type of the event (may be empty when that is the problem).
        event_type: String,
        /// The offending field, named as its column.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// A header cannot be carried as a CloudEvents extension attribute.
    /// Nothing was written, and the caller's transaction is still usable.
    #[error("invalid header `{name}` on event `{event_type}`: {reason}")]
    InvalidHeader {
        /// CloudEvents type of the event.
        event_type: String,
        /// The header name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A migration already applied to the database differs from the one this
    /// version of `outbox` ships.
    #[error(
        "outbox migration {version} applied to this database differs from the one this \
         version of outbox ships (checksum mismatch); refusing to migrate a schema that was \
         changed by hand or by another outbox release"
    )]
    MigrationModified {
        /// Version number of the changed migration.
        version: i64,
    },

    /// A migration is recorded as failed part-way in `_outbox_migrations`.
    /// MariaDB and MySQL commit each DDL statement at once, so a migration
    /// interrupted there can leave part of its changes behind.
    #[error(
        "outbox migration {version} is partially applied: its row in _outbox_migrations says \
         success = false; finish or undo its changes by hand, delete that row, then migrate again"
    )]
    MigrationPartiallyApplied {
        /// Version number of the interrupted migration.
        version: i64,
    },

    /// The lock that keeps concurrent migrators apart was not taken: another
    /// process held it for longer than this connection waits for a lock.
    /// This call migrated nothing; the process holding the lock is
    /// migrating the database, or hung while it did.
    #[error("cannot take the outbox migration lock, {lock}: {reason}")]
    MigrationLock {
        /// The lock, as the database names it.
        lock: String,
        /// Why it was not taken, naming the setting that bounds the wait.
        reason: String,
    },

    /// Any other failure while migrating the schema.
    #[error("outbox migration failed: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),

    /// The database rejected a statement or could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl Error {
    /// Whether the error was raised before any SQL ran, because of the event
    /// itself (payload too large, invalid field or header, serialization).
    /// Such an error leaves the caller's transaction usable.
    pub fn is_rejected_event(&self) -> bool {
        matches!(
            self,
            Error::Serialize { .. }
                | Error::PayloadTooLarge { .. }
                | Error::InvalidEvent { .. }
                | Error::InvalidHeader { .. }
        )
    }
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        match error {
            sqlx::migrate::MigrateError::VersionMismatch(version) => {
                Error::MigrationModified { version }
            }
            sqlx::migrate::MigrateError::Dirty(version) => {
                Error::MigrationPartiallyApplied { version }
            }
            other => Error::Migrate(other),
        }
    }
}
