//! Beginning a transaction that a cancelled caller cannot leave open.
//!
//! sqlx 0.9.0 counts a PostgreSQL transaction only once the server has
//! answered its `BEGIN`. A future dropped while that answer is on its way (an
//! aborted task, a `select!` branch that lost, a timeout) queues no
//! `ROLLBACK`, and the pool hands the connection, still inside the
//! transaction, to the next borrower: its statements then run in a
//! transaction nobody commits and keep their row locks until the connection
//! is closed (transact-rs/sqlx#4393, fixed after 0.9.0). [`begin_transaction`]
//! runs the `BEGIN` in a task of its own, which finishes even when its caller
//! is gone; the transaction it then drops is rolled back as usual.

use sqlx::{Database, Pool, Transaction};

/// Begin a transaction on `pool` so that cancelling the caller at any
/// point leaves no transaction open on a pooled connection.
///
/// Use it instead of [`Pool::begin`] wherever the caller may be cancelled.
/// It must be called from within a Tokio runtime.
///
/// # Errors
/// What [`Pool::begin`] returns; an `Io` error when the task running it
/// panicked or the runtime is shutting down.
///
/// # Example
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// let work = async {
///     let mut tx = outbox::begin_transaction(&pool).await?;
///     sqlx::query("SELECT 1").execute(&mut *tx).await?;
///     tx.commit().await
/// };
/// // Whenever the timeout fires, the connection goes back to the pool
/// // outside any transaction.
/// let _ = tokio::time::timeout(std::time::Duration::from_millis(50), work).await;
/// # Ok(()) }
/// ```
pub async fn begin_transaction<DB: Database>(
    pool: &Pool<DB>,
) -> Result<Transaction<'static, DB>, sqlx::Error> {
    let pool = pool.clone();
    tokio::spawn(async move { pool.begin().await })
        .await
        .map_err(|failure| {
            sqlx::Error::Io(std::io::Error::other(format!(
                "the task beginning a transaction did not finish: {failure}"
            )))
        })?
}
