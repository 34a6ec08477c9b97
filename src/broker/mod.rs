//! What the relay and the inbox share about the brokers they talk to, each
//! broker behind a feature of its own: `kafka` ([`kafka`]) and `rabbitmq`
//! ([`rabbitmq`]).

#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
