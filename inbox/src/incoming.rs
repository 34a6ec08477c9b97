//! [`IncomingEvent`]: a CloudEvent as it arrives, from Kafka headers, AMQP
//! properties, Redis stream entry fields or a CloudEvents JSON line written
//! the way the relay writes them, and its typed decoding.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use outbox::EventType;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use outbox::wire::{self, TRACEPARENT_ATTRIBUTE, TRACESTATE_ATTRIBUTE};
pub use outbox::wire::{EVENT_VERSION_ATTRIBUTE, REPLAY_ATTRIBUTE};

use crate::error::DecodeError;

/// One received CloudEvent, binding-independent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingEvent {
    /// CloudEvents `id`.
    pub id: String,
    /// CloudEvents `type`.
    pub event_type: String,
    /// CloudEvents `source`.
    pub source: String,
    /// Every other attribute (`time`, `partitionkey`, `eventversion`,
    /// `traceparent`, ...), by name without prefix.
    pub attributes: BTreeMap<String, String>,
    /// The payload bytes.
    pub data: Vec<u8>,
}

impl IncomingEvent {
    /// Build from named attributes (without binding prefix) and a body.
    ///
    /// # Errors
    /// [`DecodeError::MissingAttribute`] when `id`, `type` or `source` is
    /// missing or empty.
    pub fn from_attributes(
        mut attributes: BTreeMap<String, String>,
        data: Vec<u8>,
    ) -> Result<Self, DecodeError> {
        let mut take = |attribute: &'static str| {
            attributes
                .remove(attribute)
                .filter(|value| !value.trim().is_empty())
                .ok_or(DecodeError::MissingAttribute { attribute })
        };
        let id = take(wire::ID_ATTRIBUTE)?;
        let event_type = take(wire::TYPE_ATTRIBUTE)?;
        let source = take(wire::SOURCE_ATTRIBUTE)?;
        Ok(IncomingEvent {
            id,
            event_type,
            source,
            attributes,
            data,
        })
    }

    /// Build from Kafka headers in the CloudEvents Kafka binding (binary
    /// mode): `ce_<attribute>` headers, `content-type` as `datacontenttype`,
    /// and the value as the payload. Plain
    /// W3C `traceparent` / `tracestate` headers stand in for missing
    /// `ce_traceparent` / `ce_tracestate`.
    ///
    /// # Errors
    /// As [`IncomingEvent::from_attributes`]; a non-UTF-8 `ce_` header is
    /// [`DecodeError::InvalidAttribute`].
    pub fn from_kafka<'h>(
        headers: impl IntoIterator<Item = (&'h str, Option<&'h [u8]>)>,
        value: &[u8],
    ) -> Result<Self, DecodeError> {
        let mut attributes = BTreeMap::new();
        let mut plain_trace_headers = Vec::new();
        for (name, bytes) in headers {
            let Some(attribute) = wire::attribute_of_kafka_header(name) else {
                if let Some(value) = plain_trace_header(name, bytes) {
                    plain_trace_headers.push((name.to_owned(), value));
                }
                continue;
            };
            let text = std::str::from_utf8(bytes.unwrap_or_default()).map_err(|_| {
                DecodeError::InvalidAttribute {
                    attribute: "ce_*",
                    reason: format!("header {name} is not UTF-8"),
                }
            })?;
            attributes.insert(attribute.to_owned(), text.to_owned());
        }
        stand_in_for_trace_attributes(&mut attributes, plain_trace_headers);
        IncomingEvent::from_attributes(attributes, value.to_vec())
    }

    /// Build from the fields of a Redis stream entry as the relay writes
    /// them (`docs/wire-format.md`): `ce_<attribute>` fields, `content-type`
    /// as `datacontenttype`, and the `data` field as the payload. Plain
    /// W3C `traceparent` / `tracestate` fields stand in for missing
    /// `ce_traceparent` / `ce_tracestate`; other fields are ignored.
    ///
    /// ```
    /// use outbox_inbox::IncomingEvent;
    ///
    /// let fields = [
    ///     ("ce_id", &b"0195f3a8-7d2c-7000-8000-000000000001"[..]),
    ///     ("ce_type", &b"order.created"[..]),
    ///     ("ce_source", &b"/orders"[..]),
    ///     ("ce_partitionkey", &b"o-7"[..]),
    ///     ("content-type", &b"application/json"[..]),
    ///     ("data", &br#"{"order_id":7}"#[..]),
    /// ];
    /// let event = IncomingEvent::from_redis(fields)?;
    /// assert_eq!(event.attributes["partitionkey"], "o-7");
    /// assert_eq!(event.data, br#"{"order_id":7}"#);
    /// # Ok::<(), outbox_inbox::DecodeError>(())
    /// ```
    ///
    /// # Errors
    /// As [`IncomingEvent::from_attributes`]; an entry without a `data`
    /// field is [`DecodeError::MissingAttribute`] (`data`), a non-UTF-8
    /// `ce_` field [`DecodeError::InvalidAttribute`].
    pub fn from_redis<'f>(
        fields: impl IntoIterator<Item = (&'f str, &'f [u8])>,
    ) -> Result<Self, DecodeError> {
        let mut attributes = BTreeMap::new();
        let mut plain_trace_fields = Vec::new();
        let mut data = None;
        for (name, bytes) in fields {
            if name == wire::REDIS_DATA_FIELD {
                data = Some(bytes);
                continue;
            }
            let Some(attribute) = wire::attribute_of_redis_field(name) else {
                if let Some(value) = plain_trace_header(name, Some(bytes)) {
                    plain_trace_fields.push((name.to_owned(), value));
                }
                continue;
            };
            let text = std::str::from_utf8(bytes).map_err(|_| DecodeError::InvalidAttribute {
                attribute: "ce_*",
                reason: format!("field {name} is not UTF-8"),
            })?;
            attributes.insert(attribute.to_owned(), text.to_owned());
        }
        stand_in_for_trace_attributes(&mut attributes, plain_trace_fields);
        let data = data.ok_or(DecodeError::MissingAttribute {
            attribute: wire::REDIS_DATA_FIELD,
        })?;
        IncomingEvent::from_attributes(attributes, data.to_vec())
    }

    /// Build from the headers and payload of a NATS message as the relay
    /// publishes it to JetStream (`docs/wire-format.md`): `ce-<attribute>`
    /// headers with percent-encoded values, `Content-Type` as
    /// `datacontenttype`, and the payload as the data. Header names match
    /// without regard to case. Plain W3C `traceparent` / `tracestate`
    /// headers stand in for missing `ce-traceparent` / `ce-tracestate`;
    /// other headers (`Nats-Msg-Id`, ...) are ignored.
    ///
    /// ```
    /// use outbox_inbox::IncomingEvent;
    ///
    /// let headers = [
    ///     ("Nats-Msg-Id", "0195f3a8-7d2c-7000-8000-000000000001"),
    ///     ("ce-id", "0195f3a8-7d2c-7000-8000-000000000001"),
    ///     ("ce-type", "order.created"),
    ///     ("ce-source", "/orders/%C3%A9"),
    ///     ("ce-partitionkey", "o-7"),
    ///     ("Content-Type", "application/json"),
    /// ];
    /// let event = IncomingEvent::from_nats(headers, br#"{"order_id":7}"#)?;
    /// assert_eq!(event.source, "/orders/é");
    /// assert_eq!(event.attributes["datacontenttype"], "application/json");
    /// assert_eq!(event.data, br#"{"order_id":7}"#);
    /// # Ok::<(), outbox_inbox::DecodeError>(())
    /// ```
    ///
    /// # Errors
    /// As [`IncomingEvent::from_attributes`]; a `ce-` header whose value is
    /// not percent-encoded UTF-8 is [`DecodeError::InvalidAttribute`].
    pub fn from_nats<'h>(
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
        payload: &[u8],
    ) -> Result<Self, DecodeError> {
        let mut attributes = BTreeMap::new();
        let mut plain_trace_headers = Vec::new();
        for (name, value) in headers {
            if name.eq_ignore_ascii_case(wire::NATS_CONTENT_TYPE_HEADER) {
                attributes.insert("datacontenttype".to_owned(), value.to_owned());
                continue;
            }
            let Some(attribute) = wire::attribute_of_nats_header(name) else {
                let lowered = name.to_ascii_lowercase();
                if let Some(value) = plain_trace_header(&lowered, Some(value.as_bytes())) {
                    plain_trace_headers.push((lowered, value));
                }
                continue;
            };
            let decoded = wire::percent_decode_header_value(value).ok_or_else(|| {
                DecodeError::InvalidAttribute {
                    attribute: "ce-*",
                    reason: format!("header {name} is not percent-encoded UTF-8"),
                }
            })?;
            attributes.insert(attribute.to_ascii_lowercase(), decoded);
        }
        stand_in_for_trace_attributes(&mut attributes, plain_trace_headers);
        IncomingEvent::from_attributes(attributes, payload.to_vec())
    }

    /// Build from AMQP headers with the `cloudEvents:` prefix and the body;
    /// `message_id` and `type` properties stand in for a missing `id` and
    /// `type`, plain W3C `traceparent` / `tracestate` headers for missing
    /// `cloudEvents:traceparent` / `cloudEvents:tracestate`.
    ///
    /// # Errors
    /// As [`IncomingEvent::from_attributes`].
    pub fn from_amqp(
        headers: impl IntoIterator<Item = (String, String)>,
        message_id: Option<&str>,
        message_type: Option<&str>,
        body: &[u8],
    ) -> Result<Self, DecodeError> {
        let mut attributes = BTreeMap::new();
        let mut plain_trace_headers = Vec::new();
        for (name, value) in headers {
            match wire::attribute_of_amqp_header(&name) {
                Some(attribute) => {
                    attributes.insert(attribute.to_owned(), value);
                }
                None if is_trace_attribute(&name) => plain_trace_headers.push((name, value)),
                None => {}
            }
        }
        stand_in_for_trace_attributes(&mut attributes, plain_trace_headers);
        if let Some(message_id) = message_id {
            attributes
                .entry(wire::ID_ATTRIBUTE.to_owned())
                .or_insert_with(|| message_id.to_owned());
        }
        if let Some(message_type) = message_type {
            attributes
                .entry(wire::TYPE_ATTRIBUTE.to_owned())
                .or_insert_with(|| message_type.to_owned());
        }
        IncomingEvent::from_attributes(attributes, body.to_vec())
    }

    /// Build from one event in the CloudEvents JSON event format
    /// (structured content mode), such as a line that `outbox-relay` writes
    /// with `--broker stdout`.
    ///
    /// Every member except `data` becomes an attribute: strings as they
    /// are, numbers and booleans as their JSON text; a `null` member is
    /// absent. `data` becomes the payload: its JSON text, byte for byte,
    /// when `datacontenttype` is absent or JSON (`application/json`,
    /// `…+json`), else the string it holds. An event without `data` has an
    /// empty payload.
    ///
    /// ```
    /// use outbox_inbox::IncomingEvent;
    ///
    /// let line = br#"{"specversion":"1.0","id":"0192","type":"order.created","source":"/orders","datacontenttype":"application/json","data":{"total_cents":1250},"eventversion":1}"#;
    /// let event = IncomingEvent::from_structured_json(line)?;
    /// assert_eq!(event.id, "0192");
    /// assert_eq!(event.data, br#"{"total_cents":1250}"#);
    /// assert_eq!(event.event_version()?, 1);
    /// # Ok::<(), outbox_inbox::DecodeError>(())
    /// ```
    ///
    /// # Errors
    /// [`DecodeError::NotStructured`] when `json` is not a JSON object, when
    /// an attribute is an object or an array, or when the data is binary
    /// (`data_base64`); otherwise as [`IncomingEvent::from_attributes`].
    pub fn from_structured_json(json: &[u8]) -> Result<Self, DecodeError> {
        let mut members: BTreeMap<String, Box<RawValue>> =
            serde_json::from_slice(json).map_err(|error| DecodeError::NotStructured {
                reason: format!("not a JSON object: {error}"),
            })?;
        if members.contains_key(wire::DATA_BASE64_MEMBER) {
            return Err(DecodeError::NotStructured {
                reason: "binary data (`data_base64`) is not supported; events carry JSON `data`"
                    .to_owned(),
            });
        }
        let data = members.remove(wire::DATA_MEMBER);
        let mut attributes = BTreeMap::new();
        for (name, raw) in members {
            let value: serde_json::Value =
                serde_json::from_str(raw.get()).map_err(|error| DecodeError::NotStructured {
                    reason: format!("member `{name}` is not JSON: {error}"),
                })?;
            let text = match value {
                serde_json::Value::Null => continue,
                serde_json::Value::String(text) => text,
                serde_json::Value::Number(number) => number.to_string(),
                serde_json::Value::Bool(flag) => flag.to_string(),
                serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
                    return Err(DecodeError::NotStructured {
                        reason: format!("attribute `{name}` is not a string, number or boolean"),
                    });
                }
            };
            attributes.insert(name, text);
        }
        let json_data = attributes
            .get(wire::DATACONTENTTYPE_ATTRIBUTE)
            .is_none_or(|content_type| is_json_content_type(content_type));
        let payload = match data {
            None => Vec::new(),
            Some(raw) if json_data => raw.get().as_bytes().to_vec(),
            Some(raw) => match serde_json::from_str::<serde_json::Value>(raw.get()) {
                Ok(serde_json::Value::String(text)) => text.into_bytes(),
                _ => raw.get().as_bytes().to_vec(),
            },
        };
        IncomingEvent::from_attributes(attributes, payload)
    }

    /// Whether this is a re-publication by `outbox-relay replay` (the
    /// [`REPLAY_ATTRIBUTE`] extension is `true`) rather than the event's
    /// original publication.
    ///
    /// A replay carries the original event id, so an [`crate::Inbox`] that
    /// already processed the event reports it as a duplicate. A consumer that
    /// replays on purpose, e.g. to rebuild a read model, can use this to
    /// keep replays away from side effects such as sending mail or charging
    /// a card:
    ///
    /// ```
    /// use outbox_inbox::IncomingEvent;
    ///
    /// let headers = [
    ///     ("ce_id", Some(&b"0195f3a8-7d2c-7000-8000-000000000001"[..])),
    ///     ("ce_type", Some(&b"order.created"[..])),
    ///     ("ce_source", Some(&b"/orders"[..])),
    ///     ("ce_outboxreplay", Some(&b"true"[..])),
    /// ];
    /// let event = IncomingEvent::from_kafka(headers, b"{}").unwrap();
    /// assert!(event.is_replay());
    /// ```
    pub fn is_replay(&self) -> bool {
        self.attributes
            .get(REPLAY_ATTRIBUTE)
            .is_some_and(|value| value.trim().eq_ignore_ascii_case(wire::REPLAY_MARK))
    }

    /// The W3C `traceparent` the message carries, if any.
    pub fn traceparent(&self) -> Option<&str> {
        self.attributes
            .get(TRACEPARENT_ATTRIBUTE)
            .map(String::as_str)
    }

    /// The payload's schema version (`eventversion`), 1 when absent.
    ///
    /// # Errors
    /// [`DecodeError::InvalidAttribute`] when it is not a positive integer.
    pub fn event_version(&self) -> Result<i32, DecodeError> {
        match self.attributes.get(EVENT_VERSION_ATTRIBUTE) {
            None => Ok(1),
            Some(text) => match text.trim().parse::<i32>() {
                Ok(version) if version >= 1 => Ok(version),
                _ => Err(DecodeError::InvalidAttribute {
                    attribute: EVENT_VERSION_ATTRIBUTE,
                    reason: format!("`{text}` is not a positive integer"),
                }),
            },
        }
    }

    /// Decode into `E`, accepting only `E::EVENT_TYPE` at exactly version
    /// `E::EVENT_VERSION`.
    ///
    /// `E` needs only its [`EventType`]: a type derived with just `type` and
    /// `version` decodes as well as the producer's own event type.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedType`], [`DecodeError::UnsupportedVersion`]
    /// or [`DecodeError::Payload`]; never panics.
    pub fn decode<E: EventType + DeserializeOwned>(&self) -> Result<E, DecodeError> {
        self.decode_versions::<E>(E::EVENT_VERSION..=E::EVENT_VERSION)
    }

    /// Decode into `E`, accepting the payload versions in `versions` (for a
    /// struct that reads several schema versions).
    ///
    /// # Errors
    /// As [`IncomingEvent::decode`].
    pub fn decode_versions<E: EventType + DeserializeOwned>(
        &self,
        versions: RangeInclusive<i32>,
    ) -> Result<E, DecodeError> {
        if self.event_type != E::EVENT_TYPE {
            return Err(DecodeError::UnexpectedType {
                expected: E::EVENT_TYPE.to_owned(),
                actual: self.event_type.clone(),
            });
        }
        let version = self.event_version()?;
        if !versions.contains(&version) {
            return Err(DecodeError::UnsupportedVersion {
                event_type: self.event_type.clone(),
                actual: version,
                supported: format!("{}..={}", versions.start(), versions.end()),
            });
        }
        serde_json::from_slice(&self.data).map_err(|error| DecodeError::Payload {
            event_type: self.event_type.clone(),
            reason: error.to_string(),
        })
    }
}

/// Whether `content_type` names JSON: `application/json`, `text/json` or a
/// `+json` suffix, parameters (`; charset=utf-8`) ignored.
fn is_json_content_type(content_type: &str) -> bool {
    let media_type = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    media_type == "application/json" || media_type == "text/json" || media_type.ends_with("+json")
}

fn is_trace_attribute(name: &str) -> bool {
    name == TRACEPARENT_ATTRIBUTE || name == TRACESTATE_ATTRIBUTE
}

/// The text of a plain (unprefixed) W3C trace header; `None` for any other
/// header, or one that is not UTF-8.
fn plain_trace_header(name: &str, bytes: Option<&[u8]>) -> Option<String> {
    if !is_trace_attribute(name) {
        return None;
    }
    std::str::from_utf8(bytes?).ok().map(str::to_owned)
}

/// Plain `traceparent` / `tracestate` headers fill the attributes of the
/// same name when the CloudEvents headers do not carry them. Both come
/// from one source, so a `tracestate` never pairs with another source's
/// `traceparent`.
fn stand_in_for_trace_attributes(
    attributes: &mut BTreeMap<String, String>,
    plain_trace_headers: Vec<(String, String)>,
) {
    let has_plain_traceparent = plain_trace_headers
        .iter()
        .any(|(name, _)| name == TRACEPARENT_ATTRIBUTE);
    if attributes.contains_key(TRACEPARENT_ATTRIBUTE) || !has_plain_traceparent {
        return;
    }
    attributes.remove(TRACESTATE_ATTRIBUTE);
    attributes.extend(plain_trace_headers);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_structured_line_keeps_its_attributes_and_data() {
        let line = br#"{"specversion":"1.0","id":"e-1","type":"order.created","source":"/orders","datacontenttype":"application/json","time":"2024-05-01T12:00:00Z","data":{"b": 1, "a": [true]},"aggregatetype":"order","eventversion":2,"partitionkey":"o-1","sampled":true,"subject":null}"#;
        let event = IncomingEvent::from_structured_json(line).expect("a valid event");
        assert_eq!(event.id, "e-1");
        assert_eq!(event.event_type, "order.created");
        assert_eq!(event.source, "/orders");
        assert_eq!(event.data, br#"{"b": 1, "a": [true]}"#);
        assert_eq!(event.event_version(), Ok(2));
        assert_eq!(event.attributes["specversion"], "1.0");
        assert_eq!(event.attributes["time"], "2024-05-01T12:00:00Z");
        assert_eq!(event.attributes["partitionkey"], "o-1");
        assert_eq!(event.attributes["sampled"], "true");
        assert!(!event.attributes.contains_key("subject"));
        assert!(!event.attributes.contains_key("data"));
    }

    #[test]
    fn text_data_is_the_string_it_holds() {
        let line = br#"{"id":"e-1","type":"note","source":"/n","datacontenttype":"text/plain","data":"hello"}"#;
        let event = IncomingEvent::from_structured_json(line).expect("a valid event");
        assert_eq!(event.data, b"hello");
        let no_data =
            IncomingEvent::from_structured_json(br#"{"id":"e-2","type":"note","source":"/n"}"#)
                .expect("a valid event");
        assert!(no_data.data.is_empty());
    }

    #[test]
    fn malformed_events_are_named() {
        let not_object = IncomingEvent::from_structured_json(b"[1, 2]");
        assert!(
            matches!(&not_object, Err(DecodeError::NotStructured { reason }) if reason.contains("not a JSON object")),
            "{not_object:?}"
        );
        let nested = IncomingEvent::from_structured_json(
            br#"{"id":"e-1","type":"t","source":"/s","extra":{"a":1}}"#,
        );
        assert!(
            matches!(&nested, Err(DecodeError::NotStructured { reason }) if reason.contains("`extra`")),
            "{nested:?}"
        );
        let binary = IncomingEvent::from_structured_json(
            br#"{"id":"e-1","type":"t","source":"/s","data_base64":"AAEC"}"#,
        );
        assert!(
            matches!(&binary, Err(DecodeError::NotStructured { reason }) if reason.contains("data_base64")),
            "{binary:?}"
        );
        let no_id = IncomingEvent::from_structured_json(br#"{"type":"t","source":"/s"}"#);
        assert_eq!(
            no_id,
            Err(DecodeError::MissingAttribute { attribute: "id" })
        );
    }

    const ID: &str = "0195f3a8-7d2c-7000-8000-000000000001";

    fn kafka(extra: Option<(&'static str, &'static [u8])>) -> IncomingEvent {
        let mut headers: Vec<(&str, Option<&[u8]>)> = vec![
            ("ce_id", Some(ID.as_bytes())),
            ("ce_type", Some(&b"order.created"[..])),
            ("ce_source", Some(&b"/orders"[..])),
        ];
        if let Some((name, value)) = extra {
            headers.push((name, Some(value)));
        }
        IncomingEvent::from_kafka(headers, b"{}").expect("valid event")
    }

    fn amqp(extra: Option<(&str, &str)>) -> IncomingEvent {
        let mut headers = vec![
            ("cloudEvents:source".to_owned(), "/orders".to_owned()),
            ("cloudEvents:specversion".to_owned(), "1.0".to_owned()),
        ];
        if let Some((name, value)) = extra {
            headers.push((name.to_owned(), value.to_owned()));
        }
        IncomingEvent::from_amqp(headers, Some(ID), Some("order.created"), b"{}")
            .expect("valid event")
    }

    #[test]
    fn a_replay_is_recognised_on_kafka() {
        assert!(kafka(Some(("ce_outboxreplay", &b"true"[..]))).is_replay());
        assert!(!kafka(None).is_replay());
        assert!(!kafka(Some(("ce_outboxreplay", &b"false"[..]))).is_replay());
        // Without the binding's prefix it is not the attribute.
        assert!(!kafka(Some(("outboxreplay", &b"true"[..]))).is_replay());
    }

    #[test]
    fn a_replay_is_recognised_on_amqp() {
        let replayed = amqp(Some(("cloudEvents:outboxreplay", "true")));
        assert!(replayed.is_replay());
        assert_eq!(replayed.id, ID);
        assert!(!amqp(None).is_replay());
        assert!(!amqp(Some(("cloudEvents:outboxreplay", "no"))).is_replay());
        assert!(!amqp(Some(("outboxreplay", "true"))).is_replay());
    }

    const CE_PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const PLAIN_PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn kafka_headers(headers: &[(&str, &str)]) -> IncomingEvent {
        let mut all = vec![("ce_id", "1"), ("ce_type", "t"), ("ce_source", "/s")];
        all.extend_from_slice(headers);
        IncomingEvent::from_kafka(
            all.iter()
                .map(|(name, value)| (*name, Some(value.as_bytes()))),
            b"{}",
        )
        .expect("decodes")
    }

    fn amqp_headers(headers: &[(&str, &str)]) -> IncomingEvent {
        let headers = [("cloudEvents:source", "/s")]
            .iter()
            .chain(headers)
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()));
        IncomingEvent::from_amqp(headers, Some("1"), Some("t"), b"{}").expect("decodes")
    }

    #[test]
    fn the_cloudevents_traceparent_wins_over_the_plain_header() {
        let incoming = kafka_headers(&[
            ("ce_traceparent", CE_PARENT),
            ("traceparent", PLAIN_PARENT),
            ("tracestate", "plain=1"),
        ]);
        assert_eq!(incoming.traceparent(), Some(CE_PARENT));
        assert_eq!(incoming.attributes.get("tracestate"), None);

        let incoming = amqp_headers(&[
            ("cloudEvents:traceparent", CE_PARENT),
            ("cloudEvents:tracestate", "ce=1"),
            ("traceparent", PLAIN_PARENT),
        ]);
        assert_eq!(incoming.traceparent(), Some(CE_PARENT));
        assert_eq!(
            incoming.attributes.get("tracestate").map(String::as_str),
            Some("ce=1")
        );
    }

    #[test]
    fn plain_trace_headers_stand_in_for_missing_attributes() {
        let incoming = kafka_headers(&[
            ("traceparent", PLAIN_PARENT),
            ("tracestate", "plain=1"),
            ("other", "x"),
        ]);
        assert_eq!(incoming.traceparent(), Some(PLAIN_PARENT));
        assert_eq!(
            incoming.attributes.get("tracestate").map(String::as_str),
            Some("plain=1")
        );
        assert!(!incoming.attributes.contains_key("other"));

        let incoming = amqp_headers(&[
            ("cloudEvents:tracestate", "ce=1"),
            ("traceparent", PLAIN_PARENT),
        ]);
        assert_eq!(incoming.traceparent(), Some(PLAIN_PARENT));
        assert_eq!(
            incoming.attributes.get("tracestate"),
            None,
            "a tracestate never pairs with another source's traceparent"
        );
    }

    /// A consumer's own type: its CloudEvents type and version, none of the
    /// producer's topic, source or aggregate, and no `Serialize`.
    #[derive(Debug, PartialEq, serde::Deserialize, outbox::Event)]
    #[event(type = "order.created", version = 2)]
    struct OrderCreated {
        order_id: i64,
    }

    #[test]
    fn a_consumer_only_type_decodes() {
        let line = br#"{"id":"e-1","type":"order.created","source":"/orders","eventversion":2,"data":{"order_id":7,"total_cents":1250}}"#;
        let event = IncomingEvent::from_structured_json(line).expect("a valid event");
        assert_eq!(
            event.decode::<OrderCreated>(),
            Ok(OrderCreated { order_id: 7 })
        );

        let version_1 =
            br#"{"id":"e-2","type":"order.created","source":"/orders","data":{"order_id":8}}"#;
        let version_1 = IncomingEvent::from_structured_json(version_1).expect("a valid event");
        assert!(
            matches!(
                version_1.decode::<OrderCreated>(),
                Err(DecodeError::UnsupportedVersion { actual: 1, .. })
            ),
            "only version 2 is accepted"
        );
        assert_eq!(
            version_1.decode_versions::<OrderCreated>(1..=2),
            Ok(OrderCreated { order_id: 8 })
        );

        let mut other = kafka(None);
        other.event_type = "order.cancelled".to_owned();
        assert!(matches!(
            other.decode::<OrderCreated>(),
            Err(DecodeError::UnexpectedType { .. })
        ));
    }

    #[test]
    fn a_redis_entry_reads_as_the_relay_writes_it() {
        let fields: [(&str, &[u8]); 8] = [
            ("ce_id", b"e-1"),
            ("ce_type", b"order.created"),
            ("ce_source", b"/orders"),
            ("ce_partitionkey", b"o-1"),
            ("ce_tenant", b"acme"),
            ("content-type", b"application/json"),
            ("data", br#"{"order_id":1}"#),
            ("traceparent", PLAIN_PARENT.as_bytes()),
        ];
        let event = IncomingEvent::from_redis(fields).expect("decodes");
        assert_eq!(event.id, "e-1");
        assert_eq!(event.attributes["tenant"], "acme");
        assert_eq!(event.attributes["datacontenttype"], "application/json");
        assert_eq!(event.traceparent(), Some(PLAIN_PARENT));
        assert_eq!(event.data, br#"{"order_id":1}"#);
        assert!(!event.attributes.contains_key("data"));

        let no_data =
            IncomingEvent::from_redis(fields.iter().copied().filter(|(n, _)| *n != "data"));
        assert_eq!(
            no_data,
            Err(DecodeError::MissingAttribute { attribute: "data" })
        );
        let no_id =
            IncomingEvent::from_redis(fields.iter().copied().filter(|(n, _)| *n != "ce_id"));
        assert_eq!(
            no_id,
            Err(DecodeError::MissingAttribute { attribute: "id" })
        );
    }

    #[test]
    fn reads_nats_headers() {
        let headers = [
            ("Nats-Msg-Id", "e-1"),
            ("ce-id", "e-1"),
            ("CE-Type", "order.created"),
            ("ce-source", "/orders/%C3%A9"),
            ("ce-tenant", "a%20b"),
            ("content-type", "application/json"),
            ("traceparent", PLAIN_PARENT),
        ];
        let event = IncomingEvent::from_nats(headers, br#"{"order_id":1}"#).expect("decodes");
        assert_eq!(event.id, "e-1");
        assert_eq!(event.event_type, "order.created");
        assert_eq!(event.source, "/orders/é");
        assert_eq!(event.attributes["tenant"], "a b");
        assert_eq!(event.attributes["datacontenttype"], "application/json");
        assert_eq!(event.traceparent(), Some(PLAIN_PARENT));
        assert!(!event.attributes.contains_key("nats-msg-id"));

        let bad_escape =
            IncomingEvent::from_nats(headers.iter().copied().chain([("ce-tenant", "%zz")]), b"{}");
        assert!(matches!(
            bad_escape,
            Err(DecodeError::InvalidAttribute { .. })
        ));
        let no_id = IncomingEvent::from_nats(
            headers.iter().copied().filter(|(n, _)| *n != "ce-id"),
            b"{}",
        );
        assert_eq!(
            no_id,
            Err(DecodeError::MissingAttribute { attribute: "id" })
        );
    }

    #[test]
    fn no_trace_headers_no_traceparent() {
        assert_eq!(
            kafka_headers(&[("tracestate", "plain=1")]).traceparent(),
            None
        );
        assert_eq!(amqp_headers(&[]).traceparent(), None);
    }
}
