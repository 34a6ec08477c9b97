//! What the relay and the inbox share about the brokers they talk to, each
//! broker behind a feature of its own: `kafka` ([`kafka`]), `rabbitmq`
//! ([`rabbitmq`]) and `nats` ([`nats`]); and [`ClientError`], how their errors carry a broker
//! client's.

mod client_error;

pub use client_error::ClientError;

#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
