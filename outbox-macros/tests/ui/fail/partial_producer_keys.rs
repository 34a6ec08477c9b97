use outbox::Event;
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(type = "order.created", topic = "orders")]
struct OrderCreated {
    order_id: u64,
}

fn main() {}
