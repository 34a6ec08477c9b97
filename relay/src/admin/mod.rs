//! [`RelayAdmin`]: the operator's commands as a library, what
//! `outbox-relay status`, `dead`, `replay`, `migrate`, `recover-slot` and
//! `leave-logical` run: a service or a tool of its own calls the same
//! functions the command line does, and gets the answers as values.
//!
//! - `status.rs`: [`RelayStatus`], the table's counts with the slots'.
//! - `dead.rs`: listing, retrying and discarding dead events.
//! - `replay.rs`: [`ReplayRequest`] and what a replay did.
//! - `page.rs`: the operators' page (`/ui`) served on its own
//!   ([`RelayAdmin::bind_page`]), as `outbox-relay ui` does.
//! - `logical.rs`: the WAL source's commands (the `logical` feature).
//!
//! ```no_run
//! use outbox_relay::admin::{DeadSelector, RelayAdmin};
//! use outbox_relay::config::{DatabaseUrl, EventSourceKind};
//!
//! # async fn example() -> Result<(), outbox_relay::Error> {
//! let url: DatabaseUrl = "postgres://postgres@127.0.0.1:5432/shop".parse()?;
//! let admin = RelayAdmin::connect(url).await?;
//! let status = admin.status(EventSourceKind::Poll).await?;
//! println!("{} pending, {} dead", status.table.pending, status.table.dead);
//! for event in admin.dead_events(&DeadSelector::All, 20).await? {
//!     println!("{} failed {} times: {:?}", event.event_id, event.attempts, event.last_error);
//! }
//! let retried = admin.retry_dead(&DeadSelector::aggregate("order:42")?).await?;
//! println!("{retried} dead event(s) made pending again");
//! # Ok(())
//! # }
//! ```

mod dead;
#[cfg(feature = "logical")]
mod logical;
mod page;
mod replay;
mod status;

use std::sync::Arc;

use crate::error::Error;
use crate::service::RelayDatabase;
use crate::source::OutboxStore;
use crate::store::Connections;

pub use crate::operator::ReplayTime;
#[cfg(feature = "logical")]
pub use crate::operator::{LeftLogical, LogicalCounts, SlotRecovery};
#[cfg(feature = "logical")]
pub use crate::source::logical::{SlotBacklog, SlotStatus};
pub use crate::store::{
    DeadEvent, DeadSelector, LiveLease, OutboxStatus, ReplayWindow, TopicStatus,
};
pub use page::{PageOptions, PageServer};
pub use replay::{ReplayRequest, ReplaySummary};
pub use status::RelayStatus;

/// The operator's commands on one database: see the
/// [module documentation](self).
pub struct RelayAdmin {
    /// The database for logs: the URL, its password masked.
    label: String,
    /// `postgres`, `mysql` or `sqlite`.
    backend: &'static str,
    store: Arc<dyn OutboxStore>,
    /// The same pool as `store`, typed, on PostgreSQL: the slots' commands
    /// and counts need it.
    #[cfg(feature = "logical")]
    postgres: Option<Arc<crate::store::PostgresStore>>,
}

impl std::fmt::Debug for RelayAdmin {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RelayAdmin")
            .field("database", &self.label)
            .finish_non_exhaustive()
    }
}

impl RelayAdmin {
    /// Work on `database`: a [`DatabaseUrl`](crate::DatabaseUrl), whose
    /// connections are opened as commands need them, or a pool of the
    /// service's own. Nothing is migrated: see [`RelayAdmin::migrate`].
    ///
    /// # Errors
    /// [`Error::Database`] when the database cannot be reached;
    /// [`Error::FeatureNotBuilt`] for a database this build has no driver
    /// for.
    pub async fn connect(database: impl Into<RelayDatabase>) -> Result<Self, Error> {
        let database = database.into();
        let label = database.label();
        let backend = database.backend();
        #[cfg(feature = "logical")]
        if let Some(postgres) = database.open_postgres(Connections::OnDemand).await? {
            return Ok(RelayAdmin {
                label,
                backend,
                store: Arc::clone(&postgres) as Arc<dyn OutboxStore>,
                postgres: Some(postgres),
            });
        }
        Ok(RelayAdmin {
            label,
            backend,
            store: database
                .open_polling_store(Connections::OnDemand, false)
                .await?,
            #[cfg(feature = "logical")]
            postgres: None,
        })
    }

    /// Apply the outbox migrations this database is missing.
    ///
    /// # Errors
    /// [`Error::Database`] when a migration fails.
    pub async fn migrate(&self) -> Result<(), Error> {
        self.store.migrate().await
    }

    /// The PostgreSQL store, or the error naming `command`'s need for it.
    #[cfg(feature = "logical")]
    fn postgres(&self, command: &str) -> Result<&crate::store::PostgresStore, Error> {
        self.postgres.as_deref().ok_or_else(|| {
            Error::Logical(format!(
                "{command} needs PostgreSQL (logical decoding of the WAL); this database is {}",
                self.backend
            ))
        })
    }
}
