//! [`OperatorStore`]: what the operator commands (`status`, `dead`,
//! `replay`) and the `/metrics` gauges read and change, and the upkeep of
//! the table (migrations, retention).

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use super::{DeadEvent, DeadSelector, OutboxBacklog, OutboxStatus, ReplayWindow};
use crate::error::Error;
use crate::event::OutboundEvent;

/// Reads and repairs for operators, and table upkeep. None of it runs on
/// the batch loop's path.
pub trait OperatorStore: Send + Sync {
    /// Apply the outbox migrations.
    fn migrate(&self) -> BoxFuture<'_, Result<(), Error>>;

    /// Delete at most `limit` published events published more than
    /// `older_than` ago. Pending and dead events are never deleted.
    fn delete_published(
        &self,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, Error>>;

    /// Counts, per-topic counts and live leases for `outbox-relay status`.
    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>>;

    /// Pending and dead counts and the oldest pending event, for the
    /// `/metrics` gauges. Unlike [`OperatorStore::status`] it never counts
    /// published rows.
    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>>;

    /// The database's clock.
    fn database_time(&self) -> BoxFuture<'_, Result<DateTime<Utc>, Error>>;

    /// Whether any event, in any state, has `topic`.
    fn topic_exists<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<bool, Error>>;

    /// Published events in `window` with an id above `after_id`, in id
    /// order, at most `limit`: one page of a replay. Reads only.
    fn fetch_published<'a>(
        &'a self,
        window: &'a ReplayWindow,
        after_id: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>>;

    /// Dead events matching `selector`, in id order, at most `limit`.
    fn list_dead<'a>(
        &'a self,
        selector: &'a DeadSelector,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<DeadEvent>, Error>>;

    /// Make matching dead events pending again with a fresh attempt count.
    fn retry_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>>;

    /// Delete matching dead events.
    fn discard_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>>;
}
