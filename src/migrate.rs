//! [`migrate`]: create and upgrade the outbox and inbox tables.

use sqlx::Pool;

use crate::{Backend, Error};

/// Apply the outbox migrations the database lacks: `outbox_events`,
/// `outbox_partitions` and `inbox_messages`. Safe to run on every start and
/// from several processes at once (the migrator takes a database lock).
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
/// from the one shipped; [`Error::Migrate`] or [`Error::Database`] otherwise.
pub async fn migrate<DB: Backend>(pool: &Pool<DB>) -> Result<(), Error> {
    DB::run_migrations(pool).await?;
    tracing::debug!(
        backend = <DB as sqlx::Database>::NAME,
        "outbox schema is up to date"
    );
    Ok(())
}
