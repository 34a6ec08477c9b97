//! Orders: the request, its validation, the event, and the transaction that
//! writes the order row and its event together.

use outbox::{Event, OutboxWriter};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

/// Inserts one order: id, customer, total in cents.
const INSERT_ORDER: &str = include_str!("sql/insert_order.sql");

/// Longest customer name accepted.
const MAX_CUSTOMER_CHARS: usize = 200;

/// The body of `POST /orders`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewOrder {
    /// Who ordered.
    pub customer: String,
    /// The order total in cents, more than zero.
    pub total_cents: i64,
}

impl NewOrder {
    /// Check the fields the JSON types cannot express.
    ///
    /// # Errors
    /// A one-line description of the first invalid field.
    pub fn validate(&self) -> Result<(), String> {
        if self.customer.trim().is_empty() {
            return Err("`customer` is empty".to_owned());
        }
        if self.customer.chars().count() > MAX_CUSTOMER_CHARS {
            return Err(format!(
                "`customer` is longer than {MAX_CUSTOMER_CHARS} characters"
            ));
        }
        if self.total_cents <= 0 {
            return Err(format!(
                "`total_cents` must be more than zero, got {}",
                self.total_cents
            ));
        }
        Ok(())
    }
}

/// Published once per placed order.
#[derive(Debug, Serialize, Event)]
#[event(
    type = "order.created",
    version = 1,
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
pub struct OrderCreated {
    /// The new order's id.
    #[event(aggregate_id)]
    pub order_id: Uuid,
    /// Who ordered.
    pub customer: String,
    /// The order total in cents.
    pub total_cents: i64,
}

/// The ids of a placed order and of its event.
#[derive(Debug, Serialize)]
pub struct PlacedOrder {
    /// The new order's id.
    pub order_id: Uuid,
    /// The id of its `order.created` event (the CloudEvents id).
    pub event_id: Uuid,
}

/// Write the order row and its `order.created` event in one transaction:
/// both commit, or neither does.
///
/// # Errors
/// A database error, or an event the writer rejects; nothing is written.
pub async fn place_order(
    pool: &PgPool,
    writer: &OutboxWriter,
    order: &NewOrder,
) -> Result<PlacedOrder, outbox::Error> {
    let order_id = Uuid::now_v7();
    let customer = order.customer.trim().to_owned();
    let mut tx = pool.begin().await?;
    sqlx::query(INSERT_ORDER)
        .bind(order_id)
        .bind(&customer)
        .bind(order.total_cents)
        .execute(&mut *tx)
        .await?;
    let event = OrderCreated {
        order_id,
        customer,
        total_cents: order.total_cents,
    };
    let event_id = writer.enqueue(&mut tx, &event).await?;
    tx.commit().await?;
    tracing::info!(%order_id, %event_id, total_cents = order.total_cents, "order placed");
    Ok(PlacedOrder { order_id, event_id })
}
