//! The outbox relay: claims committed events from `outbox_events` under
//! partition leases and publishes them to Kafka, RabbitMQ or stdout as
//! CloudEvents, keeping every guarantee of the outbox contract.

mod dispatcher;
mod error;
mod leases;
mod outbound;
pub mod publish;
mod relay;
mod retention;
mod retry;
pub mod store;
mod wakeup;
mod waves;

pub use dispatcher::{DispatchSettings, DispatchTotals};
pub use error::Error;
pub use leases::{LeaseKeeper, LeaseSnapshot};
pub use outbound::OutboundEvent;
pub use relay::{Relay, RelaySettings};
pub use retention::{RetentionSettings, run_retention_pass};
pub use retry::RetryPolicy;
pub use wakeup::{NOTIFY_CHANNEL, Wakeup};
