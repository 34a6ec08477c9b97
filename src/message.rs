//! [`OutboxMessage`]: one row of `outbox_events`, ready to be written.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::{Error, Event, wire};

/// Longest `event_type`, `aggregate_type`, `aggregate_id` and `topic`, in
/// characters. The same on every backend, so an event valid on one is valid
/// on all.
pub const MAX_NAME_CHARS: usize = 255;
/// Longest `source`, in characters.
pub const MAX_SOURCE_CHARS: usize = 1024;

/// One event as it will be stored in `outbox_events`: the contract columns,
/// with the payload already serialized.
///
/// Build it from an [`Event`] with [`OutboxMessage::from_event`], or by hand
/// with [`OutboxMessage::new`] when the event types are not known at compile
/// time. Batches of mixed event types go through
/// [`OutboxWriter::enqueue_messages`](crate::OutboxWriter::enqueue_messages).
///
/// ```
/// use outbox::OutboxMessage;
/// use serde_json::value::to_raw_value;
///
/// let message = OutboxMessage::new(
///     "order.shipped", "/orders", "order", "42", "orders",
///     to_raw_value(&serde_json::json!({ "carrier": "ups" })).unwrap(),
/// )
/// .with_version(2)
/// .with_header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert_eq!(message.event_type(), "order.shipped");
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct OutboxMessage {
    event_id: Uuid,
    event_type: String,
    event_version: i32,
    source: String,
    aggregate_type: String,
    aggregate_id: String,
    topic: String,
    payload: Box<RawValue>,
    headers: BTreeMap<String, String>,
}

impl OutboxMessage {
    /// A message with a fresh UUIDv7 event id, version 1 and no headers.
    pub fn new(
        event_type: impl Into<String>,
        source: impl Into<String>,
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        topic: impl Into<String>,
        payload: Box<RawValue>,
    ) -> Self {
        OutboxMessage {
            event_id: Uuid::now_v7(),
            event_type: event_type.into(),
            event_version: 1,
            source: source.into(),
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
            topic: topic.into(),
            payload,
            headers: BTreeMap::new(),
        }
    }

    /// The message for `event`, with a fresh UUIDv7 event id.
    ///
    /// # Errors
    /// [`Error::Serialize`] when the event's `Serialize` implementation fails.
    pub fn from_event<E: Event>(event: &E) -> Result<Self, Error> {
        let payload = event.payload().map_err(|source| Error::Serialize {
            event_type: E::EVENT_TYPE.to_owned(),
            source,
        })?;
        Ok(OutboxMessage::new(
            E::EVENT_TYPE,
            E::SOURCE,
            E::AGGREGATE_TYPE,
            event.aggregate_id(),
            E::TOPIC,
            payload,
        )
        .with_version(E::EVENT_VERSION))
    }

    /// Use `event_id` instead of a fresh one, e.g. to make a retried command
    /// enqueue the same event (the unique `event_id` then rejects the copy).
    pub fn with_event_id(mut self, event_id: Uuid) -> Self {
        self.event_id = event_id;
        self
    }

    /// Set the payload's schema version.
    pub fn with_version(mut self, event_version: i32) -> Self {
        self.event_version = event_version;
        self
    }

    /// Add a header, published as a CloudEvents extension attribute. Names
    /// are lowercase ASCII letters and digits, as CloudEvents requires.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Add several headers; see [`OutboxMessage::with_header`].
    pub fn with_headers<K, V>(mut self, headers: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        self.headers.extend(
            headers
                .into_iter()
                .map(|(name, value)| (name.into(), value.into())),
        );
        self
    }

    /// The CloudEvents id the event will be published with.
    pub fn event_id(&self) -> Uuid {
        self.event_id
    }

    /// The CloudEvents type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The serialized payload.
    pub fn payload(&self) -> &RawValue {
        &self.payload
    }

    /// The headers, published as CloudEvents extension attributes.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    /// Check the message against the table contract and the payload limit,
    /// before any SQL runs.
    pub(crate) fn validate(&self, max_payload_bytes: usize) -> Result<(), Error> {
        let size = self.payload.get().len();
        if size > max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                event_type: self.event_type.clone(),
                size,
                limit: max_payload_bytes,
            });
        }
        if self.payload.get() == "null" {
            return Err(self.invalid("payload", "is JSON null; publish an object or a value"));
        }
        self.check_name("event_type", &self.event_type, MAX_NAME_CHARS)?;
        self.check_name("source", &self.source, MAX_SOURCE_CHARS)?;
        self.check_name("aggregate_type", &self.aggregate_type, MAX_NAME_CHARS)?;
        self.check_name("aggregate_id", &self.aggregate_id, MAX_NAME_CHARS)?;
        self.check_name("topic", &self.topic, MAX_NAME_CHARS)?;
        if self.event_version < 1 {
            return Err(self.invalid(
                "event_version",
                format!("is {}; versions start at 1", self.event_version),
            ));
        }
        for name in self.headers.keys() {
            self.check_header_name(name)?;
        }
        Ok(())
    }

    fn check_name(&self, field: &'static str, value: &str, max_chars: usize) -> Result<(), Error> {
        if value.trim().is_empty() {
            return Err(self.invalid(field, "is empty"));
        }
        let chars = value.chars().count();
        if chars > max_chars {
            return Err(self.invalid(
                field,
                format!("is {chars} characters long, above the limit of {max_chars}"),
            ));
        }
        Ok(())
    }

    fn check_header_name(&self, name: &str) -> Result<(), Error> {
        let reason = if name.is_empty() {
            Some("is empty".to_owned())
        } else if !wire::is_valid_attribute_name(name) {
            Some("must consist of lowercase ASCII letters and digits, as CloudEvents extension attribute names do".to_owned())
        } else if wire::CONTEXT_ATTRIBUTE_NAMES.contains(&name) {
            Some("is a CloudEvents context attribute and cannot be set as a header".to_owned())
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidHeader {
                event_type: self.event_type.clone(),
                name: name.to_owned(),
                reason,
            }),
            None => Ok(()),
        }
    }

    fn invalid(&self, field: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidEvent {
            event_type: self.event_type.clone(),
            field,
            reason: reason.into(),
        }
    }
}
