//! The database of one run: a fresh PostgreSQL database (from
//! `outbox-testkit`, dropped with the run) with the outbox and inbox tables
//! (`outbox::migrate`) and the consumer's own `invoices` table, the same
//! for every consumer; and the checks of what a consumer left in it.

use std::time::{Duration, Instant};

use outbox_testkit::TestDatabase;
use sqlx::{PgPool, Postgres};

/// One invoice per order. The primary key is what the raw consumer's
/// `ON CONFLICT DO NOTHING` deduplicates on; the inbox and mq-bridge
/// deduplicate before they write, so a key conflict would fail them.
const CREATE_INVOICES: &str = "CREATE TABLE invoices (\
     order_id uuid PRIMARY KEY, amount_cents bigint NOT NULL)";
/// How often [`first_invoice`] looks.
const FIRST_INVOICE_POLL: Duration = Duration::from_millis(10);

/// A fresh database with the inbox's tables and `invoices`.
pub(crate) async fn fresh() -> TestDatabase<Postgres> {
    let database = outbox_testkit::postgres().await;
    outbox::migrate(database.pool())
        .await
        .expect("outbox::migrate on the run's database");
    sqlx::query(CREATE_INVOICES)
        .execute(database.pool())
        .await
        .expect("create the invoices table");
    database
}

/// Invoices written so far.
pub(crate) async fn invoices(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM invoices")
        .fetch_one(pool)
        .await
        .expect("count the invoices")
}

/// When the first invoice became visible (committed), looking every
/// [`FIRST_INVOICE_POLL`]; run beside the consumer, cancelled with it.
pub(crate) async fn first_invoice(pool: PgPool) -> Instant {
    loop {
        let any: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM invoices)")
            .fetch_one(&pool)
            .await
            .expect("look for the first invoice");
        if any {
            return Instant::now();
        }
        tokio::time::sleep(FIRST_INVOICE_POLL).await;
    }
}

/// Check what a consumer left: exactly `events` invoices, one per order,
/// and (for the inbox) `events` inbox rows. Panics naming the consumer.
pub(crate) async fn verify(pool: &PgPool, consumer: &str, events: usize, inbox_rows: bool) {
    let (rows, orders): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT order_id) FROM invoices")
            .fetch_one(pool)
            .await
            .expect("count the invoices");
    assert!(
        rows == events as i64 && orders == events as i64,
        "{consumer}: {rows} invoices for {orders} orders; expected exactly {events} for {events}"
    );
    if inbox_rows {
        let inbox: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_messages")
            .fetch_one(pool)
            .await
            .expect("count the inbox rows");
        assert_eq!(
            inbox, events as i64,
            "{consumer}: {inbox} inbox rows; expected {events}"
        );
    }
}
