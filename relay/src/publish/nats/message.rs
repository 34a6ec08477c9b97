//! The NATS message of an event: its subject, and headers after the
//! CloudEvents NATS binding in binary content mode (`docs/wire-format.md`).

use std::sync::Arc;

use async_nats::HeaderMap;
use async_nats::jetstream::message::PublishMessage;
use outbox::wire;

use super::config::NatsPublisherConfig;
use crate::event::OutboundEvent;
use crate::publish::PublishFailure;
use crate::publish::cloudevent::CloudEvent;

/// An event's payload as the bytes of a message, shared, not copied.
struct Payload(Arc<str>);

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The message of one event, and its subject.
pub(super) struct Message {
    pub(super) subject: String,
    pub(super) publish: PublishMessage,
}

/// The message of `event`: `Nats-Msg-Id` is the event id (JetStream drops
/// a second copy within the stream's duplicate window), `ce-<attribute>`
/// carries every CloudEvents attribute percent-encoded, except
/// `datacontenttype`, which is `Content-Type`; `traceparent` and
/// `tracestate` are also plain headers when the event carries them, and the
/// payload is the event's payload bytes. An event that is not a valid
/// CloudEvent, or whose subject is not one, is rejected.
pub(super) fn message(
    event: &OutboundEvent,
    config: &NatsPublisherConfig,
) -> Result<Message, PublishFailure> {
    let cloud_event = CloudEvent::from_outbound(event)?;
    let subject = config
        .subject_of(&event.topic)
        .render(event)
        .map_err(PublishFailure::Rejected)?;
    let mut headers = HeaderMap::new();
    headers.insert(wire::NATS_MSG_ID_HEADER, cloud_event.id());
    for (name, value) in cloud_event.attributes() {
        if name == wire::DATACONTENTTYPE_ATTRIBUTE {
            headers.insert(wire::NATS_CONTENT_TYPE_HEADER, value.as_ref());
        } else {
            headers.insert(
                wire::nats_header_name(name).as_str(),
                wire::percent_encode_header_value(&value).as_str(),
            );
        }
    }
    for trace_header in wire::TRACE_CONTEXT_HEADERS {
        if let Some(value) = event.headers.get(trace_header) {
            headers.insert(trace_header, value.as_str());
        }
    }
    let payload = bytes::Bytes::from_owner(Payload(Arc::clone(&event.payload)));
    Ok(Message {
        subject,
        publish: PublishMessage::build().payload(payload).headers(headers),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::SubjectTemplate;

    fn order_event() -> OutboundEvent {
        let mut event = OutboundEvent {
            id: 1,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".to_owned(),
            event_version: 1,
            source: "/orders/é".to_owned(),
            aggregate_type: "order".to_owned(),
            aggregate_id: "order-7".to_owned(),
            topic: "orders".to_owned(),
            payload: r#"{"total":1}"#.into(),
            headers: Default::default(),
            created_at: chrono::Utc::now(),
            attempts: 0,
            replay: false,
        };
        event.headers.insert(
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
        );
        event
    }

    #[test]
    fn a_message_carries_every_attribute_and_the_payload() {
        let event = order_event();
        let mut config = NatsPublisherConfig::new(vec!["nats://127.0.0.1:4222".to_owned()]);
        config.subjects.insert(
            "orders".to_owned(),
            SubjectTemplate::parse("{topic}.{event_type}").expect("valid"),
        );
        let message = message(&event, &config).expect("valid event");
        assert_eq!(message.subject, "orders.order.created");
        let built = message.publish.outbound_message("x");
        let headers = built.headers.expect("headers");
        let header = |name: &str| headers.get(name).map(|value| value.as_str().to_owned());
        let id = event.event_id.to_string();
        assert_eq!(header("Nats-Msg-Id"), Some(id.clone()));
        assert_eq!(header("ce-id"), Some(id));
        assert_eq!(header("ce-source").as_deref(), Some("/orders/%C3%A9"));
        assert_eq!(header("ce-type").as_deref(), Some("order.created"));
        assert_eq!(header("ce-specversion").as_deref(), Some("1.0"));
        assert_eq!(header("ce-partitionkey").as_deref(), Some("order-7"));
        assert_eq!(header("Content-Type").as_deref(), Some("application/json"));
        assert_eq!(header("ce-datacontenttype"), None);
        assert_eq!(
            header("traceparent").as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert!(header("ce-time").is_some());
        assert_eq!(&built.payload[..], br#"{"total":1}"#);
    }

    #[test]
    fn a_subject_that_cannot_be_published_to_is_a_rejection() {
        let mut event = order_event();
        event.topic = "two words".to_owned();
        let config = NatsPublisherConfig::new(vec!["nats://127.0.0.1:4222".to_owned()]);
        match message(&event, &config) {
            Err(PublishFailure::Rejected(reason)) => assert!(reason.contains("whitespace")),
            other => panic!("expected a rejection, got {:?}", other.map(|m| m.subject)),
        }
    }
}
