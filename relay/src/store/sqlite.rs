//! [`SqliteStore`]: the relay's statements on SQLite, a single writer that
//! several relay processes may share in WAL mode.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow};
use tokio_util::sync::CancellationToken;

use super::returning::returning_statements;
use super::rows::{direct_store_row, integers_json};
use super::{ACQUIRE_TIMEOUT, POOL_SIZE};
use crate::Error;
use crate::wakeup::Wakeup;

/// How long SQLite waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A fetch runs with the connection's settings: SQLite plans without
/// statistics unless `ANALYZE` was run, so a backlog does not change its
/// plan.
const FETCH_SETTINGS: &[&str] = &[];

/// A mark runs with the connection's settings.
const MARK_SETTINGS: &[&str] = &[];

/// The relay's store on SQLite.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// A store over `pool`.
    pub fn new(pool: SqlitePool) -> Self {
        SqliteStore { pool }
    }

    /// Open the `sqlite://` URL `url`. The file is created when missing and
    /// opened in WAL mode with a busy timeout, as several processes sharing
    /// one need.
    ///
    /// # Errors
    /// [`Error::InvalidDatabaseUrl`] for options sqlx rejects;
    /// [`Error::Database`] when the file cannot be opened.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|error| super::invalid_url(url, error))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        Ok(SqliteStore::new(pool))
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

direct_store_row!(SqliteRow);

/// Times are text in the format of the `created_at` default,
/// `%Y-%m-%dT%H:%M:%fZ` (milliseconds), which compares in time order.
fn time_text(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// SQLite cannot tell other processes' commits: the batch loop polls.
fn poll_for_commits(_pool: &SqlitePool, _wakeup: Wakeup, _stop: CancellationToken) {}

returning_statements!(
    SqliteStore,
    "sqlite",
    integers_json,
    time_text,
    FETCH_SETTINGS,
    MARK_SETTINGS,
    poll_for_commits
);
