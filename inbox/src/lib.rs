//! The inbox: apply each event's effects once, in the handler's own
//! transaction, on PostgreSQL, MySQL / MariaDB or SQLite (CONTRACT §5).
//!
//! [`Inbox`] is the core. [`IncomingEvent`] turns a message written by the
//! relay (Kafka headers or AMQP properties) into a typed
//! `#[derive(Event)]` struct.
//!
//! The adapters run each handler attempt in an `inbox.handle` span
//! ([`handler_span`]); with the `opentelemetry` feature it continues the
//! producer's trace from the message's W3C `traceparent`.

mod backend;
mod error;
mod handler;
mod inbox;
mod incoming;
pub mod kafka;
mod prune;
pub mod rabbitmq;
mod trace_context;

pub use backend::InboxBackend;
pub use error::{BoxError, DecodeError, Error};
pub use handler::{Handler, TypedHandler, typed};
pub use inbox::{Inbox, Outcome};
pub use incoming::{EVENT_VERSION_ATTRIBUTE, IncomingEvent, REPLAY_ATTRIBUTE};
pub use prune::{PruneSettings, prune_once, prune_until_stopped};
pub use trace_context::{TRACEPARENT_ATTRIBUTE, TRACESTATE_ATTRIBUTE, handler_span};
