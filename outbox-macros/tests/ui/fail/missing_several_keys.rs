use outbox::Event;
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(type = "order.created", version = 2)]
struct OrderCreated {
    #[event(aggregate_id)]
    order_id: u64,
}

fn main() {}
