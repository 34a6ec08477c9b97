use outbox::Event;
use serde::Serialize;

#[derive(Serialize, Event)]
struct OrderCreated {
    #[event(aggregate_id)]
    order_id: u64,
}

fn main() {}
