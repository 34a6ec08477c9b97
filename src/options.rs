//! [`EnqueueOptions`]: per-call settings of an enqueue.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::OutboxMessage;

/// Per-call settings for [`OutboxWriter::enqueue_with`](crate::OutboxWriter::enqueue_with).
///
/// ```
/// use outbox::EnqueueOptions;
/// use uuid::Uuid;
///
/// let options = EnqueueOptions::new()
///     .event_id(Uuid::now_v7())
///     .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct EnqueueOptions {
    event_id: Option<Uuid>,
    headers: BTreeMap<String, String>,
}

impl EnqueueOptions {
    /// No explicit id and no headers.
    pub fn new() -> Self {
        EnqueueOptions::default()
    }

    /// Use this event id instead of a fresh UUIDv7.
    pub fn event_id(mut self, event_id: Uuid) -> Self {
        self.event_id = Some(event_id);
        self
    }

    /// Add a header (the `headers` column), published as a CloudEvents
    /// extension attribute. Names are lowercase ASCII letters and digits.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Apply the options to a message built from an event.
    pub(crate) fn apply(self, message: OutboxMessage) -> OutboxMessage {
        let message = message.with_headers(self.headers);
        match self.event_id {
            Some(event_id) => message.with_event_id(event_id),
            None => message,
        }
    }
}
