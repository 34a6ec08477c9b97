//! The polling source: the SQL stores' fetch, marks and failures over
//! `outbox_events`, under partition leases, offered to the batch loop as
//! its [`EventSource`]. [`OutboxStore`] is such a store together with its
//! leases and operator reads: what a polling relay runs on.

use std::time::Duration;

use futures::future::BoxFuture;

use super::EventSource;
use crate::error::Error;
use crate::event::{ClaimedEvent, FailedAttempt, FetchLimit, Lease, Wakeup};
use crate::store::{Dialect, LeaseStore, OperatorStore, SqlStore};
use crate::tasks::Tasks;

/// Every statement a polling relay runs: what one database gives it.
pub trait OutboxStore: LeaseStore + EventSource + OperatorStore {}

impl<T: LeaseStore + EventSource + OperatorStore> OutboxStore for T {}

impl<D: Dialect> EventSource for SqlStore<D> {
    fn fetch_pending<'a>(
        &'a self,
        partition_count: i32,
        partitions: &'a [i32],
        exclude: &'a [i64],
        hold_dead: bool,
        limit: FetchLimit,
    ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>> {
        SqlStore::fetch_pending(self, partition_count, partitions, exclude, hold_dead, limit)
    }

    fn mark_published<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        SqlStore::mark_published(self, relay_id, partition_count, leases, ids)
    }

    fn record_failures<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        failures: &'a [FailedAttempt],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        SqlStore::record_failures(self, relay_id, partition_count, leases, failures)
    }

    fn watch_commits(&self, wakeup: Wakeup, tasks: &Tasks) {
        SqlStore::watch_commits(self, wakeup, tasks);
    }

    fn quiet_notifications<'a>(
        &'a self,
        relay_id: &'a str,
        window: Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        SqlStore::quiet_notifications(self, relay_id, window)
    }
}
