//! [`MySqlStore`]: the relay's statements on MySQL and MariaDB.
//!
//! MariaDB has no `UPDATE ... RETURNING`, so the lease statements that need
//! their result run as a transaction of an update and a select. Its
//! placeholders are positional (`?`): a value a statement uses twice is
//! bound twice.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::mysql::{MySqlConnectOptions, MySqlQueryResult};
use sqlx::MySql;

use super::sql_store::Param::{
    self, AfterId, Dead, ErrorContains, EventId, EventIds, ExcludedIds, FilterEventType,
    FilterTopic, HoldDead, LastError, Leases, Limit, MaxBytes, OlderThan, PartitionCount,
    Partitions, RelayId, RetryDelay, SelectedAggregateId, SelectedAggregateType, SelectedEventId,
    Since, TimeToLive, Topic, Until,
};
use super::sql_store::{
    Bound, Dialect, LeaseStatements, RowsAffected, SqlStore, Statement, Statements,
};

/// The relay's store on MySQL / MariaDB.
pub type MySqlStore = SqlStore<MySqlDialect>;

/// What sets MySQL / MariaDB apart: positional placeholders, `DATETIME` in
/// UTC, durations in microseconds, and leases changed by an update and a
/// select. Integer lists bind as JSON (`JSON_TABLE`).
#[derive(Debug, Clone, Copy)]
pub struct MySqlDialect;

/// The statements of `store/sql/mysql/`, with the value of each `?` in
/// order.
const STATEMENTS: Statements = Statements {
    partition_count: Statement::new(include_str!("sql/mysql/partition_count.sql"), &[]),
    heartbeat_upsert: Statement::new(
        include_str!("sql/mysql/heartbeat_upsert.sql"),
        &[RelayId, TimeToLive],
    ),
    heartbeat_forget_dead: Statement::new(include_str!("sql/mysql/heartbeat_forget_dead.sql"), &[]),
    live_relays: Statement::new(include_str!("sql/mysql/live_relays.sql"), &[]),
    deregister: Statement::new(include_str!("sql/mysql/deregister.sql"), &[RelayId]),
    leases: LeaseStatements::UpdateThenSelect {
        renew: Statement::new(
            include_str!("sql/mysql/renew_leases.sql"),
            &[Leases, TimeToLive, RelayId],
        ),
        lock_free: Statement::new(include_str!("sql/mysql/lock_free_partitions.sql"), &[Limit]),
        take: Statement::new(
            include_str!("sql/mysql/take_partitions.sql"),
            &[Partitions, RelayId, TimeToLive],
        ),
        select_held: Statement::new(
            include_str!("sql/mysql/select_leases_held.sql"),
            &[Partitions, RelayId],
        ),
    },
    release_leases: Statement::new(
        include_str!("sql/mysql/release_leases.sql"),
        &[Leases, RelayId],
    ),
    fetch_pending: Statement::new(
        FETCH_PENDING,
        &[
            PartitionCount,
            PartitionCount,
            Partitions,
            ExcludedIds,
            HoldDead,
            Limit,
            MaxBytes,
        ],
    ),
    mark_published: Statement::new(
        include_str!("sql/mysql/mark_published.sql"),
        &[PartitionCount, Leases, EventIds, RelayId],
    ),
    delete_acknowledged: Statement::new(
        include_str!("sql/mysql/delete_acknowledged.sql"),
        &[PartitionCount, Leases, EventIds, RelayId],
    ),
    record_failure: Statement::new(
        include_str!("sql/mysql/record_failure.sql"),
        &[
            PartitionCount,
            Leases,
            LastError,
            Dead,
            RetryDelay,
            EventId,
            RelayId,
        ],
    ),
    delete_published: Statement::new(
        include_str!("sql/mysql/delete_published.sql"),
        &[OlderThan, Limit],
    ),
    backlog: Statement::new(include_str!("sql/mysql/backlog.sql"), &[]),
    status: Statement::new(include_str!("sql/mysql/status.sql"), &[]),
    status_topics: Statement::new(include_str!("sql/mysql/status_topics.sql"), &[]),
    status_leases: Statement::new(include_str!("sql/mysql/status_leases.sql"), &[]),
    database_time: Statement::new(include_str!("sql/mysql/database_time.sql"), &[]),
    topic_exists: Statement::new(include_str!("sql/mysql/topic_exists.sql"), &[Topic]),
    fetch_published: Statement::new(
        include_str!("sql/mysql/fetch_published.sql"),
        &[Topic, Since, Until, AfterId, Limit],
    ),
    list_dead: Statement::new(
        include_str!("sql/mysql/list_dead.sql"),
        &[
            SelectedEventId,
            SelectedEventId,
            SelectedAggregateType,
            SelectedAggregateType,
            SelectedAggregateId,
            Limit,
        ],
    ),
    retry_dead: Statement::new(include_str!("sql/mysql/retry_dead.sql"), SELECTOR),
    discard_dead: Statement::new(include_str!("sql/mysql/discard_dead.sql"), SELECTOR),
    page_topics: Statement::new(include_str!("sql/mysql/page_topics.sql"), &[]),
    page_relays: Statement::new(include_str!("sql/mysql/page_relays.sql"), &[]),
    page_dead: Statement::new(
        include_str!("sql/mysql/page_dead.sql"),
        &[
            FilterTopic,
            FilterTopic,
            FilterEventType,
            FilterEventType,
            SelectedAggregateType,
            SelectedAggregateType,
            SelectedAggregateId,
            ErrorContains,
            ErrorContains,
            Since,
            Until,
            Limit,
        ],
    ),
    page_event: Statement::new(include_str!("sql/mysql/page_event.sql"), &[EventId]),
    page_published_recently: Statement::new(
        include_str!("sql/mysql/page_published_recently.sql"),
        &[OlderThan],
    ),
};

/// The fetch, as [`ExplainFetch`] explains it.
const FETCH_PENDING: &str = include_str!("sql/mysql/fetch_pending.sql");

/// The dead-event filters, each `NULL` test taking its value again.
const SELECTOR: &[Param] = &[
    SelectedEventId,
    SelectedEventId,
    SelectedAggregateType,
    SelectedAggregateType,
    SelectedAggregateId,
];

impl Dialect for MySqlDialect {
    type Database = MySql;

    const STATEMENTS: &'static Statements = &STATEMENTS;
    /// The fetch is prepared once: `FORCE INDEX` fixes its plan.
    const PLAN_EACH_FETCH: bool = false;

    fn connect_options(url: &str) -> Result<MySqlConnectOptions, sqlx::Error> {
        MySqlConnectOptions::from_str(url)
    }

    /// `DATETIME` has no zone; the schema keeps it in UTC.
    fn time(time: DateTime<Utc>) -> Bound<MySql> {
        Box::new(time.naive_utc())
    }

    /// Durations bind as whole microseconds (`INTERVAL ? MICROSECOND`).
    fn duration(duration: Duration) -> Bound<MySql> {
        Box::new(micros(duration))
    }

    /// Microseconds; 0 for a dead event, which `Dead` marks as such.
    fn retry_delay(retry_in: Option<Duration>) -> Bound<MySql> {
        Box::new(retry_in.map_or(0, micros))
    }
}

/// The fetch's plan, for the test that keeps it free of a sort over the
/// pending rows.
#[cfg(feature = "test-util")]
mod explain {
    use futures::future::BoxFuture;
    use sqlx::mysql::MySqlArguments;
    use sqlx::MySqlPool;

    use super::{FETCH_PENDING, MySqlDialect};
    use crate::error::Error;
    use crate::store::sql_store::ExplainFetch;

    /// As `EXPLAIN FORMAT=JSON` gives it; the fetch has no settings of its own.
    impl ExplainFetch for MySqlDialect {
        fn explain_fetch(
            pool: &MySqlPool,
            arguments: MySqlArguments,
        ) -> BoxFuture<'_, Result<serde_json::Value, Error>> {
            Box::pin(async move {
                let explain = format!("EXPLAIN FORMAT=JSON {FETCH_PENDING}");
                let plan: String = sqlx::query_scalar_with(sqlx::AssertSqlSafe(explain), arguments)
                    .fetch_one(pool)
                    .await?;
                serde_json::from_str(&plan)
                    .map_err(|error| Error::Database(sqlx::Error::Decode(Box::new(error))))
            })
        }
    }
}

/// Durations travel as whole microseconds (`INTERVAL ? MICROSECOND`).
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl RowsAffected for MySqlQueryResult {
    fn rows_affected(&self) -> u64 {
        MySqlQueryResult::rows_affected(self)
    }
}
