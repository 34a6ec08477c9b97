//! [`SqliteStore`]: the relay's statements on SQLite, a single writer that
//! several relay processes may share in WAL mode.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteQueryResult};

use super::sql_store::{Bound, Dialect, NumberedSql, RowsAffected, SqlStore, Statements};

/// How long SQLite waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The relay's store on SQLite.
pub type SqliteStore = SqlStore<SqliteDialect>;

/// What sets SQLite apart: text for times, and no way to tell other
/// processes' commits. Integer lists bind as JSON (`json_each`), durations
/// as seconds; fetches and marks run with the connection's settings (SQLite
/// plans without statistics unless `ANALYZE` was run, so a backlog does not
/// change its plan).
#[derive(Debug, Clone, Copy)]
pub struct SqliteDialect;

/// The statements of `store/sql/sqlite/`.
const STATEMENTS: Statements = numbered_statements!("sqlite");

impl Dialect for SqliteDialect {
    type Database = Sqlite;

    const STATEMENTS: &'static Statements = &STATEMENTS;
    /// The file is created when missing and opened in WAL mode with a busy
    /// timeout, as several processes sharing one need.
    fn connect_options(url: &str) -> Result<SqliteConnectOptions, sqlx::Error> {
        Ok(SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(BUSY_TIMEOUT))
    }

    /// Times are text in the format of the `created_at` default,
    /// `%Y-%m-%dT%H:%M:%fZ` (milliseconds), which compares in time order.
    fn time(time: DateTime<Utc>) -> Bound<Sqlite> {
        Box::new(time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
    }
}

impl RowsAffected for SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        SqliteQueryResult::rows_affected(self)
    }
}
