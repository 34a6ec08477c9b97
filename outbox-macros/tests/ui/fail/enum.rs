use outbox::Event;
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(
    type = "order.created",
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
enum OrderEvent {
    Created { order_id: u64 },
    Cancelled { order_id: u64 },
}

fn main() {}
