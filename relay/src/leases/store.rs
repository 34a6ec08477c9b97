//! [`LeaseStore`]: partition leases with fencing tokens, and the heartbeats
//! that tell each relay instance how many others are live.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::Error;
use crate::event::Lease;

/// What [`LeaseStore::renew_leases`] and [`LeaseStore::acquire_leases`]
/// answer: the leases now held.
pub type Leased<'a> = BoxFuture<'a, Result<Vec<Lease>, Error>>;

/// The lease statements. Time is the database's clock (`now()`), never the
/// relay's, so instances on different hosts agree on lease expiry.
pub trait LeaseStore: Send + Sync {
    /// How many partitions the table is split into (rows of
    /// `outbox_partitions`).
    fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>>;

    /// Record that `relay_id` is alive for `ttl`, forget relays dead for a
    /// while, and return the number of live relays (this one included).
    fn heartbeat<'a>(
        &'a self,
        relay_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<i64, Error>>;

    /// Forget `relay_id` (on shutdown, or when it hands its partitions over).
    fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>>;

    /// Extend `leases` by `ttl` where they are still held; returns the leases
    /// that were extended. A lease missing from the result is lost.
    fn renew_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
        ttl: Duration,
    ) -> Leased<'a>;

    /// Take up to `limit` partitions whose lease is free or expired, bumping
    /// their tokens; returns the new leases. Concurrent callers never take
    /// the same partition.
    fn acquire_leases<'a>(&'a self, relay_id: &'a str, limit: i64, ttl: Duration) -> Leased<'a>;

    /// Give up `leases` (still fenced: a lease already lost is untouched).
    fn release_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
    ) -> BoxFuture<'a, Result<u64, Error>>;
}
