//! [`MySqlStore`]: the relay's statements on MySQL and MariaDB.
//!
//! MariaDB has no `UPDATE ... RETURNING`, so the lease statements that need
//! their result run as a transaction of an update and a select.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use futures::future::BoxFuture;
use std::str::FromStr;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions, MySqlRow};
use sqlx::{MySqlPool, Row};

use super::rows::{
    StoreRow, backlog_from_row, claimed_from_row, dead_from_row, integers_json, lease_from_row,
    leases_json, map_rows, outbound_from_row, selector_binds, status_from_rows,
};
use super::{ACQUIRE_TIMEOUT, POOL_SIZE};
use super::{
    ClaimedEvent, DeadEvent, DeadSelector, EventSource, FailedAttempt, Lease, LeaseStore,
    OperatorStore, OutboxBacklog, OutboxStatus, ReplayWindow,
};
use crate::{Error, OutboundEvent};

const PARTITION_COUNT: &str = include_str!("sql/mysql/partition_count.sql");
const HEARTBEAT_UPSERT: &str = include_str!("sql/mysql/heartbeat_upsert.sql");
const HEARTBEAT_FORGET_DEAD: &str = include_str!("sql/mysql/heartbeat_forget_dead.sql");
const LIVE_RELAYS: &str = include_str!("sql/mysql/live_relays.sql");
const DEREGISTER: &str = include_str!("sql/mysql/deregister.sql");
const RENEW_LEASES: &str = include_str!("sql/mysql/renew_leases.sql");
const SELECT_LEASES_HELD: &str = include_str!("sql/mysql/select_leases_held.sql");
const LOCK_FREE_PARTITIONS: &str = include_str!("sql/mysql/lock_free_partitions.sql");
const TAKE_PARTITIONS: &str = include_str!("sql/mysql/take_partitions.sql");
const RELEASE_LEASES: &str = include_str!("sql/mysql/release_leases.sql");
const FETCH_PENDING: &str = include_str!("sql/mysql/fetch_pending.sql");
const MARK_PUBLISHED: &str = include_str!("sql/mysql/mark_published.sql");
const RECORD_FAILURE: &str = include_str!("sql/mysql/record_failure.sql");
const DELETE_PUBLISHED: &str = include_str!("sql/mysql/delete_published.sql");
const BACKLOG: &str = include_str!("sql/mysql/backlog.sql");
const STATUS: &str = include_str!("sql/mysql/status.sql");
const STATUS_TOPICS: &str = include_str!("sql/mysql/status_topics.sql");
const STATUS_LEASES: &str = include_str!("sql/mysql/status_leases.sql");
const DATABASE_TIME: &str = include_str!("sql/mysql/database_time.sql");
const TOPIC_EXISTS: &str = include_str!("sql/mysql/topic_exists.sql");
const FETCH_PUBLISHED: &str = include_str!("sql/mysql/fetch_published.sql");
const LIST_DEAD: &str = include_str!("sql/mysql/list_dead.sql");
const RETRY_DEAD: &str = include_str!("sql/mysql/retry_dead.sql");
const DISCARD_DEAD: &str = include_str!("sql/mysql/discard_dead.sql");

/// The relay's store on MySQL / MariaDB.
#[derive(Debug, Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
}

impl MySqlStore {
    /// A store over `pool`.
    pub fn new(pool: MySqlPool) -> Self {
        MySqlStore { pool }
    }

    /// Connect to the `mysql://` URL `url` (MariaDB too).
    ///
    /// # Errors
    /// [`Error::InvalidDatabaseUrl`] for options sqlx rejects;
    /// [`Error::Database`] when the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options =
            MySqlConnectOptions::from_str(url).map_err(|error| super::invalid_url(url, error))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        Ok(MySqlStore::new(pool))
    }

    /// The pool.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The plan MariaDB / MySQL chooses for the batch loop's fetch, as
    /// `EXPLAIN FORMAT=JSON` gives it: for operators looking into slow
    /// fetches, and for the test that keeps the plan free of a sort over
    /// the pending rows.
    ///
    /// # Errors
    /// [`Error::Database`] when the statement fails.
    pub async fn fetch_pending_plan(
        &self,
        partition_count: i32,
        partitions: &[i32],
        hold_dead: bool,
        limit: i64,
    ) -> Result<serde_json::Value, Error> {
        let explain = format!("EXPLAIN FORMAT=JSON {FETCH_PENDING}");
        let plan: String = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
            .bind(partition_count)
            .bind(partition_count)
            .bind(integers_json(partitions))
            .bind(integers_json::<i64>(&[]))
            .bind(hold_dead)
            .bind(limit)
            .fetch_one(&self.pool)
            .await?;
        serde_json::from_str(&plan)
            .map_err(|error| Error::Database(sqlx::Error::Decode(Box::new(error))))
    }
}

/// Durations travel as whole microseconds (`INTERVAL ? MICROSECOND`).
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl StoreRow for MySqlRow {
    fn text(&self, column: &str) -> Result<String, sqlx::Error> {
        self.try_get(column)
    }
    fn optional_text(&self, column: &str) -> Result<Option<String>, sqlx::Error> {
        self.try_get(column)
    }
    fn int(&self, column: &str) -> Result<i32, sqlx::Error> {
        self.try_get(column)
    }
    fn bigint(&self, column: &str) -> Result<i64, sqlx::Error> {
        self.try_get(column)
    }
    fn optional_bigint(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(column)
    }
    /// MariaDB's `DATETIME` has no zone; the schema keeps it in UTC.
    fn time(&self, column: &str) -> Result<DateTime<Utc>, sqlx::Error> {
        Ok(self.try_get::<NaiveDateTime, _>(column)?.and_utc())
    }
    fn optional_time(&self, column: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        Ok(self
            .try_get::<Option<NaiveDateTime>, _>(column)?
            .map(|time| time.and_utc()))
    }
    /// MariaDB types `partition_key % ?` as `BIGINT`.
    fn partition_no(&self, column: &str) -> Result<i32, sqlx::Error> {
        let partition_no: i64 = self.try_get(column)?;
        i32::try_from(partition_no).map_err(|error| sqlx::Error::ColumnDecode {
            index: column.to_owned(),
            source: Box::new(error),
        })
    }
}

impl LeaseStore for MySqlStore {
    fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>> {
        Box::pin(async move {
            let count: i64 = sqlx::query_scalar(PARTITION_COUNT)
                .fetch_one(&self.pool)
                .await?;
            Ok(i32::try_from(count).unwrap_or(i32::MAX))
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
                .bind(micros(ttl))
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
            let partitions: Vec<i32> = leases.iter().map(|lease| lease.partition_no).collect();
            let mut tx = self.pool.begin().await?;
            sqlx::query(RENEW_LEASES)
                .bind(leases_json(leases))
                .bind(micros(ttl))
                .bind(relay_id)
                .execute(&mut *tx)
                .await?;
            let rows = sqlx::query(SELECT_LEASES_HELD)
                .bind(integers_json(&partitions))
                .bind(relay_id)
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            let held: Vec<Lease> = map_rows(&rows, lease_from_row)?;
            // A partition lost and retaken by this relay has a new token: it
            // is not the lease asked about.
            Ok(held
                .into_iter()
                .filter(|lease| leases.contains(lease))
                .collect())
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
            let mut tx = self.pool.begin().await?;
            let locked: Vec<i32> = sqlx::query_scalar(LOCK_FREE_PARTITIONS)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            if locked.is_empty() {
                tx.commit().await?;
                return Ok(Vec::new());
            }
            let locked_json = integers_json(&locked);
            sqlx::query(TAKE_PARTITIONS)
                .bind(&locked_json)
                .bind(relay_id)
                .bind(micros(ttl))
                .execute(&mut *tx)
                .await?;
            let rows = sqlx::query(SELECT_LEASES_HELD)
                .bind(&locked_json)
                .bind(relay_id)
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(map_rows(&rows, lease_from_row)?)
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
                .bind(leases_json(leases))
                .bind(relay_id)
                .execute(&self.pool)
                .await?;
            Ok(result.rows_affected())
        })
    }
}

impl EventSource for MySqlStore {
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
                .bind(partition_count)
                .bind(integers_json(partitions))
                .bind(integers_json(exclude))
                .bind(hold_dead)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
            Ok(map_rows(&rows, claimed_from_row)?)
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
                .bind(partition_count)
                .bind(leases_json(leases))
                .bind(integers_json(ids))
                .bind(relay_id)
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
                    .bind(partition_count)
                    .bind(&leases)
                    .bind(&failure.error)
                    .bind(failure.retry_in.is_none())
                    .bind(failure.retry_in.map_or(0, micros))
                    .bind(failure.id)
                    .bind(relay_id)
                    .execute(&mut *tx)
                    .await?;
                updated += result.rows_affected();
            }
            tx.commit().await?;
            Ok(updated)
        })
    }
}

impl OperatorStore for MySqlStore {
    fn migrate(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { Ok(outbox::migrate(&self.pool).await?) })
    }

    fn delete_published(
        &self,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            let result = sqlx::query(DELETE_PUBLISHED)
                .bind(micros(older_than))
                .bind(limit)
                .execute(&self.pool)
                .await?;
            Ok(result.rows_affected())
        })
    }

    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>> {
        Box::pin(async move {
            let row = sqlx::query(BACKLOG).fetch_one(&self.pool).await?;
            Ok(backlog_from_row(&row)?)
        })
    }

    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>> {
        Box::pin(async move {
            let row = sqlx::query(STATUS).fetch_one(&self.pool).await?;
            let topics = sqlx::query(STATUS_TOPICS).fetch_all(&self.pool).await?;
            let leases = sqlx::query(STATUS_LEASES).fetch_all(&self.pool).await?;
            Ok(status_from_rows(&row, &topics, &leases)?)
        })
    }

    fn database_time(&self) -> BoxFuture<'_, Result<DateTime<Utc>, Error>> {
        Box::pin(async move {
            let now: NaiveDateTime = sqlx::query_scalar(DATABASE_TIME)
                .fetch_one(&self.pool)
                .await?;
            Ok(now.and_utc())
        })
    }

    fn topic_exists<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(async move {
            let found: i64 = sqlx::query_scalar(TOPIC_EXISTS)
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
            let rows = sqlx::query(FETCH_PUBLISHED)
                .bind(window.topic.as_str())
                .bind(window.since.naive_utc())
                .bind(window.until.naive_utc())
                .bind(after_id)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
            Ok(map_rows(&rows, outbound_from_row)?)
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
                .bind(event_id)
                .bind(aggregate_type)
                .bind(aggregate_type)
                .bind(aggregate_id)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
            Ok(map_rows(&rows, dead_from_row)?)
        })
    }

    fn retry_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
            let result = sqlx::query(RETRY_DEAD)
                .bind(event_id)
                .bind(event_id)
                .bind(aggregate_type)
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
                .bind(event_id)
                .bind(aggregate_type)
                .bind(aggregate_type)
                .bind(aggregate_id)
                .execute(&self.pool)
                .await?;
            Ok(result.rows_affected())
        })
    }
}
