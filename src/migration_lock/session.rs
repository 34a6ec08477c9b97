//! The session a lock is taken on (PostgreSQL and MariaDB / MySQL), and
//! how it ends.

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};

use crate::Error;

/// A connection of `pool` for a session lock. It is closed rather than
/// returned to the pool, even when the migration is dropped half-way, so
/// no pooled connection ever keeps the lock.
pub(super) async fn session_for_lock<DB: Database>(
    pool: &Pool<DB>,
) -> Result<PoolConnection<DB>, Error> {
    let mut connection = pool.acquire().await?;
    connection.close_on_drop();
    Ok(connection)
}

/// The migration's outcome, once the session lock is released and the
/// session closed. A failed release only costs a warning: closing the
/// session releases its lock as well.
pub(super) async fn finish<DB: Database>(
    connection: PoolConnection<DB>,
    lock: &str,
    migrated: Result<(), sqlx::migrate::MigrateError>,
    released: Result<(), sqlx::Error>,
) -> Result<(), Error> {
    match released {
        Ok(()) => tracing::debug!(lock, "released the outbox migration lock"),
        Err(error) => tracing::warn!(
            lock,
            %error,
            "could not release the outbox migration lock; closing its session releases it"
        ),
    }
    if let Err(error) = connection.close().await {
        tracing::warn!(lock, %error, "closing the migration session failed");
    }
    migrated.map_err(Error::from)
}
