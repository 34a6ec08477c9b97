//! [`OperatorStore`]: what the operator commands (`status`, `dead`,
//! `replay`) and the `/metrics` gauges read and change, and the upkeep of
//! the table (migrations, retention).

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use super::{
    DeadEvent, DeadFilter, DeadSelector, OutboxBacklog, OutboxStatus, PageDeadEvent, PageEvent,
    PageRelay, PageTopic, ReplayWindow,
};
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

    /// The operators' page: per-topic counts, in flight included. A store
    /// without the page's statements says so.
    fn page_topics(&self) -> BoxFuture<'_, Result<Vec<PageTopic>, Error>> {
        Box::pin(async { Err(no_page()) })
    }

    /// The operators' page: the live relays and their leases.
    fn page_relays(&self) -> BoxFuture<'_, Result<Vec<PageRelay>, Error>> {
        Box::pin(async { Err(no_page()) })
    }

    /// The operators' page: dead events under `filter`, in id order, at
    /// most `limit`.
    fn page_dead<'a>(
        &'a self,
        filter: &'a DeadFilter,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<PageDeadEvent>, Error>> {
        let _ = (filter, limit);
        Box::pin(async { Err(no_page()) })
    }

    /// The operators' page: the event of `id` (`outbox_events.id`), in
    /// any state, or `None`.
    fn page_event(&self, id: i64) -> BoxFuture<'_, Result<Option<PageEvent>, Error>> {
        let _ = id;
        Box::pin(async { Err(no_page()) })
    }

    /// The operators' page: events published within the last `within`.
    fn page_published_recently(&self, within: Duration) -> BoxFuture<'_, Result<i64, Error>> {
        let _ = within;
        Box::pin(async { Err(no_page()) })
    }
}

/// The error of a store that has no statements for the operators' page.
fn no_page() -> Error {
    Error::InvalidArgument("this store does not serve the operators' page".to_owned())
}
