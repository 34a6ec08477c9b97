//! Invoicing: the `order.created` event as billing reads it, and the
//! handler that records its invoice inside the inbox transaction.

use std::sync::atomic::{AtomicU64, Ordering};

use outbox::Event;
use outbox_inbox::{
    BatchItem, BoxError, DecodeError, DecodeEvent, Delivery, Handler, IncomingEvent,
};
use serde::Deserialize;
use sqlx::{PgConnection, Postgres};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Inserts one invoice: order id, customer, amount in cents.
const INSERT_INVOICE: &str = include_str!("sql/insert_invoice.sql");

/// Inserts a batch's invoices: arrays of order ids, customers, amounts.
const INSERT_INVOICES: &str = include_str!("sql/insert_invoices.sql");

/// The event type billing consumes, also the queue's binding key.
pub const ORDER_CREATED: &str = "order.created";

/// The orders service's `order.created` event, version 1, as billing
/// reads it: its type and version are all a consumer states.
#[derive(Debug, Deserialize, Event)]
#[event(type = "order.created", version = 1)]
pub struct OrderCreated {
    /// The order's id.
    pub order_id: Uuid,
    /// Who ordered.
    pub customer: String,
    /// The order total in cents.
    pub total_cents: i64,
}

/// The invoicing handler: records each order's invoice in the inbox
/// transaction, so the invoice and the inbox row commit together. It counts
/// deliveries and cancels `stop` after the `exit_after`-th when a limit is
/// set.
pub struct InvoiceHandler {
    deliveries: AtomicU64,
    exit_after: Option<u64>,
    stop: CancellationToken,
}

impl InvoiceHandler {
    /// A handler that cancels `stop` after `exit_after` deliveries, if set.
    pub fn new(exit_after: Option<u64>, stop: CancellationToken) -> Self {
        InvoiceHandler {
            deliveries: AtomicU64::new(0),
            exit_after,
            stop,
        }
    }
}

impl Handler<Postgres> for InvoiceHandler {
    type Event = OrderCreated;

    /// Runs once per delivery, before the inbox sees it: the place to count
    /// deliveries, duplicates included.
    fn decode(&self, incoming: &IncomingEvent) -> Result<OrderCreated, DecodeError> {
        let deliveries = self.deliveries.fetch_add(1, Ordering::Relaxed) + 1;
        if self.exit_after == Some(deliveries) {
            tracing::info!(
                deliveries,
                "delivery limit reached; stopping once it is settled"
            );
            self.stop.cancel();
        }
        OrderCreated::decode_event(incoming)
    }

    async fn handle(
        &self,
        tx: &mut PgConnection,
        order: &OrderCreated,
        delivery: &Delivery<'_>,
    ) -> Result<(), BoxError> {
        sqlx::query(INSERT_INVOICE)
            .bind(order.order_id)
            .bind(&order.customer)
            .bind(order.total_cents)
            .execute(&mut *tx)
            .await?;
        tracing::info!(
            order_id = %order.order_id,
            amount_cents = order.total_cents,
            replay = delivery.is_replay(),
            attempt = delivery.attempt(),
            "invoice recorded"
        );
        Ok(())
    }

    /// With `--batch-size` above 1: the batch's invoices in one statement,
    /// instead of one `INSERT` per order.
    async fn handle_batch(
        &self,
        tx: &mut PgConnection,
        batch: &[BatchItem<'_, OrderCreated>],
    ) -> Result<(), BoxError> {
        let order_ids: Vec<Uuid> = batch.iter().map(|item| item.event.order_id).collect();
        let customers: Vec<&str> = batch
            .iter()
            .map(|item| item.event.customer.as_str())
            .collect();
        let amounts: Vec<i64> = batch.iter().map(|item| item.event.total_cents).collect();
        sqlx::query(INSERT_INVOICES)
            .bind(&order_ids)
            .bind(&customers)
            .bind(&amounts)
            .execute(&mut *tx)
            .await?;
        tracing::info!(invoices = batch.len(), "invoices recorded");
        Ok(())
    }
}
