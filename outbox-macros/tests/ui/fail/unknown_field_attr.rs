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
    #[event(aggregate_id)]
    order_id: u64,
    #[event(key)]
    customer_id: u64,
}

fn main() {}
