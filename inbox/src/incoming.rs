//! [`IncomingEvent`]: a CloudEvent as it arrives, from Kafka headers or AMQP
//! properties written the way the relay writes them, and its typed decoding.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use outbox::Event;
use serde::de::DeserializeOwned;

use crate::error::DecodeError;

/// The extension attribute carrying the payload's schema version.
pub const EVENT_VERSION_ATTRIBUTE: &str = "eventversion";

/// The extension attribute `outbox-relay replay` sets, to `"true"`, on every
/// event it re-publishes (Kafka header `ce_outboxreplay`, AMQP header
/// `cloudEvents:outboxreplay`).
pub const REPLAY_ATTRIBUTE: &str = "outboxreplay";

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
    /// mode): `ce_<attribute>` headers and the value as the payload.
    ///
    /// # Errors
    /// As [`IncomingEvent::from_attributes`]; a non-UTF-8 `ce_` header is
    /// [`DecodeError::InvalidAttribute`].
    pub fn from_kafka<'h>(
        headers: impl IntoIterator<Item = (&'h str, Option<&'h [u8]>)>,
        value: &[u8],
    ) -> Result<Self, DecodeError> {
        let mut attributes = BTreeMap::new();
        for (name, bytes) in headers {
            let Some(attribute) = name.strip_prefix("ce_") else {
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
        IncomingEvent::from_attributes(attributes, value.to_vec())
    }

    /// Build from AMQP headers with the `cloudEvents:` prefix and the body;
    /// `message_id` and `type` properties stand in for a missing `id` and
    /// `type`.
    ///
    /// # Errors
    /// As [`IncomingEvent::from_attributes`].
    pub fn from_amqp(
        headers: impl IntoIterator<Item = (String, String)>,
        message_id: Option<&str>,
        message_type: Option<&str>,
        body: &[u8],
    ) -> Result<Self, DecodeError> {
        let mut attributes: BTreeMap<String, String> = headers
            .into_iter()
            .filter_map(|(name, value)| {
                name.strip_prefix("cloudEvents:")
                    .or_else(|| name.strip_prefix("cloudEvents_"))
                    .map(|attribute| (attribute.to_owned(), value))
            })
            .collect();
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
            .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
