//! A type that is only consumed gives `type` and `version` alone: it gets
//! `EventType`, not `Event`, and need not be `Serialize`.
use outbox::{Event, EventType};
use serde::Deserialize;

#[derive(Deserialize, Event)]
#[event(type = "order.created", version = 2)]
struct OrderCreated {
    order_id: i64,
}

#[derive(Deserialize, Event)]
#[event(type = "clock.ticked")]
struct ClockTicked;

/// The trait is usable generically over consumer-only types.
fn describe<E: EventType>() -> String {
    format!("{}@{}", E::EVENT_TYPE, E::EVENT_VERSION)
}

fn main() {
    assert_eq!(OrderCreated::EVENT_TYPE, "order.created");
    assert_eq!(OrderCreated::EVENT_VERSION, 2);
    assert_eq!(describe::<OrderCreated>(), "order.created@2");
    assert_eq!(describe::<ClockTicked>(), "clock.ticked@1");

    let event: OrderCreated = serde_json::from_str(r#"{"order_id": 7}"#).unwrap();
    assert_eq!(event.order_id, 7);
}
