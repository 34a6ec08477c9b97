//! [`PendingEvents`]: the batch loop's hot path. Fetch the committed events
//! that are due, in id order, and settle what the broker answered: mark the
//! acknowledged ones published, record the failed attempts. Every write is
//! fenced by the partition leases the events were fetched under.

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{ClaimedEvent, FailedAttempt, Lease};
use crate::Error;
use crate::wakeup::Wakeup;

/// The statements of the batch loop.
pub trait PendingEvents: Send + Sync {
    /// Pending events of `partitions` that are due, in id order, at most
    /// `limit`, leaving out the ids in `exclude` (published, not yet
    /// marked). An event is also left out while an earlier event of its
    /// aggregate waits for a retry, or is dead and `hold_dead` is set.
    fn fetch_pending<'a>(
        &'a self,
        partition_count: i32,
        partitions: &'a [i32],
        exclude: &'a [i64],
        hold_dead: bool,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>>;

    /// Mark `ids` published, only where the lease of the row's partition is
    /// one of `leases`, held by `relay_id` and unexpired. Returns the rows
    /// marked; fewer than `ids.len()` means a lease was lost.
    fn mark_published<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<u64, Error>>;

    /// Record failed attempts, fenced like [`PendingEvents::mark_published`].
    /// Returns the rows updated.
    fn record_failures<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        failures: &'a [FailedAttempt],
    ) -> BoxFuture<'a, Result<u64, Error>>;

    /// Raise `wakeup` whenever events are committed, until `stop`, where
    /// the database can say so (PostgreSQL's `NOTIFY`). The default does
    /// nothing: the batch loop then polls.
    fn watch_commits(&self, wakeup: Wakeup, stop: CancellationToken) {
        let _ = (wakeup, stop);
    }
}
