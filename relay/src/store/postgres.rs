//! [`PostgresStore`]: the relay's statements on PostgreSQL, with `NOTIFY`
//! waking the batch loop when events are committed.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions, PgRow};
use tokio_util::sync::CancellationToken;

use super::returning::returning_statements;
use super::rows::direct_store_row;
use super::{ACQUIRE_TIMEOUT, POOL_SIZE};
use crate::Error;
use crate::wakeup::{NOTIFY_CHANNEL, Wakeup};

/// Statements run before a fetch, in its transaction: the planner must not
/// sort the pending rows. The fetch wants the first rows in id order, which
/// the pending index gives at once; without fresh statistics (a backlog
/// written in a burst, before autovacuum analyzes it) the planner would
/// otherwise read every pending row and sort them, a hundred times slower.
const FETCH_SETTINGS: &[&str] = &["SET LOCAL enable_sort = off"];

/// The fetch, as [`PostgresStore::fetch_pending_plan`] explains it.
const FETCH_PENDING: &str = include_str!("sql/postgres/fetch_pending.sql");

/// Statements run before a mark, in its transaction: its commit does not
/// wait for the WAL flush. A mark lost to a database crash leaves its
/// events pending, so they are published again: at least once still holds,
/// and the commit no longer waits on the disk. Every other statement
/// (leases, failures, dead events, retention) commits durably, and its
/// flush covers the marks committed before it.
const MARK_SETTINGS: &[&str] = &["SET LOCAL synchronous_commit = off"];

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

    /// Connect to the `postgres://` URL `url`.
    ///
    /// # Errors
    /// [`Error::InvalidDatabaseUrl`] for options sqlx rejects;
    /// [`Error::Database`] when the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let options =
            PgConnectOptions::from_str(url).map_err(|error| super::invalid_url(url, error))?;
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        Ok(PostgresStore::new(pool))
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The plan PostgreSQL chooses for the batch loop's fetch, with the
    /// fetch's own settings, as `EXPLAIN (FORMAT JSON)` gives it: for
    /// operators looking into slow fetches, and for the test that keeps the
    /// plan free of a sort over the pending rows.
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
        let mut transaction = self.pool.begin().await?;
        for setting in FETCH_SETTINGS {
            sqlx::query(*setting).execute(&mut *transaction).await?;
        }
        let explain = format!("EXPLAIN (FORMAT JSON) {FETCH_PENDING}");
        let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
            .persistent(false)
            .bind(partition_count)
            .bind(partitions.to_vec())
            .bind(hold_dead)
            .bind(limit)
            .bind(Vec::<i64>::new())
            .fetch_one(&mut *transaction)
            .await?;
        transaction.rollback().await?;
        Ok(plan)
    }
}

direct_store_row!(PgRow);

/// Integer lists bind as arrays.
fn integer_array<T: Copy>(values: &[T]) -> Vec<T> {
    values.to_vec()
}

/// Times bind as `timestamptz`.
fn timestamptz(time: DateTime<Utc>) -> DateTime<Utc> {
    time
}

/// A trigger on `outbox_events` sends `NOTIFY outbox_events` once per
/// inserting statement: listen on it until `stop`, reconnecting after
/// errors, and wake the batch loop on each notification.
fn listen_for_commits(pool: &PgPool, wakeup: Wakeup, stop: CancellationToken) {
    let pool = pool.clone();
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            let mut listener = match PgListener::connect_with(&pool).await {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::warn!(%error, "cannot open the LISTEN connection; polling meanwhile");
                    pause(&stop).await;
                    continue;
                }
            };
            if let Err(error) = listener.listen(NOTIFY_CHANNEL).await {
                tracing::warn!(%error, "LISTEN failed; polling meanwhile");
                pause(&stop).await;
                continue;
            }
            tracing::debug!(channel = NOTIFY_CHANNEL, "listening for new outbox events");
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    received = listener.recv() => match received {
                        Ok(_) => wakeup.wake(),
                        Err(error) => {
                            tracing::warn!(%error, "LISTEN connection lost; reconnecting");
                            break;
                        }
                    },
                }
            }
            // Events may have been committed while the connection was down.
            wakeup.wake();
        }
    });
}

async fn pause(stop: &CancellationToken) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
}

returning_statements!(
    PostgresStore,
    "postgres",
    integer_array,
    timestamptz,
    FETCH_SETTINGS,
    MARK_SETTINGS,
    listen_for_commits
);
