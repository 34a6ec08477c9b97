//! The consumer's own tables, created at start by every replica.

use sqlx::PgPool;

/// Serializes the creation of the tables across replicas.
const LOCK_SCHEMA: &str = include_str!("sql/lock_schema.sql");
/// Creates the `invoices` table unless it exists.
const CREATE_INVOICES: &str = include_str!("sql/create_invoices.sql");

/// Create the `invoices` table unless it exists. Safe when several
/// replicas start at once: each creates it in a transaction that first
/// takes an advisory lock, so they follow one another and the later ones
/// find it.
///
/// # Errors
/// The database's error.
pub async fn create_schema(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(LOCK_SCHEMA).execute(&mut *tx).await?;
    sqlx::query(CREATE_INVOICES).execute(&mut *tx).await?;
    tx.commit().await
}
