//! The lock that keeps concurrent migrators apart, one kind per backend.
//!
//! Several replicas of a service may call [`migrate`](crate::migrate) on
//! boot at the same moment. Each run takes a database lock on the
//! connection it migrates with, reads the applied migrations only once it
//! holds the lock, applies the missing ones and releases it, so the runs
//! follow one another and the later ones find nothing left to do:
//!
//! - PostgreSQL: the session-level advisory lock [`POSTGRES_MIGRATION_LOCK_KEY`],
//!   waiting as long as the session's `lock_timeout` allows;
//! - MariaDB / MySQL: the named lock `<database>._outbox_migrations`
//!   (`GET_LOCK`), waiting at most the session's `lock_wait_timeout`;
//! - SQLite: the database's write lock, taken up front by `BEGIN IMMEDIATE`
//!   and held by one transaction around every migration, waiting as long as
//!   the connection's busy timeout allows.
//!
//! These locks stand in for sqlx's own migration lock, which on MariaDB is
//! never taken (`GET_LOCK(name, -1)` returns `NULL` there instead of
//! waiting) and on SQLite does nothing.

use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database, MySql, Pool, Postgres, Sqlite};

use crate::migrate::apply_missing;
use crate::{Error, MIGRATIONS_TABLE};

/// Key of the PostgreSQL advisory lock that serializes outbox migrations:
/// `outbox` in ASCII. Advisory locks are per database, so one key serves
/// every database of a server.
pub const POSTGRES_MIGRATION_LOCK_KEY: i64 = 0x6f75_7462_6f78;

/// Takes the PostgreSQL lock; binds [`POSTGRES_MIGRATION_LOCK_KEY`].
const POSTGRES_LOCK: &str = include_str!("backend/sql/postgres/migration_lock.sql");
/// Releases the PostgreSQL lock; binds [`POSTGRES_MIGRATION_LOCK_KEY`].
const POSTGRES_UNLOCK: &str = include_str!("backend/sql/postgres/migration_unlock.sql");
/// Keeps the migration session's notices out of the log.
const POSTGRES_QUIET_NOTICES: &str = include_str!("backend/sql/postgres/quiet_notices.sql");
/// SQLSTATE of PostgreSQL's `lock_not_available`, raised by `lock_timeout`.
const POSTGRES_LOCK_TIMEOUT: &str = "55P03";

/// The session's database on MariaDB / MySQL.
const MYSQL_CURRENT_DATABASE: &str = include_str!("backend/sql/mysql/current_database.sql");
/// Takes the MariaDB / MySQL lock; binds its name.
const MYSQL_LOCK: &str = include_str!("backend/sql/mysql/migration_lock.sql");
/// Releases the MariaDB / MySQL lock; binds its name.
const MYSQL_UNLOCK: &str = include_str!("backend/sql/mysql/migration_unlock.sql");
/// The longest lock name MySQL accepts, in characters.
const MYSQL_MAX_LOCK_NAME_CHARS: usize = 64;

/// Opens the SQLite transaction that holds the write lock.
const SQLITE_LOCK: &str = include_str!("backend/sql/sqlite/migration_lock.sql");
/// SQLite's primary result code `SQLITE_BUSY`; extended codes keep it in
/// their low byte.
const SQLITE_BUSY: i64 = 5;

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

/// Apply the missing migrations of `migrator` on MariaDB / MySQL, holding
/// the named lock.
pub(crate) async fn migrate_mysql(pool: &Pool<MySql>, migrator: Migrator) -> Result<(), Error> {
    let mut connection = session_for_lock(pool).await?;
    let database: Option<String> = sqlx::query_scalar(MYSQL_CURRENT_DATABASE)
        .fetch_one(&mut *connection)
        .await?;
    let name = mysql_lock_name(database.as_deref().unwrap_or_default());
    let lock = format!("GET_LOCK('{name}')");
    tracing::debug!(lock = %lock, "taking the outbox migration lock");
    let (taken, timeout_seconds): (Option<i64>, Option<i64>) = sqlx::query_as(MYSQL_LOCK)
        .bind(&name)
        .fetch_one(&mut *connection)
        .await?;
    match taken {
        Some(1) => {}
        Some(_) => {
            return Err(Error::MigrationLock {
                lock,
                reason: format!(
                    "another session held it for longer than this session's \
                     lock_wait_timeout ({} s)",
                    timeout_seconds.unwrap_or_default()
                ),
            });
        }
        None => {
            return Err(Error::MigrationLock {
                lock,
                reason: "the server answered NULL (an error while waiting)".to_owned(),
            });
        }
    }
    let migrated = apply_missing(&mut *connection, &migrator).await;
    let released = sqlx::query(MYSQL_UNLOCK)
        .bind(&name)
        .execute(&mut *connection)
        .await
        .map(drop);
    finish(connection, &lock, migrated, released).await
}

/// Apply the missing migrations of `migrator` on SQLite in one transaction
/// that holds the write lock from its start.
pub(crate) async fn migrate_sqlite(pool: &Pool<Sqlite>, migrator: Migrator) -> Result<(), Error> {
    let lock = "the SQLite write lock (BEGIN IMMEDIATE)";
    let mut connection = pool.acquire().await?;
    tracing::debug!(lock, "taking the outbox migration lock");
    let mut transaction = match connection.begin_with(SQLITE_LOCK).await {
        Ok(transaction) => transaction,
        Err(error) if is_sqlite_busy(&error) => {
            return Err(Error::MigrationLock {
                lock: lock.to_owned(),
                reason: format!(
                    "another connection held it for longer than this connection's busy \
                     timeout: {error}"
                ),
            });
        }
        Err(error) => return Err(Error::Database(error)),
    };
    // Each migration runs in a savepoint of this transaction; a failure
    // rolls every one of them back. Dropping the transaction, as a
    // cancelled call does, rolls back too.
    match apply_missing(&mut *transaction, &migrator).await {
        Ok(()) => transaction.commit().await?,
        Err(error) => {
            if let Err(rollback) = transaction.rollback().await {
                tracing::warn!(lock, error = %rollback, "rolling back the failed migration failed");
            }
            return Err(error.into());
        }
    }
    tracing::debug!(lock, "released the outbox migration lock");
    Ok(())
}

/// A connection of `pool` for a session lock. It is closed rather than
/// returned to the pool, even when the migration is dropped half-way, so
/// no pooled connection ever keeps the lock.
async fn session_for_lock<DB: Database>(pool: &Pool<DB>) -> Result<PoolConnection<DB>, Error> {
    let mut connection = pool.acquire().await?;
    connection.close_on_drop();
    Ok(connection)
}

/// Whether `error` is SQLite's `SQLITE_BUSY` (or one of its extended codes).
fn is_sqlite_busy(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|database| database.code())
        .and_then(|code| code.parse::<i64>().ok())
        .is_some_and(|code| code & 0xff == SQLITE_BUSY)
}

/// The migration's outcome, once the session lock is released and the
/// session closed. A failed release only costs a warning: closing the
/// session releases its lock as well.
async fn finish<DB: Database>(
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

/// The name of the MariaDB / MySQL migration lock of `database`:
/// `<database>._outbox_migrations`. Named locks are server-wide, hence the
/// database in the name. MySQL refuses names above 64 characters, so a
/// long database name is cut and followed by a hash of the whole.
fn mysql_lock_name(database: &str) -> String {
    let suffix_chars = MIGRATIONS_TABLE.chars().count() + 1;
    let room = MYSQL_MAX_LOCK_NAME_CHARS - suffix_chars;
    if database.chars().count() <= room {
        return format!("{database}.{MIGRATIONS_TABLE}");
    }
    let hash = format!("{:016x}", fnv1a_64(database.as_bytes()));
    let kept: String = database.chars().take(room - hash.len() - 1).collect();
    format!("{kept}~{hash}.{MIGRATIONS_TABLE}")
}

/// 64-bit FNV-1a: a stable hash, the same in every process and release.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::{MYSQL_MAX_LOCK_NAME_CHARS, mysql_lock_name};
    use crate::Backend;

    #[test]
    fn the_mysql_lock_name_carries_the_database() {
        assert_eq!(mysql_lock_name("shop"), "shop._outbox_migrations");
    }

    #[test]
    fn a_long_database_name_still_gives_a_distinct_lock_name_mysql_accepts() {
        let long = "a".repeat(64);
        let other = format!("{}b", "a".repeat(63));
        let (long_name, other_name) = (mysql_lock_name(&long), mysql_lock_name(&other));
        assert!(
            long_name.chars().count() <= MYSQL_MAX_LOCK_NAME_CHARS,
            "{long_name}"
        );
        assert!(long_name.ends_with("._outbox_migrations"), "{long_name}");
        assert_ne!(long_name, other_name);
        assert_eq!(long_name, mysql_lock_name(&long), "stable");
    }

    #[test]
    fn every_sqlite_migration_can_run_inside_the_locking_transaction() {
        // A `-- no-transaction` migration (VACUUM, journal_mode) could not
        // run inside the transaction that holds SQLite's write lock.
        let migrator = <sqlx::Sqlite as Backend>::migrator();
        for migration in migrator.iter() {
            assert!(
                !migration.no_tx,
                "migration {} is no-transaction",
                migration.version
            );
        }
    }
}
