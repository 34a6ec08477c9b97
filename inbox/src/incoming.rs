//! [`IncomingEvent`]: a CloudEvent as it arrives, from Kafka headers or AMQP
//! properties written the way the relay writes them, and its typed decoding.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use outbox::Event;
use serde::de::DeserializeOwned;

use crate::error::DecodeError;
use crate::trace_context::{TRACEPARENT_ATTRIBUTE, TRACESTATE_ATTRIBUTE};

/// The extension attribute carrying the payload's schema version.
pub const EVENT_VERSION_ATTRIBUTE: &str = "eventversion";

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
        let id = take("id")?;
        let event_type = take("type")?;
        let source = take("source")?;
        Ok(IncomingEvent {
            id,
            event_type,
            source,
            attributes,
            data,
        })
    }

    /// Build from Kafka headers in the CloudEvents Kafka binding (binary
    /// mode): `ce_<attribute>` headers and the value as the payload. Plain
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
            let Some(attribute) = name.strip_prefix("ce_") else {
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
            let attribute = name
                .strip_prefix("cloudEvents:")
                .or_else(|| name.strip_prefix("cloudEvents_"));
            match attribute {
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
                .entry("id".to_owned())
                .or_insert_with(|| message_id.to_owned());
        }
        if let Some(message_type) = message_type {
            attributes
                .entry("type".to_owned())
                .or_insert_with(|| message_type.to_owned());
        }
        IncomingEvent::from_attributes(attributes, body.to_vec())
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
    /// # Errors
    /// [`DecodeError::UnexpectedType`], [`DecodeError::UnsupportedVersion`]
    /// or [`DecodeError::Payload`]; never panics.
    pub fn decode<E: Event + DeserializeOwned>(&self) -> Result<E, DecodeError> {
        self.decode_versions::<E>(E::EVENT_VERSION..=E::EVENT_VERSION)
    }

    /// Decode into `E`, accepting the payload versions in `versions` (for a
    /// struct that reads several schema versions).
    ///
    /// # Errors
    /// As [`IncomingEvent::decode`].
    pub fn decode_versions<E: Event + DeserializeOwned>(
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

    const CE_PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const PLAIN_PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn kafka(headers: &[(&str, &str)]) -> IncomingEvent {
        let mut all = vec![("ce_id", "1"), ("ce_type", "t"), ("ce_source", "/s")];
        all.extend_from_slice(headers);
        IncomingEvent::from_kafka(
            all.iter()
                .map(|(name, value)| (*name, Some(value.as_bytes()))),
            b"{}",
        )
        .expect("decodes")
    }

    fn amqp(headers: &[(&str, &str)]) -> IncomingEvent {
        let headers = [("cloudEvents:source", "/s")]
            .iter()
            .chain(headers)
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()));
        IncomingEvent::from_amqp(headers, Some("1"), Some("t"), b"{}").expect("decodes")
    }

    #[test]
    fn the_cloudevents_traceparent_wins_over_the_plain_header() {
        let incoming = kafka(&[
            ("ce_traceparent", CE_PARENT),
            ("traceparent", PLAIN_PARENT),
            ("tracestate", "plain=1"),
        ]);
        assert_eq!(incoming.traceparent(), Some(CE_PARENT));
        assert_eq!(incoming.attributes.get("tracestate"), None);

        let incoming = amqp(&[
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
        let incoming = kafka(&[
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

        let incoming = amqp(&[
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

    #[test]
    fn no_trace_headers_no_traceparent() {
        assert_eq!(kafka(&[("tracestate", "plain=1")]).traceparent(), None);
        assert_eq!(amqp(&[]).traceparent(), None);
    }
}
