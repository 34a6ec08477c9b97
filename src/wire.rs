//! The names of the wire format: how an outbox event travels as a
//! CloudEvent, written by `outbox-relay` and read by `outbox-inbox`.
//!
//! Both sides take every attribute name, header prefix and fixed value from
//! here, so the writer and the reader cannot drift apart. The format itself
//! is described in `docs/wire-format.md` of the repository:
//!
//! * **Kafka** (CloudEvents Kafka binding, binary content mode): each
//!   attribute is a header [`KAFKA_HEADER_PREFIX`]`<name>` (`ce_id`,
//!   `ce_type`, ...), except `datacontenttype`, which is the
//!   [`KAFKA_CONTENT_TYPE_HEADER`] header; the payload is the value and the
//!   aggregate id the key.
//! * **RabbitMQ** (CloudEvents AMQP binding, binary content mode): each
//!   attribute is a header [`AMQP_HEADER_PREFIX`]`<name>`
//!   (`cloudEvents:id`, ...); the `message_id` and `type` properties repeat
//!   `id` and `type`.
//! * **Redis Streams**: one stream entry per event, one field per
//!   attribute, named as Kafka's headers ([`REDIS_FIELD_PREFIX`]`<name>`,
//!   `ce_id`, ...), except `datacontenttype`, which is the
//!   [`REDIS_CONTENT_TYPE_FIELD`] field; the payload bytes are the
//!   [`REDIS_DATA_FIELD`] field. A consumer reads the event id from `ce_id`
//!   without parsing JSON.
//! * **NATS JetStream** (CloudEvents NATS binding, binary content mode):
//!   each attribute is a header [`NATS_HEADER_PREFIX`]`<name>` (`ce-id`,
//!   ...), its value percent-encoded ([`percent_encode_header_value`]),
//!   except `datacontenttype`, which is the [`NATS_CONTENT_TYPE_HEADER`]
//!   header; [`NATS_MSG_ID_HEADER`] carries the event id, so the stream
//!   drops a second copy within its duplicate window.
//! * **stdout** (JSON event format, structured content mode): each
//!   attribute is a member of one JSON object per line, the payload is
//!   [`DATA_MEMBER`].
//!
//! The W3C trace context headers of an event ([`TRACE_CONTEXT_HEADERS`])
//! travel as extension attributes and, on Kafka and RabbitMQ, also as
//! plain headers (Redis: fields) under their own names, for consumers that know nothing
//! of CloudEvents.
//!
//! ```
//! use outbox::wire;
//!
//! assert_eq!(wire::kafka_header_name(wire::ID_ATTRIBUTE), "ce_id");
//! assert_eq!(wire::amqp_header_name(wire::REPLAY_ATTRIBUTE), "cloudEvents:outboxreplay");
//! assert_eq!(wire::attribute_of_kafka_header("ce_eventversion"), Some(wire::EVENT_VERSION_ATTRIBUTE));
//! assert_eq!(wire::attribute_of_amqp_header("traceparent"), None);
//! ```

/// The CloudEvents `specversion` of every event.
pub const SPEC_VERSION: &str = "1.0";

/// The `datacontenttype` of every event: the payload is JSON.
pub const CONTENT_TYPE_JSON: &str = "application/json";

/// Context attribute: the CloudEvents spec version, [`SPEC_VERSION`].
pub const SPECVERSION_ATTRIBUTE: &str = "specversion";

/// Context attribute: the event id (`outbox_events.event_id`).
pub const ID_ATTRIBUTE: &str = "id";

/// Context attribute: the producer (`outbox_events.source`).
pub const SOURCE_ATTRIBUTE: &str = "source";

/// Context attribute: the event type (`outbox_events.event_type`).
pub const TYPE_ATTRIBUTE: &str = "type";

/// Context attribute: when the event was enqueued, RFC 3339 in UTC.
pub const TIME_ATTRIBUTE: &str = "time";

/// Context attribute: the payload's media type, [`CONTENT_TYPE_JSON`].
pub const DATACONTENTTYPE_ATTRIBUTE: &str = "datacontenttype";

/// Context attribute the relay never sets; reserved.
pub const DATASCHEMA_ATTRIBUTE: &str = "dataschema";

/// Context attribute the relay never sets; reserved.
pub const SUBJECT_ATTRIBUTE: &str = "subject";

/// Extension attribute: the aggregate type (`outbox_events.aggregate_type`).
pub const AGGREGATE_TYPE_ATTRIBUTE: &str = "aggregatetype";

/// Extension attribute: the payload's schema version
/// (`outbox_events.event_version`), an integer; 1 when absent.
pub const EVENT_VERSION_ATTRIBUTE: &str = "eventversion";

/// Extension attribute of the CloudEvents Partitioning extension: the
/// aggregate id (`outbox_events.aggregate_id`).
pub const PARTITION_KEY_ATTRIBUTE: &str = "partitionkey";

/// Extension attribute marking a re-publication by `outbox-relay replay`,
/// with the value [`REPLAY_MARK`]; absent on the relay's own publications.
pub const REPLAY_ATTRIBUTE: &str = "outboxreplay";

/// The value of [`REPLAY_ATTRIBUTE`] on a replayed event.
pub const REPLAY_MARK: &str = "true";

/// Extension attribute, and plain header, carrying the W3C `traceparent`
/// of the span that enqueued the event.
pub const TRACEPARENT_ATTRIBUTE: &str = "traceparent";

/// Extension attribute, and plain header, carrying the W3C `tracestate`
/// that goes with [`TRACEPARENT_ATTRIBUTE`].
pub const TRACESTATE_ATTRIBUTE: &str = "tracestate";

/// The event headers that are also sent as plain broker headers under
/// their own names: the W3C trace context.
pub const TRACE_CONTEXT_HEADERS: [&str; 2] = [TRACEPARENT_ATTRIBUTE, TRACESTATE_ATTRIBUTE];

/// Member of the JSON event format holding the payload.
pub const DATA_MEMBER: &str = "data";

/// Member of the JSON event format holding binary data, base64-encoded;
/// outbox events never use it.
pub const DATA_BASE64_MEMBER: &str = "data_base64";

/// Names an entry of an event's `headers` can never take: the CloudEvents
/// context attributes and the members the JSON event format reserves. The
/// writer refuses such a header.
pub const CONTEXT_ATTRIBUTE_NAMES: &[&str] = &[
    SPECVERSION_ATTRIBUTE,
    ID_ATTRIBUTE,
    SOURCE_ATTRIBUTE,
    TYPE_ATTRIBUTE,
    TIME_ATTRIBUTE,
    DATACONTENTTYPE_ATTRIBUTE,
    DATASCHEMA_ATTRIBUTE,
    SUBJECT_ATTRIBUTE,
    DATA_MEMBER,
    DATA_BASE64_MEMBER,
];

/// The extension attributes the relay sets itself; a header of the same
/// name is not published (the relay skips it with a warning).
pub const RELAY_EXTENSION_NAMES: &[&str] = &[
    AGGREGATE_TYPE_ATTRIBUTE,
    EVENT_VERSION_ATTRIBUTE,
    PARTITION_KEY_ATTRIBUTE,
    REPLAY_ATTRIBUTE,
];

/// Prefix of a CloudEvents attribute in a Kafka header name.
pub const KAFKA_HEADER_PREFIX: &str = "ce_";

/// The Kafka header that carries `datacontenttype`.
pub const KAFKA_CONTENT_TYPE_HEADER: &str = "content-type";

/// Prefix of a CloudEvents attribute in an AMQP header name.
pub const AMQP_HEADER_PREFIX: &str = "cloudEvents:";

/// The other prefix the CloudEvents AMQP binding allows (for JMS clients,
/// whose property names cannot hold a `:`); accepted on read, never
/// written.
pub const AMQP_HEADER_PREFIX_JMS: &str = "cloudEvents_";

/// Prefix of a CloudEvents attribute in a Redis stream entry's field name,
/// as in a Kafka header name.
pub const REDIS_FIELD_PREFIX: &str = KAFKA_HEADER_PREFIX;

/// The Redis stream entry field that carries `datacontenttype`.
pub const REDIS_CONTENT_TYPE_FIELD: &str = KAFKA_CONTENT_TYPE_HEADER;

/// The Redis stream entry field that carries the payload bytes.
pub const REDIS_DATA_FIELD: &str = DATA_MEMBER;

/// The Redis stream entry field name of `attribute`: `ce_<attribute>`.
///
/// ```
/// assert_eq!(outbox::wire::redis_field_name("id"), "ce_id");
/// ```
pub fn redis_field_name(attribute: &str) -> String {
    kafka_header_name(attribute)
}

/// The attribute a Redis stream entry field carries, if it carries one:
/// `ce_<name>` gives `<name>`, [`REDIS_CONTENT_TYPE_FIELD`] gives
/// `datacontenttype`; [`REDIS_DATA_FIELD`] and plain fields give `None`.
///
/// ```
/// use outbox::wire;
///
/// assert_eq!(wire::attribute_of_redis_field("ce_type"), Some("type"));
/// assert_eq!(wire::attribute_of_redis_field("content-type"), Some("datacontenttype"));
/// assert_eq!(wire::attribute_of_redis_field("data"), None);
/// ```
pub fn attribute_of_redis_field(field: &str) -> Option<&str> {
    attribute_of_kafka_header(field)
}

/// Prefix of a CloudEvents attribute in a NATS header name.
pub const NATS_HEADER_PREFIX: &str = "ce-";

/// The NATS header that carries `datacontenttype`.
pub const NATS_CONTENT_TYPE_HEADER: &str = "Content-Type";

/// The NATS header JetStream deduplicates on: the event id.
pub const NATS_MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// The NATS header name of `attribute`: `ce-<attribute>`.
///
/// ```
/// assert_eq!(outbox::wire::nats_header_name("id"), "ce-id");
/// ```
pub fn nats_header_name(attribute: &str) -> String {
    format!("{NATS_HEADER_PREFIX}{attribute}")
}

/// The attribute a NATS header carries, if it carries one: `ce-<name>`
/// gives `<name>` (header names are case-insensitive), and
/// [`NATS_CONTENT_TYPE_HEADER`] gives `datacontenttype`.
///
/// ```
/// use outbox::wire;
///
/// assert_eq!(wire::attribute_of_nats_header("ce-type"), Some("type"));
/// assert_eq!(wire::attribute_of_nats_header("content-type"), Some("datacontenttype"));
/// assert_eq!(wire::attribute_of_nats_header("Nats-Msg-Id"), None);
/// ```
pub fn attribute_of_nats_header(header: &str) -> Option<&str> {
    if header.eq_ignore_ascii_case(NATS_CONTENT_TYPE_HEADER) {
        return Some(DATACONTENTTYPE_ATTRIBUTE);
    }
    let prefix = header.get(..NATS_HEADER_PREFIX.len())?;
    prefix
        .eq_ignore_ascii_case(NATS_HEADER_PREFIX)
        .then(|| &header[NATS_HEADER_PREFIX.len()..])
}

/// A header value as the CloudEvents NATS (and HTTP) binding writes it:
/// every byte of its UTF-8 outside the printable ASCII range, and space,
/// `"` and `%`, as `%XX`.
///
/// ```
/// use outbox::wire::{percent_decode_header_value, percent_encode_header_value};
///
/// assert_eq!(percent_encode_header_value("/orders"), "/orders");
/// assert_eq!(percent_encode_header_value("a b%\"é"), "a%20b%25%22%C3%A9");
/// assert_eq!(percent_decode_header_value("a%20b%25%22%C3%A9").as_deref(), Some("a b%\"é"));
/// assert_eq!(percent_decode_header_value("%+1"), None);
/// ```
pub fn percent_encode_header_value(value: &str) -> String {
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if (0x21..=0x7e).contains(&byte) && byte != b'"' && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push('%');
            encoded.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
            encoded.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
        }
    }
    encoded
}

/// The value [`percent_encode_header_value`] encoded; `None` for a `%` not
/// followed by two hex digits, or bytes that are not UTF-8.
pub fn percent_decode_header_value(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = value.get(index + 1..index + 3)?;
            // `from_str_radix` would take a sign: "%+1" is not an escape.
            if !hex.bytes().all(|digit| digit.is_ascii_hexdigit()) {
                return None;
            }
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

const HEX_DIGITS: &[u8; 16] = b"0123456789ABCDEF";

/// The Kafka header name of `attribute`: `ce_<attribute>`.
pub fn kafka_header_name(attribute: &str) -> String {
    let mut name = String::with_capacity(KAFKA_HEADER_PREFIX.len() + attribute.len());
    write_kafka_header_name(&mut name, attribute);
    name
}

/// Write the Kafka header name of `attribute` into `name`, replacing what
/// it held: one buffer can serve every header of a record.
///
/// ```
/// let mut name = String::new();
/// outbox::wire::write_kafka_header_name(&mut name, "id");
/// assert_eq!(name, "ce_id");
/// outbox::wire::write_kafka_header_name(&mut name, "type");
/// assert_eq!(name, "ce_type");
/// ```
pub fn write_kafka_header_name(name: &mut String, attribute: &str) {
    name.clear();
    name.push_str(KAFKA_HEADER_PREFIX);
    name.push_str(attribute);
}

/// The AMQP header name of `attribute`: `cloudEvents:<attribute>`.
pub fn amqp_header_name(attribute: &str) -> String {
    format!("{AMQP_HEADER_PREFIX}{attribute}")
}

/// The attribute a Kafka header carries, if it carries one: `ce_<name>`
/// gives `<name>`, [`KAFKA_CONTENT_TYPE_HEADER`] gives `datacontenttype`.
pub fn attribute_of_kafka_header(header: &str) -> Option<&str> {
    if header == KAFKA_CONTENT_TYPE_HEADER {
        return Some(DATACONTENTTYPE_ATTRIBUTE);
    }
    header.strip_prefix(KAFKA_HEADER_PREFIX)
}

/// The attribute an AMQP header carries, if it carries one:
/// `cloudEvents:<name>` or `cloudEvents_<name>` gives `<name>`.
pub fn attribute_of_amqp_header(header: &str) -> Option<&str> {
    header
        .strip_prefix(AMQP_HEADER_PREFIX)
        .or_else(|| header.strip_prefix(AMQP_HEADER_PREFIX_JMS))
}

/// Whether `name` is a valid CloudEvents attribute name: one or more
/// lowercase ASCII letters or digits.
///
/// ```
/// assert!(outbox::wire::is_valid_attribute_name("traceparent"));
/// assert!(!outbox::wire::is_valid_attribute_name("Trace-Parent"));
/// ```
pub fn is_valid_attribute_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_round_trip() {
        let names = CONTEXT_ATTRIBUTE_NAMES
            .iter()
            .chain(RELAY_EXTENSION_NAMES)
            .chain(&TRACE_CONTEXT_HEADERS);
        for attribute in names {
            assert_eq!(
                attribute_of_amqp_header(&amqp_header_name(attribute)),
                Some(*attribute)
            );
            if *attribute != DATACONTENTTYPE_ATTRIBUTE {
                assert_eq!(
                    attribute_of_kafka_header(&kafka_header_name(attribute)),
                    Some(*attribute)
                );
            }
        }
        assert_eq!(
            attribute_of_kafka_header(KAFKA_CONTENT_TYPE_HEADER),
            Some(DATACONTENTTYPE_ATTRIBUTE)
        );
        assert_eq!(attribute_of_amqp_header("cloudEvents_id"), Some("id"));
        assert_eq!(attribute_of_kafka_header(TRACEPARENT_ATTRIBUTE), None);
    }

    #[test]
    fn every_reserved_name_is_a_valid_attribute_name_or_a_json_member() {
        for name in CONTEXT_ATTRIBUTE_NAMES.iter().chain(RELAY_EXTENSION_NAMES) {
            assert!(
                is_valid_attribute_name(name) || *name == DATA_BASE64_MEMBER,
                "{name}"
            );
        }
        assert!(!is_valid_attribute_name(""));
        assert!(!is_valid_attribute_name("a_b"));
        assert!(!is_valid_attribute_name("é"));
    }
}
