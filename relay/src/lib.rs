//! The outbox relay: claims committed events from `outbox_events` under
//! partition leases, or streams them from PostgreSQL's WAL, and publishes
//! them to Kafka, RabbitMQ or stdout as CloudEvents, keeping every
//! guarantee of the outbox contract.
//!
//! The modules, from the bottom up; each imports only modules below it
//! (`relay/tests/module_layers.rs` checks it):
//!
//! - [`error`], [`tasks`] and [`event`]: the error type, who owns the
//!   background tasks, and the event model.
//! - [`store`]: the SQL per backend; [`publish`]: the brokers.
//! - [`leases`]: which partitions this instance owns; [`source`]: where
//!   events come from (polling, the WAL).
//! - [`batch`]: the batch loop and what it owns, and the Prometheus
//!   registry it records into.
//! - [`operator`]: status, dead events, replay, retention, slot commands;
//!   [`http`]: `/healthz`, `/readyz`, `/metrics`.
//! - `relay`: one relay instance, from start to graceful stop.
//! - [`config`]: the TOML file and the URLs, turned into all of the above.
//! - [`service`]: [`RelayService`], a whole relay from a database, a broker
//!   and the settings, run until a `CancellationToken` fires: what the
//!   binary runs, and what a service embeds; [`admin`]: [`RelayAdmin`],
//!   the operator's commands (`status`, `dead`, `replay`, the slot
//!   commands) as a library.
//!
//! The command line is the binary's (`src/bin/outbox-relay/`).

/// A module `sql` holding the statements of the calling file's `sql/`
/// folder, one `&str` per file, named after it: `sql_files!(wal_level)`
/// gives `sql::wal_level` from `sql/wal_level.sql`, and
/// `sql_files!(fenced_hold = stream_lease_fence + hold_events)` gives
/// `sql::fenced_hold`, the two files one after the other.
#[cfg_attr(not(feature = "logical"), allow(unused_macros))]
macro_rules! sql_files {
    ($($name:ident $(= $first:ident + $then:ident)?),+ $(,)?) => {
        /// The statements of this folder's `sql/` files, named after them.
        #[allow(non_upper_case_globals)]
        mod sql {
            $(pub(super) const $name: &str = sql_files!(@text $name $(= $first + $then)?);)+
        }
    };
    (@text $name:ident) => {
        include_str!(concat!("sql/", stringify!($name), ".sql"))
    };
    (@text $name:ident = $first:ident + $then:ident) => {
        concat!(
            include_str!(concat!("sql/", stringify!($first), ".sql")),
            include_str!(concat!("sql/", stringify!($then), ".sql"))
        )
    };
}

pub mod admin;
pub mod batch;
pub mod config;
pub mod error;
pub mod event;
pub mod http;
pub mod leases;
pub mod operator;
pub mod publish;
mod relay;
pub mod service;
pub mod source;
pub mod store;
pub mod tasks;

pub use admin::RelayAdmin;
pub use batch::{
    DispatchSettings, DispatchTotals, METRICS_CONTENT_TYPE, PublishHealth, RelayMetrics,
    RetryPolicy,
};
pub use config::{
    AmqpConfig, AmqpRoute, BrokerUrl, DEFAULT_BROKER, DEFAULT_DATABASE_URL, DatabaseUrl,
    DeadLetterConfig, DeadLetterPolicy, EventSourceKind, HttpConfig, KafkaConfig, RelayConfig,
    RetentionConfig, RetryConfig, RoutingKey, build_publisher, open_store, parse_duration,
    relay_settings, resolve_broker_url, resolve_database_url,
};
pub use error::Error;
pub use event::{NOTIFY_CHANNEL, OutboundEvent, Wakeup};
pub use leases::{Handover, LeaseKeeper, LeaseSnapshot};
pub use operator::{RetentionSettings, run_retention_pass};
pub use outbox::mask_password;
pub use relay::{Relay, RelaySettings};
pub use service::{RelayBroker, RelayDatabase, RelayService, RelayServiceBuilder};
pub use source::OutboxStore;
pub use store::Connections;
pub use tasks::Tasks;
