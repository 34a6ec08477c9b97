use outbox::Event;
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(
    type = "order.created",
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
struct OrderCreated {
    order_id: u64,
    total_cents: i64,
}

fn main() {}
