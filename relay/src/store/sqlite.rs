//! [`SqliteStore`]: the relay's statements on SQLite, a single writer that
//! several relay processes may share in WAL mode.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteQueryResult, SqliteRow};

use super::rows::{direct_store_row, integers_json, seconds};
use super::sql_store::Param::{
    AfterId, EventId, EventIds, ExcludedIds, HoldDead, LastError, Leases, Limit, OlderThan,
    PartitionCount, Partitions, RelayId, RetryDelay, SelectedAggregateId, SelectedAggregateType,
    SelectedEventId, Since, TimeToLive, Topic, Until,
};
use super::sql_store::{
    Bound, Dialect, LeaseStatements, RowsAffected, SqlStore, Statement, Statements,
};

/// How long SQLite waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The relay's store on SQLite.
pub type SqliteStore = SqlStore<SqliteDialect>;

/// What sets SQLite apart: JSON for integer lists, text for times,
/// durations in seconds, and no way to tell other processes' commits.
#[derive(Debug, Clone, Copy)]
pub struct SqliteDialect;

/// The statements of `store/sql/sqlite/`, with their numbered
/// placeholders' values in order.
const STATEMENTS: Statements = Statements {
    partition_count: Statement::new(include_str!("sql/sqlite/partition_count.sql"), &[]),
    heartbeat_upsert: Statement::new(
        include_str!("sql/sqlite/heartbeat_upsert.sql"),
        &[RelayId, TimeToLive],
    ),
    heartbeat_forget_dead: Statement::new(
        include_str!("sql/sqlite/heartbeat_forget_dead.sql"),
        &[],
    ),
    live_relays: Statement::new(include_str!("sql/sqlite/live_relays.sql"), &[]),
    deregister: Statement::new(include_str!("sql/sqlite/deregister.sql"), &[RelayId]),
    leases: LeaseStatements::Returning {
        renew: Statement::new(
            include_str!("sql/sqlite/renew_leases.sql"),
            &[RelayId, TimeToLive, Leases],
        ),
        acquire: Statement::new(
            include_str!("sql/sqlite/acquire_leases.sql"),
            &[RelayId, TimeToLive, Limit],
        ),
    },
    release_leases: Statement::new(
        include_str!("sql/sqlite/release_leases.sql"),
        &[RelayId, Leases],
    ),
    fetch_pending: Statement::new(
        include_str!("sql/sqlite/fetch_pending.sql"),
        &[PartitionCount, Partitions, HoldDead, Limit, ExcludedIds],
    ),
    mark_published: Statement::new(
        include_str!("sql/sqlite/mark_published.sql"),
        &[RelayId, PartitionCount, Leases, EventIds],
    ),
    record_failure: Statement::new(
        include_str!("sql/sqlite/record_failure.sql"),
        &[
            RelayId,
            PartitionCount,
            Leases,
            EventId,
            LastError,
            RetryDelay,
        ],
    ),
    delete_published: Statement::new(
        include_str!("sql/sqlite/delete_published.sql"),
        &[OlderThan, Limit],
    ),
    backlog: Statement::new(include_str!("sql/sqlite/backlog.sql"), &[]),
    status: Statement::new(include_str!("sql/sqlite/status.sql"), &[]),
    status_topics: Statement::new(include_str!("sql/sqlite/status_topics.sql"), &[]),
    status_leases: Statement::new(include_str!("sql/sqlite/status_leases.sql"), &[]),
    database_time: Statement::new(include_str!("sql/sqlite/database_time.sql"), &[]),
    topic_exists: Statement::new(include_str!("sql/sqlite/topic_exists.sql"), &[Topic]),
    fetch_published: Statement::new(
        include_str!("sql/sqlite/fetch_published.sql"),
        &[Topic, Since, Until, AfterId, Limit],
    ),
    list_dead: Statement::new(
        include_str!("sql/sqlite/list_dead.sql"),
        &[
            SelectedEventId,
            SelectedAggregateType,
            SelectedAggregateId,
            Limit,
        ],
    ),
    retry_dead: Statement::new(
        include_str!("sql/sqlite/retry_dead.sql"),
        &[SelectedEventId, SelectedAggregateType, SelectedAggregateId],
    ),
    discard_dead: Statement::new(
        include_str!("sql/sqlite/discard_dead.sql"),
        &[SelectedEventId, SelectedAggregateType, SelectedAggregateId],
    ),
};

impl Dialect for SqliteDialect {
    type Database = Sqlite;

    const STATEMENTS: &'static Statements = &STATEMENTS;
    /// A fetch runs with the connection's settings: SQLite plans without
    /// statistics unless `ANALYZE` was run, so a backlog does not change
    /// its plan.
    const FETCH_SETTINGS: &'static [&'static str] = &[];
    /// A mark runs with the connection's settings.
    const MARK_SETTINGS: &'static [&'static str] = &[];
    /// Preparing a statement costs SQLite little: the fetch is planned for
    /// its values each time.
    const PLAN_EACH_FETCH: bool = true;

    /// The file is created when missing and opened in WAL mode with a busy
    /// timeout, as several processes sharing one need.
    fn connect_options(url: &str) -> Result<SqliteConnectOptions, sqlx::Error> {
        Ok(SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(BUSY_TIMEOUT))
    }

    /// Integer lists bind as JSON arrays (`json_each`).
    fn partition_list(partitions: &[i32]) -> Bound<Sqlite> {
        Box::new(integers_json(partitions))
    }

    fn id_list(ids: &[i64]) -> Bound<Sqlite> {
        Box::new(integers_json(ids))
    }

    /// Times are text in the format of the `created_at` default,
    /// `%Y-%m-%dT%H:%M:%fZ` (milliseconds), which compares in time order.
    fn time(time: DateTime<Utc>) -> Bound<Sqlite> {
        Box::new(time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
    }

    /// Durations bind as seconds.
    fn duration(duration: Duration) -> Bound<Sqlite> {
        Box::new(seconds(duration))
    }

    /// Seconds, NULL for a dead event.
    fn retry_delay(retry_in: Option<Duration>) -> Bound<Sqlite> {
        Box::new(retry_in.map(seconds))
    }
}

impl RowsAffected for SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        SqliteQueryResult::rows_affected(self)
    }
}

direct_store_row!(SqliteRow);
