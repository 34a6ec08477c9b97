//! SQLite's migration lock: the write lock, held by one transaction.

use sqlx::migrate::Migrator;
use sqlx::{Connection, Pool, Sqlite};

use crate::Error;
use crate::migrate::apply_missing;

/// Opens the SQLite transaction that holds the write lock.
const SQLITE_LOCK: &str = include_str!("../backend/sql/sqlite/migration_lock.sql");
/// SQLite's primary result code `SQLITE_BUSY`; extended codes keep it in
/// their low byte.
const SQLITE_BUSY: i64 = 5;

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

/// Whether `error` is SQLite's `SQLITE_BUSY` (or one of its extended codes).
fn is_sqlite_busy(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|database| database.code())
        .and_then(|code| code.parse::<i64>().ok())
        .is_some_and(|code| code & 0xff == SQLITE_BUSY)
}

#[cfg(test)]
mod tests {
    use crate::Backend;

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
