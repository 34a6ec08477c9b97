use outbox::Event;
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(aggregate = "order", topic = "orders", source = "/orders")]
struct OrderCreated {
    #[event(aggregate_id)]
    order_id: u64,
}

fn main() {}
