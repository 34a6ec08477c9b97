//! The outbox relay: claims committed events from `outbox_events` under
//! partition leases and publishes them to Kafka, RabbitMQ or stdout as
//! CloudEvents, keeping every guarantee of the outbox contract.

pub mod backlog;
mod batch;
pub mod broker_url;
pub mod cli;
pub use cli::commands;
pub mod config;
pub mod database_url;
mod error;
pub mod http;
mod leases;
pub mod logical;
mod metrics;
mod outbound;
pub mod publish;
mod publish_health;
mod relay;
pub mod replay;
mod retention;
mod retry;
pub mod store;
mod wakeup;

pub use batch::{DispatchSettings, DispatchTotals};
pub use broker_url::{BrokerUrl, DEFAULT_BROKER, resolve_broker_url};
pub use config::{
    AmqpConfig, AmqpRoute, DeadLetterConfig, DeadLetterPolicy, EventSourceKind, HttpConfig,
    KafkaConfig, RelayConfig, RetentionConfig, RetryConfig, RoutingKey, parse_duration,
};
pub use database_url::{DEFAULT_DATABASE_URL, DatabaseUrl, mask_password, resolve_database_url};
pub use error::Error;
pub use leases::{Handover, LeaseKeeper, LeaseSnapshot};
pub use metrics::{METRICS_CONTENT_TYPE, RelayMetrics};
pub use outbound::OutboundEvent;
pub use publish::build_publisher;
pub use publish_health::PublishHealth;
pub use relay::{Relay, RelaySettings};
pub use retention::{RetentionSettings, run_retention_pass};
pub use retry::RetryPolicy;
pub use store::{Connections, OutboxStore, open_store};
pub use wakeup::{NOTIFY_CHANNEL, Wakeup};
