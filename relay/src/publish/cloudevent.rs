//! The CloudEvents view of an [`OutboundEvent`], built once and shared by
//! every binding.
//!
//! The event model is the `cloudevents-sdk` crate's [`Event`]. Its protocol
//! bindings are not used: the SDK's Kafka binding pins another rdkafka
//! version and it has no AMQP binding. Each publisher maps the attributes
//! listed by [`CloudEvent::attributes`] to its own headers instead:
//! `ce_<name>` on Kafka, `cloudEvents:<name>` on RabbitMQ, and the JSON
//! event format (structured mode) on stdout. Every name comes from
//! [`outbox::wire`], which the inbox reads with.
//!
//! Attributes (`docs/wire-format.md`):
//!
//! | attribute | value |
//! |---|---|
//! | `specversion` | `1.0` |
//! | `id` | `event_id` |
//! | `source` | `source` |
//! | `type` | `event_type` |
//! | `time` | `created_at`, RFC 3339 in UTC |
//! | `datacontenttype` | `application/json` |
//! | `aggregatetype` | `aggregate_type` (extension) |
//! | `eventversion` | `event_version` (extension, integer) |
//! | `partitionkey` | `aggregate_id` (extension of the CloudEvents Partitioning spec) |
//! | `outboxreplay` | `true`, only on a re-publication by `outbox-relay replay` (extension) |
//! | every entry of `headers` | extension attributes, unless the name is invalid or taken |

use std::borrow::Cow;

use chrono::SecondsFormat;
use cloudevents::event::{ExtensionValue, SpecVersion};
use cloudevents::{AttributesReader, Event, EventBuilder, EventBuilderV10};
use outbox::wire;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::event::OutboundEvent;
use crate::publish::PublishFailure;

// The attributes and values of the wire format, defined once in
// `outbox::wire`: `aggregatetype`, `eventversion`, `partitionkey` and
// `outboxreplay` (a re-publication by `outbox-relay replay`, absent on the
// relay's own publications).
use outbox::wire::{
    AGGREGATE_TYPE_ATTRIBUTE as EXTENSION_AGGREGATE_TYPE, CONTENT_TYPE_JSON,
    EVENT_VERSION_ATTRIBUTE as EXTENSION_EVENT_VERSION,
    PARTITION_KEY_ATTRIBUTE as EXTENSION_PARTITION_KEY, REPLAY_ATTRIBUTE as EXTENSION_REPLAY,
    REPLAY_MARK, SPEC_VERSION, is_valid_attribute_name,
};

/// Whether a `headers` entry may not become an extension attribute: the
/// CloudEvents context attributes, the members reserved by the JSON event
/// format, and the extensions the relay sets itself.
fn is_reserved_name(name: &str) -> bool {
    wire::CONTEXT_ATTRIBUTE_NAMES.contains(&name) || wire::RELAY_EXTENSION_NAMES.contains(&name)
}

/// The CloudEvents attributes of one outbox event, without its data.
///
/// Built once per publication with [`CloudEvent::from_outbound`]; the
/// bindings read [`CloudEvent::attributes`] (binary content mode) or write
/// it with its data through [`CloudEvent::structured`] (structured content
/// mode).
#[derive(Debug, Clone, PartialEq)]
pub struct CloudEvent {
    event: Event,
}

impl CloudEvent {
    /// Build the attributes of `outbound`.
    ///
    /// An entry of `headers` whose name is not a valid CloudEvents attribute
    /// name (lowercase ASCII letters and digits) or that collides with a
    /// context attribute or one of the relay's own extensions is skipped with
    /// a warning; it never fails the event.
    ///
    /// Fails with [`PublishFailure::Rejected`] only when the event cannot be
    /// a CloudEvent at all: an empty `source` or `event_type`.
    pub fn from_outbound(outbound: &OutboundEvent) -> Result<Self, PublishFailure> {
        if outbound.source.is_empty() {
            return Err(PublishFailure::Rejected(
                "not a valid cloudevent: source is empty".to_owned(),
            ));
        }
        if outbound.event_type.is_empty() {
            return Err(PublishFailure::Rejected(
                "not a valid cloudevent: event_type is empty".to_owned(),
            ));
        }
        let mut builder = EventBuilderV10::new()
            .id(outbound.event_id.to_string())
            .source(outbound.source.as_str())
            .ty(outbound.event_type.as_str())
            .time(outbound.created_at)
            .extension(EXTENSION_AGGREGATE_TYPE, outbound.aggregate_type.as_str())
            .extension(EXTENSION_EVENT_VERSION, i64::from(outbound.event_version))
            .extension(EXTENSION_PARTITION_KEY, outbound.aggregate_id.as_str());
        if outbound.replay {
            builder = builder.extension(EXTENSION_REPLAY, REPLAY_MARK);
        }
        for (name, value) in &outbound.headers {
            if !is_valid_attribute_name(name) {
                tracing::warn!(
                    event_id = %outbound.event_id,
                    header = %name,
                    "header name is not a valid cloudevents attribute name; header not published"
                );
                continue;
            }
            if is_reserved_name(name) {
                tracing::warn!(
                    event_id = %outbound.event_id,
                    header = %name,
                    "header name collides with a cloudevents attribute; header not published"
                );
                continue;
            }
            builder = builder.extension(name, value.as_str());
        }
        let mut event = builder.build().map_err(|error| {
            PublishFailure::Rejected(format!("not a valid cloudevent: {error}"))
        })?;
        // `datacontenttype` without data: the bindings carry the payload
        // bytes themselves, only the structured mode attaches the data.
        cloudevents::AttributesWriter::set_datacontenttype(&mut event, Some(CONTENT_TYPE_JSON));
        Ok(Self { event })
    }

    /// The SDK event: every attribute, no data.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The `id` attribute (the outbox `event_id`).
    pub fn id(&self) -> &str {
        self.event.id()
    }

    /// The `time` attribute as RFC 3339 in UTC (`2024-05-01T12:00:00.123456Z`),
    /// as every binding writes it.
    pub fn time_rfc3339(&self) -> Option<String> {
        self.event
            .time()
            .map(|time| time.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }

    /// Every attribute as `(name, value)` text, as the binary content mode
    /// of the bindings carries them: the context attributes first
    /// (`specversion`, `id`, `source`, `type`, `time`, `datacontenttype`),
    /// then the extensions sorted by name. Values held as text are
    /// borrowed, not copied.
    pub fn attributes(&self) -> Vec<(&str, Cow<'_, str>)> {
        let event = &self.event;
        let mut attributes: Vec<(&str, Cow<'_, str>)> =
            Vec::with_capacity(6 + event.iter_extensions().count());
        let spec_version = match event.specversion() {
            SpecVersion::V10 => Cow::Borrowed(SPEC_VERSION),
            other => Cow::Owned(other.to_string()),
        };
        attributes.push((wire::SPECVERSION_ATTRIBUTE, spec_version));
        attributes.push((wire::ID_ATTRIBUTE, Cow::Borrowed(event.id())));
        attributes.push((
            wire::SOURCE_ATTRIBUTE,
            Cow::Borrowed(event.source().as_str()),
        ));
        attributes.push((wire::TYPE_ATTRIBUTE, Cow::Borrowed(event.ty())));
        if let Some(time) = self.time_rfc3339() {
            attributes.push((wire::TIME_ATTRIBUTE, Cow::Owned(time)));
        }
        if let Some(content_type) = event.datacontenttype() {
            attributes.push((wire::DATACONTENTTYPE_ATTRIBUTE, Cow::Borrowed(content_type)));
        }
        attributes.extend(self.extensions());
        attributes
    }

    /// The extension attributes as `(name, value)` text, sorted by name.
    pub fn extensions(&self) -> Vec<(&str, Cow<'_, str>)> {
        let mut extensions: Vec<(&str, Cow<'_, str>)> = self
            .event
            .iter_extensions()
            .map(|(name, value)| (name, extension_text(value)))
            .collect();
        extensions.sort_unstable_by(|left, right| left.0.cmp(right.0));
        extensions
    }

    /// The value of extension `name`, as text.
    pub fn extension(&self, name: &str) -> Option<String> {
        self.event
            .extension(name)
            .map(|value| extension_text(value).into_owned())
    }

    /// The full event for the structured content mode: these attributes plus
    /// `payload` as JSON `data`, passed through as it is: it is checked to
    /// be JSON, never parsed into a tree or copied.
    ///
    /// Fails with [`PublishFailure::Rejected`] when `payload` is not JSON.
    pub fn structured<'a>(
        &'a self,
        payload: &'a str,
    ) -> Result<StructuredEvent<'a>, PublishFailure> {
        let data: &RawValue = serde_json::from_str(payload).map_err(|error| {
            PublishFailure::Rejected(format!("payload is not valid JSON: {error}"))
        })?;
        Ok(StructuredEvent {
            attributes: &self.event,
            data,
        })
    }
}

/// An event in the JSON event format (structured content mode), as
/// [`CloudEvent::structured`] builds it: serialize it with `serde_json`.
#[derive(Debug, Serialize)]
pub struct StructuredEvent<'a> {
    #[serde(flatten)]
    attributes: &'a Event,
    data: &'a RawValue,
}

fn extension_text(value: &ExtensionValue) -> Cow<'_, str> {
    match value {
        ExtensionValue::String(text) => Cow::Borrowed(text),
        ExtensionValue::Boolean(flag) => Cow::Owned(flag.to_string()),
        ExtensionValue::Integer(number) => Cow::Owned(number.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::{TimeZone, Utc};
    use uuid::Uuid;

    use super::*;

    fn outbound() -> OutboundEvent {
        OutboundEvent {
            id: 7,
            event_id: Uuid::parse_str("0190a5a4-8f7e-7a3b-9c1d-2e3f4a5b6c7d").expect("valid uuid"),
            event_type: "order.created".to_owned(),
            event_version: 2,
            source: "/orders".to_owned(),
            aggregate_type: "order".to_owned(),
            aggregate_id: "order-42".to_owned(),
            topic: "orders".to_owned(),
            payload: r#"{"total":12.5,"items":[1,2]}"#.into(),
            headers: BTreeMap::from([
                (
                    "traceparent".to_owned(),
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
                ),
                ("tenant".to_owned(), "acme".to_owned()),
            ]),
            created_at: Utc
                .with_ymd_and_hms(2024, 5, 1, 12, 0, 0)
                .single()
                .expect("valid time")
                + chrono::Duration::microseconds(123_456),
            attempts: 0,
            replay: false,
        }
    }

    #[test]
    fn attributes_follow_the_contract() {
        let cloud_event = CloudEvent::from_outbound(&outbound()).expect("valid event");
        let attributes: Vec<(&str, String)> = cloud_event
            .attributes()
            .into_iter()
            .map(|(name, value)| (name, value.into_owned()))
            .collect();
        let expected = vec![
            ("specversion", "1.0".to_owned()),
            ("id", "0190a5a4-8f7e-7a3b-9c1d-2e3f4a5b6c7d".to_owned()),
            ("source", "/orders".to_owned()),
            ("type", "order.created".to_owned()),
            ("time", "2024-05-01T12:00:00.123456Z".to_owned()),
            ("datacontenttype", "application/json".to_owned()),
            ("aggregatetype", "order".to_owned()),
            ("eventversion", "2".to_owned()),
            ("partitionkey", "order-42".to_owned()),
            ("tenant", "acme".to_owned()),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
            ),
        ];
        assert_eq!(attributes, expected);
        assert_eq!(cloud_event.id(), "0190a5a4-8f7e-7a3b-9c1d-2e3f4a5b6c7d");
        assert_eq!(
            cloud_event.extension("partitionkey").as_deref(),
            Some("order-42")
        );
        assert!(cloud_event.event().data().is_none());
    }

    #[test]
    fn invalid_and_colliding_header_names_are_skipped() {
        let mut event = outbound();
        event.headers = BTreeMap::from([
            ("Trace-Parent".to_owned(), "x".to_owned()),
            ("with_underscore".to_owned(), "x".to_owned()),
            (String::new(), "x".to_owned()),
            ("id".to_owned(), "forged".to_owned()),
            ("type".to_owned(), "forged".to_owned()),
            ("data".to_owned(), "forged".to_owned()),
            ("partitionkey".to_owned(), "forged".to_owned()),
            ("region9".to_owned(), "eu".to_owned()),
        ]);
        let cloud_event = CloudEvent::from_outbound(&event).expect("headers never fail the event");
        let names: Vec<&str> = cloud_event
            .extensions()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            names,
            vec!["aggregatetype", "eventversion", "partitionkey", "region9"]
        );
        assert_eq!(cloud_event.id(), event.event_id.to_string());
        assert_eq!(
            cloud_event.extension("partitionkey").as_deref(),
            Some("order-42")
        );
    }

    #[test]
    fn only_a_replay_carries_the_replay_mark() {
        let mut event = outbound();
        // A producer's header cannot pass an event off as a replay.
        event
            .headers
            .insert(EXTENSION_REPLAY.to_owned(), "true".to_owned());
        let published = CloudEvent::from_outbound(&event).expect("valid event");
        assert_eq!(published.extension(EXTENSION_REPLAY), None);

        event.replay = true;
        let replayed = CloudEvent::from_outbound(&event).expect("valid event");
        assert_eq!(
            replayed.extension(EXTENSION_REPLAY).as_deref(),
            Some(REPLAY_MARK)
        );
        assert_eq!(replayed.id(), event.event_id.to_string());
        assert!(
            replayed
                .attributes()
                .contains(&("outboxreplay", Cow::Borrowed("true")))
        );
    }

    #[test]
    fn empty_source_or_type_is_rejected() {
        let mut event = outbound();
        event.source = String::new();
        assert!(matches!(
            CloudEvent::from_outbound(&event),
            Err(PublishFailure::Rejected(message)) if message.contains("source")
        ));
        let mut event = outbound();
        event.event_type = String::new();
        assert!(matches!(
            CloudEvent::from_outbound(&event),
            Err(PublishFailure::Rejected(message)) if message.contains("event_type")
        ));
    }

    #[test]
    fn structured_event_carries_the_payload_as_json() {
        let event = outbound();
        let structured = CloudEvent::from_outbound(&event)
            .expect("valid event")
            .structured(&event.payload)
            .expect("payload is JSON")
            .serialize(serde_json::value::Serializer)
            .expect("event serializes");
        let json = structured;
        assert_eq!(
            json["data"],
            serde_json::json!({"total": 12.5, "items": [1, 2]})
        );
        assert_eq!(json["datacontenttype"], "application/json");
        assert_eq!(json["specversion"], "1.0");
        assert_eq!(json["eventversion"], 2);
        assert_eq!(json["time"], "2024-05-01T12:00:00.123456Z");
    }

    #[test]
    fn invalid_json_payload_is_rejected_in_structured_mode() {
        let cloud_event = CloudEvent::from_outbound(&outbound()).expect("valid event");
        assert!(matches!(
            cloud_event.structured("{not json"),
            Err(PublishFailure::Rejected(message)) if message.contains("JSON")
        ));
    }

    #[test]
    fn attribute_names() {
        assert!(is_valid_attribute_name("traceparent"));
        assert!(is_valid_attribute_name("abc123"));
        assert!(!is_valid_attribute_name(""));
        assert!(!is_valid_attribute_name("Abc"));
        assert!(!is_valid_attribute_name("a-b"));
        assert!(!is_valid_attribute_name("a_b"));
        assert!(!is_valid_attribute_name("é"));
    }
}
