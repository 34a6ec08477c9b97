//! Fetching a batch, and fetching the next one while a batch publishes.
//!
//! A fetch leaves out the events published whose mark is still in flight,
//! by id. The list travels in the statement's parameters, 12 bytes an id
//! on PostgreSQL, and the server compares every row it scans with it, so
//! it is kept to [`MAX_EXCLUDED_IDS`] (or the batch in hand, when
//! `batch_size` is larger). Past the bound, the fetch first waits for the
//! oldest marks, which then need no exclusion at all. (The bound once also
//! kept the message under one TLS record, 16 KB: sqlx sets no
//! `TCP_NODELAY`, and a second record waited 40 ms for the server's
//! delayed acknowledgement. The store now sets it; see
//! `store/tcp_nodelay.rs`.)

use std::sync::Arc;

use super::Dispatcher;
use super::marker::SettledMark;
use crate::Error;
use crate::store::{ClaimedEvent, Lease};

/// Most ids a fetch leaves out: 12 KB of parameters on PostgreSQL.
const MAX_EXCLUDED_IDS: usize = 1_000;

/// A batch fetched ahead, and the leases it was fetched under: it is used
/// only while exactly those leases are held.
pub(super) struct Prefetched {
    pub(super) leases: Vec<Lease>,
    pub(super) events: Vec<ClaimedEvent>,
}

impl Dispatcher {
    /// Fetch a batch, leaving out events published but not yet marked;
    /// first waits for the oldest marks while they are too many to leave
    /// out.
    pub(super) async fn fetch(&mut self, partitions: &[i32]) -> Result<Vec<ClaimedEvent>, Error> {
        while self.unmarked.len() > MAX_EXCLUDED_IDS {
            self.settle_oldest_mark().await;
        }
        let unmarked: Vec<i64> = self.unmarked.iter().copied().collect();
        self.store
            .fetch_pending(
                self.partition_count,
                partitions,
                &unmarked,
                self.settings.hold_dead,
                self.settings.batch_size,
            )
            .await
    }

    /// A future fetching the batch after `current`, owning what it needs so
    /// it can run beside [`Dispatcher::publish_batch`]. It leaves out
    /// `current` and the unmarked events; when they are more than
    /// [`MAX_EXCLUDED_IDS`], it takes the oldest marks in flight and awaits
    /// them before fetching, and returns them for
    /// [`Dispatcher::account_for_marks`]. A failed prefetch is logged and
    /// yields no batch; the loop then fetches as usual.
    pub(super) fn prefetch(
        &mut self,
        leases: Vec<Lease>,
        current: &[ClaimedEvent],
    ) -> impl std::future::Future<Output = (Option<Prefetched>, Vec<SettledMark>)> + use<> {
        let mut awaited = Vec::new();
        while self.unmarked.len() + current.len() > MAX_EXCLUDED_IDS {
            let Some(mark) = self.take_oldest_mark() else {
                break;
            };
            awaited.push(mark);
        }
        let store = Arc::clone(&self.store);
        let partitions: Vec<i32> = leases.iter().map(|lease| lease.partition_no).collect();
        let exclude: Vec<i64> = self
            .unmarked
            .iter()
            .copied()
            .chain(current.iter().map(|claimed| claimed.event.id))
            .collect();
        let partition_count = self.partition_count;
        let hold_dead = self.settings.hold_dead;
        let limit = self.settings.batch_size;
        async move {
            let mut settled = Vec::with_capacity(awaited.len());
            for (ids, task) in awaited {
                settled.push((ids, task.await));
            }
            let fetched = match store
                .fetch_pending(partition_count, &partitions, &exclude, hold_dead, limit)
                .await
            {
                Ok(events) => Some(Prefetched { leases, events }),
                Err(error) => {
                    tracing::warn!(%error, "prefetching the next batch failed");
                    None
                }
            };
            (fetched, settled)
        }
    }
}
