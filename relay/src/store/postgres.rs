//! [`PostgresStore`]: the relay's statements on PostgreSQL, with `NOTIFY`
//! waking the batch loop when events are committed.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sqlx::postgres::{PgConnectOptions, PgListener, PgQueryResult};
use sqlx::{PgPool, Postgres};
use tokio_util::sync::CancellationToken;

use super::sql_store::{
    Bound, Dialect, NumberedSql, RowsAffected, SqlStore, Statements,
};
use crate::error::Error;
use crate::event::{NOTIFY_CHANNEL, Wakeup};
use crate::tasks::Tasks;

/// Statements run before a fetch, in its transaction: the planner must not
/// sort the pending rows. The fetch wants the first rows in id order, which
/// the pending index gives at once; without fresh statistics (a backlog
/// written in a burst, before autovacuum analyzes it) the planner would
/// otherwise read every pending row and sort them, a hundred times slower.
const FETCH_SETTINGS: &[&str] = &["SET LOCAL enable_sort = off"];

/// Producers' triggers need not notify this relay for a while: see
/// `migrations/postgres/0002_notify_only_when_a_relay_waits.sql`.
const QUIET_NOTIFICATIONS: &str = include_str!("sql/postgres/quiet_notifications.sql");

/// The fetch, as [`ExplainFetch`] explains it.
#[cfg(feature = "test-util")]
const FETCH_PENDING: &str = include_str!("sql/postgres/fetch_pending.sql");

/// Statements run before a mark, in its transaction: its commit does not
/// wait for the WAL flush. A mark lost to a database crash leaves its
/// events pending, so they are published again: at least once still holds,
/// and the commit no longer waits on the disk. Every other statement
/// (leases, failures, dead events, retention) commits durably, and its
/// flush covers the marks committed before it.
const MARK_SETTINGS: &[&str] = &["SET LOCAL synchronous_commit = off"];

/// The relay's store on PostgreSQL.
pub type PostgresStore = SqlStore<PostgresDialect>;

/// What sets PostgreSQL apart: arrays and `timestamptz` binds, settings for
/// the fetch and the mark, `NOTIFY` on commits.
#[derive(Debug, Clone, Copy)]
pub struct PostgresDialect;

/// The statements of `store/sql/postgres/`.
const STATEMENTS: Statements = numbered_statements!("postgres");

impl Dialect for PostgresDialect {
    type Database = Postgres;

    const STATEMENTS: &'static Statements = &STATEMENTS;
    const FETCH_SETTINGS: &'static [&'static str] = FETCH_SETTINGS;
    const MARK_SETTINGS: &'static [&'static str] = MARK_SETTINGS;

    fn connect_options(url: &str) -> Result<PgConnectOptions, sqlx::Error> {
        PgConnectOptions::from_str(url)
    }

    /// Integer lists bind as arrays.
    fn partition_list(partitions: &[i32]) -> Bound<Postgres> {
        Box::new(partitions.to_vec())
    }

    /// Integer lists bind as arrays.
    fn id_list(ids: &[i64]) -> Bound<Postgres> {
        Box::new(ids.to_vec())
    }

    /// Times bind as `timestamptz`.
    fn time(time: DateTime<Utc>) -> Bound<Postgres> {
        Box::new(time)
    }

    fn watch_commits(pool: &PgPool, wakeup: Wakeup, tasks: &Tasks) {
        listen_for_commits(pool, wakeup, tasks);
    }

    fn quiet_notifications<'a>(
        pool: &'a PgPool,
        relay_id: &'a str,
        window: Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(async move {
            sqlx::query(QUIET_NOTIFICATIONS)
                .bind(relay_id)
                .bind(window.as_secs_f64())
                .execute(pool)
                .await?;
            Ok(true)
        })
    }
}

/// The fetch's plan, for the test that keeps it free of a sort over the
/// pending rows.
#[cfg(feature = "test-util")]
mod explain {
    use futures::future::BoxFuture;
    use sqlx::postgres::PgArguments;
    use sqlx::PgPool;

    use super::{FETCH_PENDING, FETCH_SETTINGS, PostgresDialect};
    use crate::error::Error;
    use crate::store::sql_store::ExplainFetch;

    /// As `EXPLAIN (FORMAT JSON)` gives it.
    impl ExplainFetch for PostgresDialect {
        fn explain_fetch(
            pool: &PgPool,
            arguments: PgArguments,
        ) -> BoxFuture<'_, Result<serde_json::Value, Error>> {
            Box::pin(async move {
                let mut transaction = outbox::begin_transaction(pool).await?;
                for setting in FETCH_SETTINGS {
                    sqlx::query(*setting).execute(&mut *transaction).await?;
                }
                let explain = format!("EXPLAIN (FORMAT JSON) {FETCH_PENDING}");
                let plan: serde_json::Value =
                    sqlx::query_scalar_with(sqlx::AssertSqlSafe(explain), arguments)
                        .persistent(false)
                        .fetch_one(&mut *transaction)
                        .await?;
                transaction.rollback().await?;
                Ok(plan)
            })
        }
    }
}

impl RowsAffected for PgQueryResult {
    fn rows_affected(&self) -> u64 {
        PgQueryResult::rows_affected(self)
    }
}

/// A trigger on `outbox_events` sends `NOTIFY outbox_events` once per
/// inserting statement: listen on it until `stop`, reconnecting after
/// errors, and wake the batch loop on each notification.
fn listen_for_commits(pool: &PgPool, wakeup: Wakeup, tasks: &Tasks) {
    let pool = pool.clone();
    let stop = tasks.stop_token();
    tasks.spawn(async move {
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
