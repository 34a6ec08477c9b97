//! Invoicing: the `order.created` event as billing reads it, and the
//! handler that records its invoice inside the inbox transaction.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use outbox::Event;
use outbox_inbox::{BoxError, DecodeError, Handler, IncomingEvent, TypedHandler};
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, Transaction};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Inserts one invoice: order id, customer, amount in cents.
const INSERT_INVOICE: &str = include_str!("sql/insert_invoice.sql");

/// The event type billing consumes, also the queue's binding key.
pub const ORDER_CREATED: &str = "order.created";

/// The orders service's `order.created` event, version 1, as billing
/// reads it.
#[derive(Debug, Serialize, Deserialize, Event)]
#[event(
    type = "order.created",
    version = 1,
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
pub struct OrderCreated {
    /// The order's id.
    #[event(aggregate_id)]
    pub order_id: Uuid,
    /// Who ordered.
    pub customer: String,
    /// The order total in cents.
    pub total_cents: i64,
}

/// The handler function: record the order's invoice in `tx`, the inbox's
/// transaction, so the invoice and the inbox row commit together.
fn record_invoice<'t>(
    tx: &'t mut Transaction<'static, Postgres>,
    order: &'t OrderCreated,
) -> BoxFuture<'t, Result<(), BoxError>> {
    Box::pin(async move {
        sqlx::query(INSERT_INVOICE)
            .bind(order.order_id)
            .bind(&order.customer)
            .bind(order.total_cents)
            .execute(&mut **tx)
            .await?;
        tracing::info!(order_id = %order.order_id, amount_cents = order.total_cents, "invoice recorded");
        Ok(())
    })
}

/// The invoicing handler, counting deliveries and cancelling `stop` after
/// the `exit_after`-th when a limit is set.
pub struct InvoiceHandler {
    invoices: TypedHandler<OrderCreated, RecordInvoice>,
    deliveries: AtomicU64,
    exit_after: Option<u64>,
    stop: CancellationToken,
}

/// The type of [`record_invoice`] as a handler function.
type RecordInvoice = for<'t> fn(
    &'t mut Transaction<'static, Postgres>,
    &'t OrderCreated,
) -> BoxFuture<'t, Result<(), BoxError>>;

impl InvoiceHandler {
    /// A handler that cancels `stop` after `exit_after` deliveries, if set.
    pub fn new(exit_after: Option<u64>, stop: CancellationToken) -> Self {
        let record: RecordInvoice = record_invoice;
        InvoiceHandler {
            invoices: outbox_inbox::typed::<OrderCreated, _, Postgres>(record),
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
        self.invoices.decode(incoming)
    }

    fn handle<'t>(
        &'t self,
        tx: &'t mut Transaction<'static, Postgres>,
        order: &'t OrderCreated,
    ) -> BoxFuture<'t, Result<(), BoxError>> {
        self.invoices.handle(tx, order)
    }
}
