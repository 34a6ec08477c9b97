//! The inbox: apply each event's effects once, in the handler's own
//! transaction, on PostgreSQL, MySQL / MariaDB or SQLite (`README.md`,
//! "Read side: the inbox"; the table is in `docs/schema.md`).
//!
//! [`Inbox`] is the core. [`IncomingEvent`] turns a message written by the
//! relay (Kafka headers, AMQP properties, Redis stream entry fields or
//! NATS headers, `docs/wire-format.md`) into a typed `#[derive(Event)]` struct.
//!
//! The [`kafka`], [`rabbitmq`], [`redis`] and [`nats`] adapters run every
//! message through one delivery policy (`docs/inbox.md`): decode, process in
//! the inbox transaction, classify the result, back off, dead-letter poison
//! and messages out of attempts. All treat a database outage the same way and
//! report the same [`ConsumerStats`]. They run each handler attempt in an
//! `inbox.handle` span ([`handler_span`]); with the `opentelemetry` feature
//! it continues the producer's trace from the message's W3C `traceparent`.

mod backend;
#[cfg(any(
    feature = "kafka",
    feature = "rabbitmq",
    feature = "redis",
    feature = "nats"
))]
mod consumer;
mod delivery;
mod error;
mod handler;
mod inbox;
mod incoming;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(any(
    feature = "kafka",
    feature = "rabbitmq",
    feature = "redis",
    feature = "nats"
))]
mod policy;
mod prune;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "redis")]
pub mod redis;
mod stats;
mod trace_context;

pub use backend::InboxBackend;
pub use delivery::Delivery;
pub use error::{BoxError, DecodeError, Error};
pub use handler::{BatchItem, DecodeEvent, Handler, HandlerFn, TypedHandler, typed};
pub use inbox::{Inbox, Outcome};
pub use incoming::{EVENT_VERSION_ATTRIBUTE, IncomingEvent, REPLAY_ATTRIBUTE};
pub use prune::{PruneSettings, prune_once, prune_until_stopped};
pub use stats::ConsumerStats;
pub use trace_context::{TRACEPARENT_ATTRIBUTE, TRACESTATE_ATTRIBUTE, handler_span};
