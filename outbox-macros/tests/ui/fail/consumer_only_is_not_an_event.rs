use outbox::Event;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Event)]
#[event(type = "order.created", version = 2)]
struct OrderCreated {
    order_id: u64,
}

fn enqueue<E: Event>(_event: &E) {}

fn main() {
    enqueue(&OrderCreated { order_id: 7 });
}
