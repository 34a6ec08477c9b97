//! PostgreSQL's migration lock: a session-level advisory lock.

use sqlx::migrate::Migrator;
use sqlx::{Pool, Postgres};

use super::POSTGRES_MIGRATION_LOCK_KEY;
use super::session::{finish, session_for_lock};
use crate::Error;
use crate::migrate::apply_missing;

/// Takes the PostgreSQL lock; binds [`POSTGRES_MIGRATION_LOCK_KEY`].
const POSTGRES_LOCK: &str = include_str!("../backend/sql/postgres/migration_lock.sql");
/// Releases the PostgreSQL lock; binds [`POSTGRES_MIGRATION_LOCK_KEY`].
const POSTGRES_UNLOCK: &str = include_str!("../backend/sql/postgres/migration_unlock.sql");
/// Keeps the migration session's notices out of the log.
const POSTGRES_QUIET_NOTICES: &str = include_str!("../backend/sql/postgres/quiet_notices.sql");
/// SQLSTATE of PostgreSQL's `lock_not_available`, raised by `lock_timeout`.
const POSTGRES_LOCK_TIMEOUT: &str = "55P03";

/// Apply the missing migrations of `migrator` on PostgreSQL, holding the
/// advisory lock.
pub(crate) async fn migrate_postgres(
    pool: &Pool<Postgres>,
    migrator: Migrator,
) -> Result<(), Error> {
    let lock = format!("PostgreSQL advisory lock {POSTGRES_MIGRATION_LOCK_KEY}");
    let mut connection = session_for_lock(pool).await?;
    sqlx::query(POSTGRES_QUIET_NOTICES)
        .execute(&mut *connection)
        .await?;
    tracing::debug!(lock = %lock, "taking the outbox migration lock");
    let taken = sqlx::query(POSTGRES_LOCK)
        .bind(POSTGRES_MIGRATION_LOCK_KEY)
        .execute(&mut *connection)
        .await;
    if let Err(error) = taken {
        let timed_out = error
            .as_database_error()
            .and_then(|database| database.code())
            .is_some_and(|code| code == POSTGRES_LOCK_TIMEOUT);
        return Err(if timed_out {
            Error::MigrationLock {
                lock,
                reason: "another session held it for longer than this session's lock_timeout"
                    .to_owned(),
            }
        } else {
            Error::Database(error)
        });
    }
    let migrated = apply_missing(&mut *connection, &migrator).await;
    let released = sqlx::query(POSTGRES_UNLOCK)
        .bind(POSTGRES_MIGRATION_LOCK_KEY)
        .execute(&mut *connection)
        .await
        .map(drop);
    finish(connection, &lock, migrated, released).await
}
