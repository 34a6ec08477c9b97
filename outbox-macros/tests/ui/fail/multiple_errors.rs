use outbox::Event;
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(
    type = "order created",
    version = 0,
    aggregate = "",
    exchange = "orders"
)]
struct OrderCreated {
    #[event(aggregate_id)]
    order_id: u64,
    #[event(key)]
    customer_id: u64,
    #[event(aggregate_id)]
    total_cents: i64,
}

fn main() {}
