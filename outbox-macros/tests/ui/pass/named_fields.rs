use outbox::{Event, EventType};
use serde::Serialize;
use uuid::Uuid;

#[derive(Serialize, Event)]
#[event(
    type = "order.created",
    version = 1,
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
struct OrderCreated {
    #[event(aggregate_id)]
    order_id: Uuid,
    total_cents: i64,
}

fn main() {
    assert_eq!(OrderCreated::EVENT_TYPE, "order.created");
    assert_eq!(OrderCreated::EVENT_VERSION, 1);
    assert_eq!(OrderCreated::AGGREGATE_TYPE, "order");
    assert_eq!(OrderCreated::TOPIC, "orders");
    assert_eq!(OrderCreated::SOURCE, "/orders");

    let order_id = Uuid::from_u128(0x0190_6d3c_2a4b_7c8d_9e0f_1a2b_3c4d_5e6f);
    let event = OrderCreated {
        order_id,
        total_cents: 1250,
    };
    assert_eq!(event.aggregate_id(), "01906d3c-2a4b-7c8d-9e0f-1a2b3c4d5e6f");
    assert_eq!(
        event.payload().unwrap().get(),
        r#"{"order_id":"01906d3c-2a4b-7c8d-9e0f-1a2b3c4d5e6f","total_cents":1250}"#
    );
}
