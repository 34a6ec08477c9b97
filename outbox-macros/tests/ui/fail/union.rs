use outbox::Event;

#[derive(Event)]
#[event(
    type = "order.created",
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
union OrderId {
    numeric: u64,
    bytes: [u8; 8],
}

fn main() {}
