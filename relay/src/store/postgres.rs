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
    MARK_SETTINGS,
    listen_for_commits
);
