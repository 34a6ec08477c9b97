//! The keys may be spread over several `#[event(...)]`, in any order, next to
//! other attributes; the largest version is accepted.
use outbox::{Event, EventType};
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(topic = "payments", source = "/payments")]
#[serde(rename_all = "camelCase")]
#[event(version = 2147483647, aggregate = "payment", type = "payment.refunded")]
struct PaymentRefunded {
    /// Doc comments and serde field attributes sit next to the marker.
    #[serde(rename = "id")]
    #[event(aggregate_id)]
    payment_id: i64,
    amount_cents: u32,
}

fn main() {
    assert_eq!(PaymentRefunded::EVENT_VERSION, i32::MAX);
    assert_eq!(PaymentRefunded::EVENT_TYPE, "payment.refunded");
    assert_eq!(PaymentRefunded::AGGREGATE_TYPE, "payment");
    assert_eq!(PaymentRefunded::TOPIC, "payments");
    assert_eq!(PaymentRefunded::SOURCE, "/payments");

    let event = PaymentRefunded {
        payment_id: -3,
        amount_cents: 100,
    };
    assert_eq!(event.aggregate_id(), "-3");
    assert_eq!(
        event.payload().unwrap().get(),
        r#"{"id":-3,"amountCents":100}"#
    );
}
