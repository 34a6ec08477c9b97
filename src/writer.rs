//! [`OutboxWriter`]: enqueue events in the caller's transaction.

use sqlx::Transaction;
use uuid::Uuid;

use crate::{Backend, EnqueueOptions, Error, Event, OutboxMessage};

/// Writes events into `outbox_events` inside the caller's transaction, so
/// they commit or roll back together with the caller's business rows.
///
/// The free functions [`enqueue`](crate::enqueue) and
/// [`enqueue_batch`](crate::enqueue_batch) use a default writer; build one
/// yourself to change the payload limit.
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), outbox::Error> {
/// use outbox::{Event, OutboxWriter};
/// use serde::Serialize;
///
/// #[derive(Serialize, Event)]
/// #[event(type = "order.created", aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated { #[event(aggregate_id)] order_id: i64, total_cents: i64 }
///
/// let writer = OutboxWriter::new().with_max_payload_bytes(64 * 1024);
/// let mut tx = pool.begin().await?;
/// sqlx::query("INSERT INTO orders (id, total_cents) VALUES ($1, $2)")
///     .bind(7_i64).bind(1250_i64)
///     .execute(&mut *tx).await?;
/// let event_id = writer.enqueue(&mut tx, &OrderCreated { order_id: 7, total_cents: 1250 }).await?;
/// tx.commit().await?;
/// # let _ = event_id;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OutboxWriter {
    max_payload_bytes: usize,
}

impl Default for OutboxWriter {
    fn default() -> Self {
        OutboxWriter::new()
    }
}

impl OutboxWriter {
    /// Default limit on a serialized payload: 1 MiB, the default maximum
    /// message size of Kafka brokers.
    pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

    /// A writer with the default payload limit.
    pub fn new() -> Self {
        OutboxWriter {
            max_payload_bytes: Self::DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }

    /// Reject payloads larger than `max_payload_bytes` (serialized JSON).
    pub fn with_max_payload_bytes(mut self, max_payload_bytes: usize) -> Self {
        self.max_payload_bytes = max_payload_bytes;
        self
    }

    /// The payload limit in bytes.
    pub fn max_payload_bytes(&self) -> usize {
        self.max_payload_bytes
    }

    /// Enqueue one event with a fresh UUIDv7 id, which is returned.
    ///
    /// # Errors
    /// An event that breaks the contract (payload too large, invalid field)
    /// is rejected before any SQL runs, leaving `tx` usable; see
    /// [`Error::is_rejected_event`]. Database errors pass through.
    pub async fn enqueue<DB: Backend, E: Event>(
        &self,
        tx: &mut Transaction<'_, DB>,
        event: &E,
    ) -> Result<Uuid, Error> {
        self.enqueue_with(tx, event, EnqueueOptions::new()).await
    }

    /// Enqueue one event with per-call options: an explicit event id, extra
    /// headers.
    ///
    /// # Errors
    /// As [`OutboxWriter::enqueue`].
    pub async fn enqueue_with<DB: Backend, E: Event>(
        &self,
        tx: &mut Transaction<'_, DB>,
        event: &E,
        options: EnqueueOptions,
    ) -> Result<Uuid, Error> {
        let message = options.apply(OutboxMessage::from_event(event)?);
        let event_id = message.event_id();
        self.enqueue_messages(tx, vec![message]).await?;
        Ok(event_id)
    }

    /// Enqueue events of one type in one multi-row `INSERT`, in slice order.
    /// Returns their event ids in the same order.
    ///
    /// # Errors
    /// As [`OutboxWriter::enqueue`]; one rejected event rejects the batch.
    pub async fn enqueue_batch<DB: Backend, E: Event>(
        &self,
        tx: &mut Transaction<'_, DB>,
        events: &[E],
    ) -> Result<Vec<Uuid>, Error> {
        let messages = events
            .iter()
            .map(OutboxMessage::from_event)
            .collect::<Result<Vec<_>, _>>()?;
        self.enqueue_messages(tx, messages).await
    }

    /// Enqueue prepared messages, of any event types, in one multi-row
    /// `INSERT`, in order. Returns their event ids in the same order.
    ///
    /// Every enqueue ends here. With the `opentelemetry` feature, a message
    /// without a `traceparent` header gets the W3C trace context of the
    /// caller's current span, when there is one (see the `trace_context`
    /// module).
    ///
    /// # Errors
    /// As [`OutboxWriter::enqueue`]; one rejected message rejects the batch.
    pub async fn enqueue_messages<DB: Backend>(
        &self,
        tx: &mut Transaction<'_, DB>,
        messages: Vec<OutboxMessage>,
    ) -> Result<Vec<Uuid>, Error> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        #[cfg(feature = "opentelemetry")]
        let messages = crate::trace_context::fill_current(messages);
        for message in &messages {
            message.validate(self.max_payload_bytes)?;
        }
        // The batch travels as one JSON array of contract-column objects,
        // which each backend's insert statement unpacks.
        let events_json = serde_json::to_string(&messages).map_err(|source| Error::Serialize {
            event_type: messages[0].event_type().to_owned(),
            source,
        })?;
        let written = DB::insert_events(&mut **tx, events_json).await?;
        tracing::debug!(
            backend = <DB as sqlx::Database>::NAME,
            events = messages.len(),
            written,
            "enqueued outbox events"
        );
        Ok(messages.iter().map(OutboxMessage::event_id).collect())
    }
}
