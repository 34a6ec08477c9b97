//! The event model the relay passes around: the row as it is published
//! ([`OutboundEvent`]), the event a source hands the batch loop with its
//! partition ([`ClaimedEvent`]) and lease, its aggregate ([`AggregateKey`]),
//! and the signal that events were committed ([`Wakeup`]).

mod aggregate;
mod claimed;
mod outbound;
mod wakeup;

pub use aggregate::{AggregateKey, aggregate_key};
pub use claimed::{ClaimedEvent, FailedAttempt, Fence, FetchLimit, FetchRequest, Lease};
pub use outbound::OutboundEvent;
#[cfg(any(feature = "postgres", feature = "test-util"))]
pub use wakeup::NOTIFY_CHANNEL;
pub use wakeup::Wakeup;
