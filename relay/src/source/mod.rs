//! Where the batch loop gets committed events from, and where it settles
//! what the broker answered: the [`EventSource`] trait and its two
//! implementations.
//!
//! - `polling.rs`: the polling stores over the table, under partition
//!   leases ([`OutboxStore`] is a polling store with its leases and
//!   operator reads).
//! - `logical/`: committed inserts streamed from PostgreSQL's WAL.
//!
//! [`EventSource`] is the batch loop's one dependency on the database for
//! events; leases come from [`LeaseStore`](crate::leases::LeaseStore),
//! operator reads from [`OperatorStore`](crate::store::OperatorStore).
//!
//! Another source plugs into [`Relay`](crate::relay::Relay) with
//! [`Relay::with_event_source`](crate::relay::Relay::with_event_source) and keeps
//! the batch loop as it is, as long as it keeps the contract below. A
//! source with its own unit of work (the logical source's one replication
//! stream) also brings the leases of that unit, with
//! [`Relay::with_lease_store`](crate::relay::Relay::with_lease_store).

#[cfg(feature = "logical")]
pub mod logical;
mod polling;
mod slot_name;

use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::Error;
use crate::event::Wakeup;
use crate::event::{ClaimedEvent, FailedAttempt, Fence, FetchRequest};
use crate::tasks::Tasks;

pub use polling::OutboxStore;
pub use slot_name::{DEFAULT_SLOT, SlotName};

/// What [`EventSource::fetch_pending`] answers: the events fetched.
pub type Fetched<'a> = BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>>;

/// What [`EventSource::mark_published`] and
/// [`EventSource::record_failures`] answer: the rows they changed.
pub type Written<'a> = BoxFuture<'a, Result<u64, Error>>;

/// Payload bytes the relay holds for publishing at once, unless
/// `max_batch_bytes` says otherwise: 32 MiB.
pub const DEFAULT_MAX_BATCH_BYTES: u64 = 32 << 20;

/// Committed events in order, acknowledgement of published ones, and
/// recording of failed ones.
///
/// The contract the batch loop relies on:
/// - **Order.** [`EventSource::fetch_pending`] returns each aggregate's
///   events in the order they must be published, and never an event whose
///   aggregate has an earlier event that failed and waits for its retry
///   (or is dead, with `hold_dead`).
/// - **Exclusivity.** Events of one partition are handed only to the relay
///   holding that partition's lease; a source without partitions treats
///   `partitions` as the work this relay holds (one pseudo-partition for a
///   single stream).
/// - **Fencing.** [`EventSource::mark_published`] and
///   [`EventSource::record_failures`] change nothing for events whose lease
///   is no longer one of `leases`, and say so by the count they return.
/// - **At least once.** An event not acknowledged and not recorded as
///   failed is fetched again later, by this relay or by the next holder.
pub trait EventSource: Send + Sync {
    /// The pending events `request` asks for: due, of its partitions, in id
    /// order, within its limit (the first event whatever its size), leaving
    /// out its excluded ids. An event is also left out while an earlier
    /// event of its aggregate waits for a retry, or is dead and the request
    /// holds dead events back.
    fn fetch_pending<'a>(&'a self, request: FetchRequest<'a>) -> Fetched<'a>;

    /// Mark `ids` published under `fence`: only where the lease of the
    /// row's partition is one of the fence's, held by its relay and
    /// unexpired. Returns the rows marked; fewer than `ids.len()` means a
    /// lease was lost.
    fn mark_published<'a>(&'a self, fence: Fence<'a>, ids: &'a [i64]) -> Written<'a>;

    /// Settle `ids` under `fence` as [`EventSource::mark_published`] does,
    /// deleting the rows rather than marking them, where the source can:
    /// the mark of `retention.published = "0s"`, which leaves nothing to
    /// replay. Returns the rows deleted. The default marks them.
    fn delete_acknowledged<'a>(&'a self, fence: Fence<'a>, ids: &'a [i64]) -> Written<'a> {
        self.mark_published(fence, ids)
    }

    /// Record failed attempts under `fence`, like
    /// [`EventSource::mark_published`]. Returns the rows updated.
    fn record_failures<'a>(&'a self, fence: Fence<'a>, failed: &'a [FailedAttempt]) -> Written<'a>;

    /// Raise `wakeup` whenever events are committed, until `tasks` is
    /// cancelled, where the database can say so (PostgreSQL's `NOTIFY`).
    /// A source spawns its background work on `tasks`. The default does
    /// nothing: the batch loop then polls.
    fn watch_commits(&self, wakeup: Wakeup, tasks: &Tasks) {
        let _ = (wakeup, tasks);
    }

    /// Tell the database that relay `relay_id` polls on its own for
    /// `window`, so producers need not notify it of commits meanwhile
    /// (PostgreSQL: a `NOTIFY` queues the commits of every notifying
    /// transaction one behind the other). Returns whether the database has
    /// such notifications; the default has none.
    fn quiet_notifications<'a>(
        &'a self,
        relay_id: &'a str,
        window: Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        let _ = (relay_id, window);
        Box::pin(std::future::ready(Ok(false)))
    }

    /// Whether the batch loop needs commit notifications to learn of new
    /// events while idle: true when polling. A source that is told of
    /// commits another way (a replication stream) keeps the producers'
    /// notifications quiet for as long as it runs.
    fn waits_for_notifications(&self) -> bool {
        true
    }
}
