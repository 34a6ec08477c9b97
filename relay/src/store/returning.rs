//! The stores of the databases with `UPDATE ... RETURNING`: PostgreSQL
//! ([`PostgresStore`]) and SQLite ([`SqliteStore`]). Their statements differ
//! only in the SQL files they load (`store/sql/<backend>/`) and in how a
//! list of integers is bound (an array on PostgreSQL, JSON on SQLite), so
//! one macro writes both.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{PgPool, Row, SqlitePool};

use super::{
    ClaimedEvent, DeadEvent, DeadSelector, FailedAttempt, Lease, LiveLease, OutboxBacklog,
    OutboxStatus, OutboxStore, ReplayWindow, TopicStatus, integers_json, leases_json,
    parse_headers, seconds, selector_binds,
};
use crate::{Error, OutboundEvent};

/// PostgreSQL binds integer lists as arrays.
fn integer_array<T: Copy>(values: &[T]) -> Vec<T> {
    values.to_vec()
}

/// PostgreSQL binds times as `timestamptz`.
fn timestamptz(time: DateTime<Utc>) -> DateTime<Utc> {
    time
}

/// SQLite keeps times as text in the format of its `created_at` default,
/// `%Y-%m-%dT%H:%M:%fZ` (milliseconds), which compares in time order.
fn sqlite_time_text(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Statements run before a mark, in its transaction, on PostgreSQL: its
/// commit does not wait for the WAL flush. A mark lost to a database crash
/// leaves its events pending, so they are published again: at least once
/// still holds, and the commit no longer waits on the disk. Every other
/// statement (leases, failures, dead events, retention) commits durably,
/// and its flush covers the marks committed before it.
const POSTGRES_MARK_SETTINGS: &[&str] = &["SET LOCAL synchronous_commit = off"];

/// SQLite marks with its connection's settings.
const SQLITE_MARK_SETTINGS: &[&str] = &[];

macro_rules! returning_store {
    ($store:ident, $pool:ty, $row:ty, $backend:literal, $doc:literal, $bind_integers:path, $bind_time:path, $mark_settings:path) => {
        #[doc = $doc]
        #[derive(Debug, Clone)]
        pub struct $store {
            pool: $pool,
        }

        impl $store {
            /// A store over `pool`.
            pub fn new(pool: $pool) -> Self {
                $store { pool }
            }

            /// The pool.
            pub fn pool(&self) -> &$pool {
                &self.pool
            }

            fn lease_from_row(row: &$row) -> Result<Lease, sqlx::Error> {
                Ok(Lease {
                    partition_no: row.try_get("partition_no")?,
                    lease_token: row.try_get("lease_token")?,
                })
            }

            fn outbound_from_row(row: &$row) -> Result<OutboundEvent, sqlx::Error> {
                let event_id_text: String = row.try_get("event_id")?;
                let event_id = uuid::Uuid::parse_str(&event_id_text).map_err(|error| {
                    sqlx::Error::ColumnDecode {
                        index: "event_id".to_owned(),
                        source: Box::new(error),
                    }
                })?;
                let headers: String = row.try_get("headers")?;
                Ok(OutboundEvent {
                    id: row.try_get("id")?,
                    event_id,
                    event_type: row.try_get("event_type")?,
                    event_version: row.try_get("event_version")?,
                    source: row.try_get("source")?,
                    aggregate_type: row.try_get("aggregate_type")?,
                    aggregate_id: row.try_get("aggregate_id")?,
                    topic: row.try_get("topic")?,
                    payload: row.try_get("payload")?,
                    headers: parse_headers(&event_id_text, &headers),
                    created_at: row.try_get("created_at")?,
                    attempts: row.try_get("attempts")?,
                    replay: false,
                })
            }

            fn claimed_from_row(row: &$row) -> Result<ClaimedEvent, sqlx::Error> {
                Ok(ClaimedEvent {
                    partition_no: row.try_get("partition_no")?,
                    event: Self::outbound_from_row(row)?,
                })
            }

            fn dead_from_row(row: &$row) -> Result<DeadEvent, sqlx::Error> {
                Ok(DeadEvent {
                    id: row.try_get("id")?,
                    event_id: row.try_get("event_id")?,
                    event_type: row.try_get("event_type")?,
                    aggregate_type: row.try_get("aggregate_type")?,
                    aggregate_id: row.try_get("aggregate_id")?,
                    topic: row.try_get("topic")?,
                    attempts: row.try_get("attempts")?,
                    last_error: row.try_get("last_error")?,
                })
            }
        }
        impl OutboxStore for $store {
            fn migrate(&self) -> BoxFuture<'_, Result<(), Error>> {
                Box::pin(async move { Ok(outbox::migrate(&self.pool).await?) })
            }

            fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>> {
                Box::pin(async move {
                    Ok(sqlx::query_scalar(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/partition_count.sql"
                    )))
                    .fetch_one(&self.pool)
                    .await?)
                })
            }

            fn heartbeat<'a>(
                &'a self,
                relay_id: &'a str,
                ttl: Duration,
            ) -> BoxFuture<'a, Result<i64, Error>> {
                Box::pin(async move {
                    sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/heartbeat_upsert.sql"
                    )))
                    .bind(relay_id)
                    .bind(seconds(ttl))
                    .execute(&self.pool)
                    .await?;
                    sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/heartbeat_forget_dead.sql"
                    )))
                    .execute(&self.pool)
                    .await?;
                    Ok(sqlx::query_scalar(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/live_relays.sql"
                    )))
                    .fetch_one(&self.pool)
                    .await?)
                })
            }

            fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
                Box::pin(async move {
                    sqlx::query(include_str!(concat!("sql/", $backend, "/deregister.sql")))
                        .bind(relay_id)
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                })
            }

            fn renew_leases<'a>(
                &'a self,
                relay_id: &'a str,
                leases: &'a [Lease],
                ttl: Duration,
            ) -> BoxFuture<'a, Result<Vec<Lease>, Error>> {
                Box::pin(async move {
                    if leases.is_empty() {
                        return Ok(Vec::new());
                    }
                    let rows =
                        sqlx::query(include_str!(concat!("sql/", $backend, "/renew_leases.sql")))
                            .bind(relay_id)
                            .bind(seconds(ttl))
                            .bind(leases_json(leases))
                            .fetch_all(&self.pool)
                            .await?;
                    Ok(rows
                        .iter()
                        .map(Self::lease_from_row)
                        .collect::<Result<_, _>>()?)
                })
            }

            fn acquire_leases<'a>(
                &'a self,
                relay_id: &'a str,
                limit: i64,
                ttl: Duration,
            ) -> BoxFuture<'a, Result<Vec<Lease>, Error>> {
                Box::pin(async move {
                    if limit <= 0 {
                        return Ok(Vec::new());
                    }
                    let rows = sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/acquire_leases.sql"
                    )))
                    .bind(relay_id)
                    .bind(seconds(ttl))
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .iter()
                        .map(Self::lease_from_row)
                        .collect::<Result<_, _>>()?)
                })
            }

            fn release_leases<'a>(
                &'a self,
                relay_id: &'a str,
                leases: &'a [Lease],
            ) -> BoxFuture<'a, Result<u64, Error>> {
                Box::pin(async move {
                    if leases.is_empty() {
                        return Ok(0);
                    }
                    let result = sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/release_leases.sql"
                    )))
                    .bind(relay_id)
                    .bind(leases_json(leases))
                    .execute(&self.pool)
                    .await?;
                    Ok(result.rows_affected())
                })
            }

            fn fetch_pending<'a>(
                &'a self,
                partition_count: i32,
                partitions: &'a [i32],
                exclude: &'a [i64],
                hold_dead: bool,
                limit: i64,
            ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>> {
                Box::pin(async move {
                    if partitions.is_empty() {
                        return Ok(Vec::new());
                    }
                    // Not a cached prepared statement: the database plans
                    // each fetch with its actual values. A generic plan of a
                    // cached statement compares every row with each id of
                    // `exclude` (thousands while marks are in flight);
                    // PostgreSQL's plan for the actual list hashes it.
                    let rows = sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/fetch_pending.sql"
                    )))
                    .persistent(false)
                    .bind(partition_count)
                    .bind($bind_integers(partitions))
                    .bind(hold_dead)
                    .bind(limit)
                    .bind($bind_integers(exclude))
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .iter()
                        .map(Self::claimed_from_row)
                        .collect::<Result<_, _>>()?)
                })
            }

            fn mark_published<'a>(
                &'a self,
                relay_id: &'a str,
                partition_count: i32,
                leases: &'a [Lease],
                ids: &'a [i64],
            ) -> BoxFuture<'a, Result<u64, Error>> {
                Box::pin(async move {
                    if ids.is_empty() {
                        return Ok(0);
                    }
                    let mark = sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/mark_published.sql"
                    )))
                    .bind(relay_id)
                    .bind(partition_count)
                    .bind(leases_json(leases))
                    .bind($bind_integers(ids));
                    if $mark_settings.is_empty() {
                        return Ok(mark.execute(&self.pool).await?.rows_affected());
                    }
                    let mut transaction = self.pool.begin().await?;
                    for setting in $mark_settings {
                        sqlx::query(*setting).execute(&mut *transaction).await?;
                    }
                    let result = mark.execute(&mut *transaction).await?;
                    transaction.commit().await?;
                    Ok(result.rows_affected())
                })
            }

            fn record_failures<'a>(
                &'a self,
                relay_id: &'a str,
                partition_count: i32,
                leases: &'a [Lease],
                failures: &'a [FailedAttempt],
            ) -> BoxFuture<'a, Result<u64, Error>> {
                Box::pin(async move {
                    let leases = leases_json(leases);
                    let mut updated = 0;
                    let mut tx = self.pool.begin().await?;
                    for failure in failures {
                        let result = sqlx::query(include_str!(concat!(
                            "sql/",
                            $backend,
                            "/record_failure.sql"
                        )))
                        .bind(relay_id)
                        .bind(partition_count)
                        .bind(&leases)
                        .bind(failure.id)
                        .bind(&failure.error)
                        .bind(failure.retry_in.map(seconds))
                        .execute(&mut *tx)
                        .await?;
                        updated += result.rows_affected();
                    }
                    tx.commit().await?;
                    Ok(updated)
                })
            }

            fn delete_published(
                &self,
                older_than: Duration,
                limit: i64,
            ) -> BoxFuture<'_, Result<u64, Error>> {
                Box::pin(async move {
                    let result = sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/delete_published.sql"
                    )))
                    .bind(seconds(older_than))
                    .bind(limit)
                    .execute(&self.pool)
                    .await?;
                    Ok(result.rows_affected())
                })
            }

            fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>> {
                Box::pin(async move {
                    let row = sqlx::query(include_str!(concat!("sql/", $backend, "/backlog.sql")))
                        .fetch_one(&self.pool)
                        .await?;
                    Ok(OutboxBacklog {
                        pending: row.try_get("pending")?,
                        dead: row.try_get("dead")?,
                        oldest_pending_at: row
                            .try_get::<Option<DateTime<Utc>>, _>("oldest_pending_at")?,
                    })
                })
            }

            fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>> {
                Box::pin(async move {
                    let row = sqlx::query(include_str!(concat!("sql/", $backend, "/status.sql")))
                        .fetch_one(&self.pool)
                        .await?;
                    let topic_rows = sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/status_topics.sql"
                    )))
                    .fetch_all(&self.pool)
                    .await?;
                    let lease_rows = sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/status_leases.sql"
                    )))
                    .fetch_all(&self.pool)
                    .await?;
                    let topics = topic_rows
                        .iter()
                        .map(|row| {
                            Ok::<_, sqlx::Error>(TopicStatus {
                                topic: row.try_get("topic")?,
                                pending: row.try_get("pending")?,
                                retrying: row.try_get("retrying")?,
                                dead: row.try_get("dead")?,
                                published: row.try_get("published")?,
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    let leases = lease_rows
                        .iter()
                        .map(|row| {
                            Ok::<_, sqlx::Error>(LiveLease {
                                partition_no: row.try_get("partition_no")?,
                                owner: row.try_get("lease_owner")?,
                                lease_token: row.try_get("lease_token")?,
                                expires_at: row.try_get("lease_expires_at")?,
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    Ok(OutboxStatus {
                        pending: row.try_get("pending")?,
                        retrying: row.try_get("retrying")?,
                        in_flight: row.try_get("in_flight")?,
                        dead: row.try_get("dead")?,
                        published: row.try_get("published")?,
                        oldest_pending_at: row
                            .try_get::<Option<DateTime<Utc>>, _>("oldest_pending_at")?,
                        oldest_pending_age_seconds: row.try_get("oldest_pending_age_seconds")?,
                        leased_partitions: row.try_get("leased_partitions")?,
                        partitions: row.try_get("partitions")?,
                        live_relays: row.try_get("live_relays")?,
                        topics,
                        leases,
                    })
                })
            }

            fn database_time(&self) -> BoxFuture<'_, Result<DateTime<Utc>, Error>> {
                Box::pin(async move {
                    Ok(sqlx::query_scalar(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/database_time.sql"
                    )))
                    .fetch_one(&self.pool)
                    .await?)
                })
            }

            fn topic_exists<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
                Box::pin(async move {
                    let found: i64 = sqlx::query_scalar(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/topic_exists.sql"
                    )))
                    .bind(topic)
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(found > 0)
                })
            }

            fn fetch_published<'a>(
                &'a self,
                window: &'a ReplayWindow,
                after_id: i64,
                limit: i64,
            ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>> {
                Box::pin(async move {
                    let rows = sqlx::query(include_str!(concat!(
                        "sql/",
                        $backend,
                        "/fetch_published.sql"
                    )))
                    .bind(window.topic.as_str())
                    .bind($bind_time(window.since))
                    .bind($bind_time(window.until))
                    .bind(after_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .iter()
                        .map(Self::outbound_from_row)
                        .collect::<Result<_, _>>()?)
                })
            }

            fn list_dead<'a>(
                &'a self,
                selector: &'a DeadSelector,
                limit: i64,
            ) -> BoxFuture<'a, Result<Vec<DeadEvent>, Error>> {
                Box::pin(async move {
                    let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
                    let rows =
                        sqlx::query(include_str!(concat!("sql/", $backend, "/list_dead.sql")))
                            .bind(event_id)
                            .bind(aggregate_type)
                            .bind(aggregate_id)
                            .bind(limit)
                            .fetch_all(&self.pool)
                            .await?;
                    Ok(rows
                        .iter()
                        .map(Self::dead_from_row)
                        .collect::<Result<_, _>>()?)
                })
            }

            fn retry_dead<'a>(
                &'a self,
                selector: &'a DeadSelector,
            ) -> BoxFuture<'a, Result<u64, Error>> {
                Box::pin(async move {
                    let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
                    let result =
                        sqlx::query(include_str!(concat!("sql/", $backend, "/retry_dead.sql")))
                            .bind(event_id)
                            .bind(aggregate_type)
                            .bind(aggregate_id)
                            .execute(&self.pool)
                            .await?;
                    Ok(result.rows_affected())
                })
            }

            fn discard_dead<'a>(
                &'a self,
                selector: &'a DeadSelector,
            ) -> BoxFuture<'a, Result<u64, Error>> {
                Box::pin(async move {
                    let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
                    let result =
                        sqlx::query(include_str!(concat!("sql/", $backend, "/discard_dead.sql")))
                            .bind(event_id)
                            .bind(aggregate_type)
                            .bind(aggregate_id)
                            .execute(&self.pool)
                            .await?;
                    Ok(result.rows_affected())
                })
            }
        }
    };
}

returning_store!(
    PostgresStore,
    PgPool,
    PgRow,
    "postgres",
    "The relay's store on PostgreSQL.",
    integer_array,
    timestamptz,
    POSTGRES_MARK_SETTINGS
);
returning_store!(
    SqliteStore,
    SqlitePool,
    SqliteRow,
    "sqlite",
    "The relay's store on SQLite.",
    integers_json,
    sqlite_time_text,
    SQLITE_MARK_SETTINGS
);
