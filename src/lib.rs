//! Transactional outbox for sqlx.
//!
//! Write your business rows and the events that describe them in one
//! database transaction; the `outbox-relay` sidecar publishes the committed
//! events to Kafka or RabbitMQ as CloudEvents, at least once, in order per
//! aggregate. Rolled-back events are never published.
//!
//! ```no_run
//! use outbox::Event;
//! use serde::Serialize;
//!
//! #[derive(Serialize, Event)]
//! #[event(type = "order.created", version = 1, aggregate = "order", topic = "orders", source = "/orders")]
//! struct OrderCreated {
//!     #[event(aggregate_id)]
//!     order_id: i64,
//!     total_cents: i64,
//! }
//!
//! # async fn example() -> Result<(), outbox::Error> {
//! let pool = sqlx::SqlitePool::connect("sqlite://outbox.db?mode=rwc").await?;
//! outbox::migrate(&pool).await?;
//!
//! let mut tx = pool.begin().await?;
//! // ... the order's own rows, written with &mut *tx ...
//! let event_id = outbox::enqueue(&mut tx, &OrderCreated { order_id: 7, total_cents: 1250 }).await?;
//! tx.commit().await?;
//! println!("enqueued {event_id}");
//! # Ok(()) }
//! ```
//!
//! Supported databases are PostgreSQL, MySQL / MariaDB and SQLite; see
//! [`Backend`].
//!
//! With the `opentelemetry` feature, an event enqueued inside an
//! OpenTelemetry span (or a `tracing` span bridged to one) carries the
//! span's W3C `traceparent` in its headers, so consumers continue the
//! producer's trace; see the `trace_context` module.
//!
//! [`wire`] names every CloudEvents attribute and header the relay writes
//! and the inbox reads; [`mask_password`] makes a URL safe to log.
//!
//! Behind features, the code the relay and the inbox share about the
//! brokers: `kafka` and `rabbitmq` (the `broker` module), and `backoff`
//! (the `backoff` module, exponential backoff with jitter).

mod backend;
#[cfg(feature = "backoff")]
pub mod backoff;
mod begin_transaction;
pub mod broker;
mod error;
mod event;
mod mask_password;
mod message;
mod migrate;
mod migration_lock;
mod options;
#[cfg(feature = "opentelemetry")]
pub mod trace_context;
pub mod wire;
mod writer;

pub use backend::{Backend, MIGRATIONS_TABLE};
pub use begin_transaction::begin_transaction;
pub use error::Error;
pub use event::{Event, EventType};
pub use mask_password::mask_password;
pub use message::{MAX_NAME_CHARS, MAX_SOURCE_CHARS, OutboxMessage};
pub use migrate::migrate;
pub use migration_lock::POSTGRES_MIGRATION_LOCK_KEY;
pub use options::EnqueueOptions;
pub use outbox_macros::Event;
pub use writer::OutboxWriter;

use sqlx::Transaction;
use uuid::Uuid;

/// Enqueue one event in `tx` with the default [`OutboxWriter`]; returns its
/// new UUIDv7 event id.
///
/// # Errors
/// See [`OutboxWriter::enqueue`].
pub async fn enqueue<DB: Backend, E: Event>(
    tx: &mut Transaction<'_, DB>,
    event: &E,
) -> Result<Uuid, Error> {
    OutboxWriter::new().enqueue(tx, event).await
}

/// Enqueue events of one type in `tx`, in one multi-row `INSERT`, with the
/// default [`OutboxWriter`]; returns their event ids in order.
///
/// # Errors
/// See [`OutboxWriter::enqueue_batch`].
pub async fn enqueue_batch<DB: Backend, E: Event>(
    tx: &mut Transaction<'_, DB>,
    events: &[E],
) -> Result<Vec<Uuid>, Error> {
    OutboxWriter::new().enqueue_batch(tx, events).await
}
