//! The relay's database side: one store for every SQL backend
//! (`sql_store/`), a dialect per backend (`postgres.rs`, `mysql.rs`,
//! `sqlite.rs`, with their SQL in `store/sql/<backend>/`), the row mapping
//! they share (`rows.rs`), and [`OperatorStore`]: status, `/metrics`
//! gauges, dead events, replay reads, migrations and retention. The
//! statements of the leases (`crate::leases`) and of the polling source
//! (`crate::source`) are here too; those modules bind and run them.
//!
//! The batch loop's hot path (fetch due events, mark the acknowledged
//! ones, record failures, watch for commits) is [`SqlStore`]'s too; the
//! polling source (`crate::source`) offers it to the loop.
//!
//! Every write the relay makes for a partition is fenced: it names the
//! partition's lease token as acquired, and matches nothing once another
//! instance has taken the partition over (or the lease has expired).

/// The statement table of a backend whose statements bind numbered
/// parameters (`$1`, `?1`): one file per statement, of the same name in
/// every backend's folder `store/sql/<folder>/`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! numbered_statements {
    ($folder:literal) => {
        numbered_statements!(@ $folder;
            partition_count, heartbeat_upsert, heartbeat_forget_dead, live_relays, deregister,
            renew_leases, acquire_leases, release_leases, fetch_pending, mark_published,
            delete_acknowledged, record_failure, delete_published, backlog, status,
            status_topics, status_leases, database_time, topic_exists, fetch_published,
            list_dead, retry_dead, discard_dead, page_topics, page_relays, page_dead, page_event,
            page_published_recently)
    };
    (@ $folder:literal; $($name:ident),*) => {
        Statements::numbered(NumberedSql {
            $($name: include_str!(concat!("sql/", $folder, "/", stringify!($name), ".sql")),)*
        })
    };
}

#[cfg(feature = "mysql")]
mod mysql;
mod operator;
pub(crate) mod page;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod rows;
pub(crate) mod sql_store;
#[cfg(feature = "sqlite")]
mod sqlite;
mod types;

use std::time::Duration;

#[cfg(feature = "mysql")]
pub use mysql::MySqlStore;
pub use operator::OperatorStore;
pub use page::{DeadFilter, PageDeadEvent, PageEvent, PageRelay, PageTopic};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use sql_store::{Dialect, SqlStore};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use types::{
    DeadEvent, DeadSelector, LiveLease, OutboxBacklog, OutboxStatus, ReplayWindow, TopicStatus,
};

use crate::error::Error;

/// Connections per relay: the batch loop, the marks in flight, lease
/// renewal, retention and the LISTEN connection.
const POOL_SIZE: u32 = 6;

/// How long to wait for a connection before giving up.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// When a store's pool opens its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connections {
    /// Opened when a statement needs one, closed after ten idle minutes
    /// and renewed every thirty: for commands that run a few statements.
    OnDemand,
    /// All of the pool's connections opened as it starts and kept open, for
    /// a running relay. Opening a connection (TCP, TLS, authentication)
    /// takes tens of milliseconds; a batch that waited for one would add
    /// that to the commit-to-ack latency of every event behind it.
    KeptOpen,
}

/// The error of a URL whose options sqlx rejects; the password is masked.
fn invalid_url(url: &str, error: sqlx::Error) -> Error {
    Error::InvalidDatabaseUrl {
        url: outbox::mask_password(url),
        reason: error.to_string(),
    }
}
