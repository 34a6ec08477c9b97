//! Outbound events built by hand, for the tests that drive a publisher
//! directly.

use std::collections::BTreeMap;

use chrono::{SubsecRound, Utc};
use outbox_relay::OutboundEvent;
use uuid::Uuid;

/// Event `sequence` of `aggregate_id` for `topic`, with trace context on
/// some events and a custom header on all. Its type alternates between
/// `order.created` (every third) and `order.updated`; its version is 3.
pub fn outbound_event(topic: &str, aggregate_id: &str, sequence: usize) -> OutboundEvent {
    let mut headers = BTreeMap::new();
    if sequence.is_multiple_of(2) {
        headers.insert(
            "traceparent".to_owned(),
            format!("00-{:032x}-{:016x}-01", sequence + 1, sequence + 1),
        );
    }
    if sequence.is_multiple_of(4) {
        headers.insert("tracestate".to_owned(), format!("vendor=v{sequence}"));
    }
    headers.insert("tenant".to_owned(), "acme".to_owned());
    OutboundEvent {
        id: i64::try_from(sequence).expect("small sequence") + 1,
        event_id: Uuid::now_v7(),
        event_type: if sequence.is_multiple_of(3) {
            "order.created".to_owned()
        } else {
            "order.updated".to_owned()
        },
        event_version: 3,
        source: "/orders".to_owned(),
        aggregate_type: "order".to_owned(),
        aggregate_id: aggregate_id.to_owned(),
        topic: topic.to_owned(),
        payload: format!(r#"{{"aggregate":"{aggregate_id}","sequence":{sequence}}}"#).into(),
        headers,
        created_at: Utc::now().trunc_subsecs(6),
        attempts: 0,
        replay: false,
    }
}
