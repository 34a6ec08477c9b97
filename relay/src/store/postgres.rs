//! [`PostgresStore`]: the relay's statements on PostgreSQL.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use super::{
    ClaimedEvent, DeadEvent, DeadSelector, FailedAttempt, Lease, OutboxStatus, OutboxStore,
    leases_json, parse_headers, seconds,
};
use crate::{Error, OutboundEvent};

const PARTITION_COUNT: &str = include_str!("sql/postgres/partition_count.sql");
const HEARTBEAT_UPSERT: &str = include_str!("sql/postgres/heartbeat_upsert.sql");
const HEARTBEAT_FORGET_DEAD: &str = include_str!("sql/postgres/heartbeat_forget_dead.sql");
const LIVE_RELAYS: &str = include_str!("sql/postgres/live_relays.sql");
const DEREGISTER: &str = include_str!("sql/postgres/deregister.sql");
const RENEW_LEASES: &str = include_str!("sql/postgres/renew_leases.sql");
const ACQUIRE_LEASES: &str = include_str!("sql/postgres/acquire_leases.sql");
const RELEASE_LEASES: &str = include_str!("sql/postgres/release_leases.sql");
const FETCH_PENDING: &str = include_str!("sql/postgres/fetch_pending.sql");
const MARK_PUBLISHED: &str = include_str!("sql/postgres/mark_published.sql");
const RECORD_FAILURE: &str = include_str!("sql/postgres/record_failure.sql");
const DELETE_PUBLISHED: &str = include_str!("sql/postgres/delete_published.sql");
const STATUS: &str = include_str!("sql/postgres/status.sql");
const LIST_DEAD: &str = include_str!("sql/postgres/list_dead.sql");
const RETRY_DEAD: &str = include_str!("sql/postgres/retry_dead.sql");
const DISCARD_DEAD: &str = include_str!("sql/postgres/discard_dead.sql");

/// The relay's store on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// A store over `pool`.
    pub fn new(pool: PgPool) -> Self {
        PostgresStore { pool }
    }

    /// The pool, e.g. for a `LISTEN` connection.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

fn lease_from_row(row: &PgRow) -> Result<Lease, sqlx::Error> {
    Ok(Lease {
        partition_no: row.try_get("partition_no")?,
        lease_token: row.try_get("lease_token")?,
    })
}

fn claimed_from_row(row: &PgRow) -> Result<ClaimedEvent, sqlx::Error> {
    let event_id: uuid::Uuid = row.try_get("event_id")?;
    let headers: String = row.try_get("headers")?;
    Ok(ClaimedEvent {
        partition_no: row.try_get("partition_no")?,
        event: OutboundEvent {
            id: row.try_get("id")?,
            event_id,
            event_type: row.try_get("event_type")?,
            event_version: row.try_get("event_version")?,
            source: row.try_get("source")?,
            aggregate_type: row.try_get("aggregate_type")?,
            aggregate_id: row.try_get("aggregate_id")?,
            topic: row.try_get("topic")?,
            payload: row.try_get("payload")?,
            headers: parse_headers(&event_id.to_string(), &headers),
            created_at: row.try_get("created_at")?,
            attempts: row.try_get("attempts")?,
        },
    })
}

fn dead_from_row(row: &PgRow) -> Result<DeadEvent, sqlx::Error> {
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

/// The three optional filters of the dead-event statements.
fn selector_binds(selector: &DeadSelector) -> (Option<&str>, Option<&str>, Option<&str>) {
    match selector {
        DeadSelector::EventId(event_id) => (Some(event_id.as_str()), None, None),
        DeadSelector::Aggregate {
            aggregate_type,
            aggregate_id,
        } => (
            None,
            Some(aggregate_type.as_str()),
            Some(aggregate_id.as_str()),
        ),
        DeadSelector::All => (None, None, None),
    }
}

impl OutboxStore for PostgresStore {
    fn migrate(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { Ok(outbox::migrate(&self.pool).await?) })
    }

    fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>> {
        Box::pin(async move {
            Ok(sqlx::query_scalar(PARTITION_COUNT)
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
            sqlx::query(HEARTBEAT_UPSERT)
                .bind(relay_id)
                .bind(seconds(ttl))
                .execute(&self.pool)
                .await?;
            sqlx::query(HEARTBEAT_FORGET_DEAD)
                .execute(&self.pool)
                .await?;
            Ok(sqlx::query_scalar(LIVE_RELAYS)
                .fetch_one(&self.pool)
                .await?)
        })
    }

    fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            sqlx::query(DEREGISTER)
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
            let rows = sqlx::query(RENEW_LEASES)
                .bind(relay_id)
                .bind(seconds(ttl))
                .bind(leases_json(leases))
                .fetch_all(&self.pool)
                .await?;
            Ok(rows.iter().map(lease_from_row).collect::<Result<_, _>>()?)
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
            let rows = sqlx::query(ACQUIRE_LEASES)
                .bind(relay_id)
                .bind(seconds(ttl))
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
            Ok(rows.iter().map(lease_from_row).collect::<Result<_, _>>()?)
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
            let result = sqlx::query(RELEASE_LEASES)
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
            let rows = sqlx::query(FETCH_PENDING)
                .bind(partition_count)
                .bind(partitions)
                .bind(hold_dead)
                .bind(limit)
                .bind(exclude)
                .fetch_all(&self.pool)
                .await?;
            Ok(rows
                .iter()
                .map(claimed_from_row)
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
            let result = sqlx::query(MARK_PUBLISHED)
                .bind(relay_id)
                .bind(partition_count)
                .bind(leases_json(leases))
                .bind(ids)
                .execute(&self.pool)
                .await?;
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
                let result = sqlx::query(RECORD_FAILURE)
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
            let result = sqlx::query(DELETE_PUBLISHED)
                .bind(seconds(older_than))
                .bind(limit)
                .execute(&self.pool)
                .await?;
            Ok(result.rows_affected())
        })
    }

    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>> {
        Box::pin(async move {
            let row = sqlx::query(STATUS).fetch_one(&self.pool).await?;
            Ok(OutboxStatus {
                pending: row.try_get("pending")?,
                retrying: row.try_get("retrying")?,
                dead: row.try_get("dead")?,
                published: row.try_get("published")?,
                oldest_pending_at: row.try_get::<Option<DateTime<Utc>>, _>("oldest_pending_at")?,
                leased_partitions: row.try_get("leased_partitions")?,
                partitions: row.try_get("partitions")?,
                live_relays: row.try_get("live_relays")?,
            })
        })
    }

    fn list_dead<'a>(
        &'a self,
        selector: &'a DeadSelector,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<DeadEvent>, Error>> {
        Box::pin(async move {
            let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
            let rows = sqlx::query(LIST_DEAD)
                .bind(event_id)
                .bind(aggregate_type)
                .bind(aggregate_id)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
            Ok(rows.iter().map(dead_from_row).collect::<Result<_, _>>()?)
        })
    }

    fn retry_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
            let result = sqlx::query(RETRY_DEAD)
                .bind(event_id)
                .bind(aggregate_type)
                .bind(aggregate_id)
                .execute(&self.pool)
                .await?;
            Ok(result.rows_affected())
        })
    }

    fn discard_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
            let result = sqlx::query(DISCARD_DEAD)
                .bind(event_id)
                .bind(aggregate_type)
                .bind(aggregate_id)
                .execute(&self.pool)
                .await?;
            Ok(result.rows_affected())
        })
    }
}
