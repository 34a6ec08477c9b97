//! [`migrate`]: create and upgrade the outbox and inbox tables.

use std::borrow::Cow;
use std::collections::BTreeMap;

use sqlx::Pool;
use sqlx::migrate::{Migrate, MigrateError, Migrator};

use crate::{Backend, Error, MIGRATIONS_TABLE};

/// Apply the outbox migrations the database lacks: `outbox_events`,
/// `outbox_partitions`, `outbox_relays` and `inbox_messages`. Safe to run
/// on every start and from several processes at once: each call holds a
/// database lock while it reads which migrations are applied and applies
/// the missing ones, so concurrent calls follow one another and the later
/// ones find nothing to do. The lock is PostgreSQL's advisory lock
/// [`POSTGRES_MIGRATION_LOCK_KEY`](crate::POSTGRES_MIGRATION_LOCK_KEY)
/// (waiting as long as `lock_timeout` allows), MariaDB / MySQL's named lock
/// `<database>._outbox_migrations` (waiting at most `lock_wait_timeout`), or
/// SQLite's write lock, taken by `BEGIN IMMEDIATE` (waiting as long as the
/// busy timeout allows). On SQLite every missing migration is applied in
/// that one transaction. The lock needs a session of its own: on
/// PostgreSQL, not a transaction-mode pooler such as PgBouncer's.
///
/// Applied migrations are recorded in `_outbox_migrations`, apart from the
/// application's own sqlx migrations.
///
/// ```no_run
/// # async fn example() -> Result<(), outbox::Error> {
/// let pool = sqlx::SqlitePool::connect("sqlite://outbox.db?mode=rwc").await?;
/// outbox::migrate(&pool).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::MigrationModified`] when a migration applied earlier differs
/// from the one shipped; [`Error::MigrationPartiallyApplied`] when one is
/// recorded as failed part-way; [`Error::MigrationLock`] when another migrator
/// held the lock for longer than the connection waits; [`Error::Migrate`] or
/// [`Error::Database`] otherwise.
pub async fn migrate<DB: Backend>(pool: &Pool<DB>) -> Result<(), Error> {
    DB::run_migrations(pool).await?;
    tracing::debug!(
        backend = <DB as sqlx::Database>::NAME,
        "outbox schema is up to date"
    );
    Ok(())
}

/// Apply the migrations of `migrator` that the database of `connection`
/// lacks, once the applied ones are checked against it. The caller holds
/// the migration lock, so what this reads stays true until it returns.
///
/// # Errors
/// [`MigrateError::Dirty`] for a migration recorded as failed,
/// [`MigrateError::VersionMissing`] for an applied migration this release
/// does not ship, [`MigrateError::VersionMismatch`] for one that differs
/// from the shipped one, or the failure of a migration.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) async fn apply_missing<C: Migrate + Send>(
    connection: &mut C,
    migrator: &Migrator,
) -> Result<(), MigrateError> {
    connection.ensure_migrations_table(MIGRATIONS_TABLE).await?;
    if let Some(version) = connection.dirty_version(MIGRATIONS_TABLE).await? {
        return Err(MigrateError::Dirty(version));
    }
    let applied: BTreeMap<i64, Cow<'static, [u8]>> = connection
        .list_applied_migrations(MIGRATIONS_TABLE)
        .await?
        .into_iter()
        .map(|migration| (migration.version, migration.checksum))
        .collect();
    if let Some(version) = applied
        .keys()
        .find(|version| !migrator.version_exists(**version))
    {
        return Err(MigrateError::VersionMissing(*version));
    }
    for migration in migrator
        .iter()
        .filter(|migration| !migration.migration_type.is_down_migration())
    {
        match applied.get(&migration.version) {
            Some(checksum) if *checksum != migration.checksum => {
                return Err(MigrateError::VersionMismatch(migration.version));
            }
            Some(_) => {}
            None => {
                let elapsed = connection.apply(MIGRATIONS_TABLE, migration).await?;
                tracing::info!(
                    version = migration.version,
                    description = %migration.description,
                    elapsed_ms = elapsed.as_millis(),
                    "applied outbox migration"
                );
            }
        }
    }
    Ok(())
}
