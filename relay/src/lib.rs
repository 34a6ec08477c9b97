//! The outbox relay: claims committed events from `outbox_events` under
//! partition leases, or streams them from PostgreSQL's WAL, and publishes
//! them to Kafka, RabbitMQ, Redis Streams, NATS JetStream or stdout as
//! CloudEvents, keeping every guarantee of the outbox contract.
//!
//! The API:
//!
//! - [`RelayService`]: a whole relay from a database (a URL or a pool), a
//!   broker (a URL or a [`Publisher`](publish::Publisher)) and the
//!   settings, run until a `CancellationToken` fires. It is what
//!   `outbox-relay run` runs, and what a service embeds.
//! - [`RelayAdmin`]: the operator's commands (`status`, `dead`, `replay`,
//!   `migrate`, the slot commands) as a library.
//! - [`config`]: the TOML file and the URLs; [`publish`]: the brokers'
//!   publishers, and the trait a publisher of one's own implements;
//!   [`Error`]: every failure.
//!
//! The modules, from the bottom up; each imports only modules below it
//! (`relay/tests/module_layers.rs` checks it). Those without a link are
//! the crate's own:
//!
//! - [`error`], `tasks` and `event`: the error type, who owns the
//!   background tasks, and the event model.
//! - `store`: the SQL per backend; [`publish`]: the brokers.
//! - `leases`: which partitions this instance owns; `source`: where events
//!   come from (polling, the WAL).
//! - `batch`: the batch loop and what it owns, and the Prometheus registry
//!   it records into.
//! - `operator`: status, dead events, replay, retention, slot commands;
//!   `http`: `/healthz`, `/readyz`, `/metrics` and the operators' page,
//!   `/ui`.
//! - `relay`: one relay instance, from start to graceful stop.
//! - [`config`]: the TOML file and the URLs, turned into all of the above.
//! - [`service`]: [`RelayService`]; [`admin`]: [`RelayAdmin`].
//!
//! The command line is the binary's (`src/bin/outbox-relay/`).

// Without a database there is nothing to relay from: the crate still
// builds, for the broker-only feature sets, and what only a database
// reaches is unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code, unused_imports)
)]

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

/// Declares a module the crate uses inside: `pub(crate)`, so it is no part
/// of the API. The `test-util` feature makes it public and hidden from the
/// docs, outside any stability promise, for this project's own tests and
/// benches, which reach into the stores, the sources and the leases.
macro_rules! internal_mod {
    ($name:ident) => {
        #[cfg(feature = "test-util")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "test-util"))]
        pub(crate) mod $name;
    };
}

pub mod admin;
internal_mod!(batch);
pub mod config;
pub mod error;
internal_mod!(event);
internal_mod!(http);
internal_mod!(leases);
internal_mod!(operator);
pub mod publish;
internal_mod!(relay);
pub mod service;
internal_mod!(source);
internal_mod!(store);
internal_mod!(tasks);

pub use admin::RelayAdmin;
pub use batch::{DispatchTotals, METRICS_CONTENT_TYPE, PublishHealth, RelayMetrics};
pub use config::{
    AmqpConfig, AmqpRoute, BrokerUrl, DEFAULT_BROKER, DEFAULT_DATABASE_URL, DatabaseUrl,
    DeadLetterConfig, DeadLetterPolicy, EventSourceKind, HttpConfig, KafkaConfig, RelayConfig,
    RetentionConfig, RetryConfig, RoutingKey, SlotName, UiConfig, UiTokens, parse_duration,
    resolve_broker_url, resolve_database_url,
};
pub use error::Error;
pub use event::OutboundEvent;
pub use outbox::mask_password;
pub use service::{RelayBroker, RelayDatabase, RelayService, RelayServiceBuilder};
