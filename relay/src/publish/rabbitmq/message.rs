//! The AMQP message of an event: exchange, routing key, properties, and
//! the CloudEvents attributes and W3C trace context in its headers table.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use outbox::wire;

use super::RabbitMqPublisher;
use crate::event::OutboundEvent;
use crate::publish::cloudevent::CloudEvent;
use crate::publish::{PublishFailure, RoutingKey};
use outbox::wire::CONTENT_TYPE_JSON;

/// One event as AMQP publishes it; the body is the event's payload.
pub(super) struct Message {
    pub(super) exchange: ShortString,
    pub(super) routing_key: ShortString,
    pub(super) properties: BasicProperties,
}

impl RabbitMqPublisher {
    /// The message of `event`, or its failure when a name does not fit an
    /// AMQP short string or the event is not a valid CloudEvent.
    pub(super) fn prepare(&self, event: &OutboundEvent) -> Result<Message, PublishFailure> {
        let cloud_event = CloudEvent::from_outbound(event)?;
        let routing_key_text = self.routing_key(event);
        let exchange = ShortString::try_new(event.topic.as_str()).map_err(|_| {
            PublishFailure::Rejected(format!(
                "rabbitmq exchange name is longer than 255 bytes: {:.40}...",
                event.topic
            ))
        })?;
        let routing_key = ShortString::try_new(routing_key_text).map_err(|_| {
            PublishFailure::Rejected(format!(
                "rabbitmq routing key is longer than 255 bytes: {routing_key_text:.40}..."
            ))
        })?;
        let message_type = ShortString::try_new(event.event_type.as_str()).map_err(|_| {
            PublishFailure::Rejected(format!(
                "event_type is longer than the 255 bytes of the AMQP type property: {:.40}...",
                event.event_type
            ))
        })?;

        let timestamp = u64::try_from(event.created_at.timestamp()).unwrap_or(0);
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from(CONTENT_TYPE_JSON))
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(cloud_event.id()))
            .with_type(message_type)
            .with_timestamp(timestamp)
            .with_headers(amqp_headers(&cloud_event, event));
        Ok(Message {
            exchange,
            routing_key,
            properties,
        })
    }

    /// The routing key of `event`: its exchange's, or the default one.
    pub(super) fn routing_key<'a>(&'a self, event: &'a OutboundEvent) -> &'a str {
        let setting = self
            .config
            .routing_keys
            .get(&event.topic)
            .unwrap_or(&self.config.default_routing_key);
        match setting {
            RoutingKey::EventType => event.event_type.as_str(),
            RoutingKey::Fixed(key) => key.as_str(),
        }
    }
}

/// The headers table: `cloudEvents:<attribute>` for every CloudEvents
/// attribute, and `traceparent` / `tracestate` when the event carries them.
fn amqp_headers(cloud_event: &CloudEvent, event: &OutboundEvent) -> FieldTable {
    let mut headers = FieldTable::default();
    for (name, value) in cloud_event.attributes() {
        let key = wire::amqp_header_name(name);
        match ShortString::try_new(key) {
            Ok(key) => {
                headers.insert(
                    key,
                    AMQPValue::LongString(LongString::from(value.into_owned())),
                );
            }
            Err(_) => {
                tracing::warn!(event_id = %event.event_id, header = name, "header name longer than an AMQP field name allows; header not published");
            }
        }
    }
    for trace_header in wire::TRACE_CONTEXT_HEADERS {
        if let Some(value) = event.headers.get(trace_header) {
            headers.insert(
                ShortString::from(trace_header),
                AMQPValue::LongString(LongString::from(value.as_str())),
            );
        }
    }
    headers
}
