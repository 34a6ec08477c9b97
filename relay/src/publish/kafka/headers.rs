//! The record headers of an event: the binary content mode of the
//! CloudEvents Kafka binding, and the W3C trace context under its plain
//! names.

use outbox::wire;
use rdkafka::message::{Header, OwnedHeaders};

use crate::event::OutboundEvent;
use crate::publish::cloudevent::CloudEvent;

/// The headers of the binary content mode of the CloudEvents Kafka binding:
/// `ce_<attribute>` for every attribute, `content-type` for
/// `datacontenttype`, and `traceparent` / `tracestate` when the event
/// carries them.
pub(super) fn kafka_headers(cloud_event: &CloudEvent, event: &OutboundEvent) -> OwnedHeaders {
    let attributes = cloud_event.attributes();
    let mut headers = OwnedHeaders::new_with_capacity(attributes.len() + 2);
    // librdkafka copies each name: one buffer serves every `ce_` name.
    let mut prefixed = String::with_capacity(32);
    for (name, value) in &attributes {
        let key = if *name == wire::DATACONTENTTYPE_ATTRIBUTE {
            wire::KAFKA_CONTENT_TYPE_HEADER
        } else {
            wire::write_kafka_header_name(&mut prefixed, name);
            prefixed.as_str()
        };
        headers = headers.insert(Header {
            key,
            value: Some(value.as_ref()),
        });
    }
    for trace_header in wire::TRACE_CONTEXT_HEADERS {
        if let Some(value) = event.headers.get(trace_header) {
            headers = headers.insert(Header {
                key: trace_header,
                value: Some(value.as_str()),
            });
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::kafka::tests::order_event;

    #[test]
    fn a_replay_carries_the_ce_outboxreplay_header() {
        use rdkafka::message::Headers;

        let mut event = order_event();
        let replay_header = |event: &OutboundEvent| {
            let cloud_event = CloudEvent::from_outbound(event).expect("valid event");
            kafka_headers(&cloud_event, event)
                .iter()
                .find(|header| header.key == "ce_outboxreplay")
                .and_then(|header| header.value.map(<[u8]>::to_vec))
        };
        assert_eq!(replay_header(&event), None);
        event.replay = true;
        assert_eq!(replay_header(&event), Some(b"true".to_vec()));
    }
}
