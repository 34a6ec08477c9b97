//! Fetching a batch, leaving out the events the relay still has in hand:
//! the batch in flight, and the events published whose mark is still in
//! flight.
//!
//! The ids left out travel in the statement's parameters, 12 bytes an id
//! on PostgreSQL, and the server compares every row it scans with them, so
//! they are kept to [`MAX_EXCLUDED_IDS`] (or one batch, when `batch_size`
//! is larger): the batches in flight are bounded by it too
//! (`in_flight.rs`), and past the bound the fetch first waits for the
//! oldest marks, which then need no exclusion at all. (The bound once also
//! kept the message under one TLS record, 16 KB: sqlx sets no
//! `TCP_NODELAY`, and a second record waited 40 ms for the server's
//! delayed acknowledgement. The store now sets it; see
//! `store/tcp_nodelay.rs`.)

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::publish::SentBatch;
use super::waves::aggregate_key;
use super::{Dispatcher, LoopState};
use crate::Error;
use crate::store::ClaimedEvent;

/// Most ids a fetch leaves out: 12 KB of parameters on PostgreSQL.
const MAX_EXCLUDED_IDS: usize = 1_000;

impl Dispatcher {
    /// Most ids a fetch leaves out: [`MAX_EXCLUDED_IDS`], or one batch when
    /// batches are larger.
    pub(super) fn max_excluded_ids(&self) -> usize {
        MAX_EXCLUDED_IDS.max(usize::try_from(self.settings.batch_size).unwrap_or(0))
    }

    /// Events in the batches in flight.
    pub(super) fn events_in_flight(&self) -> usize {
        self.in_flight.iter().map(SentBatch::len).sum()
    }

    /// Fetch a batch, leaving out the batches in flight and the events
    /// published but not yet marked, and land the batches in flight the
    /// broker answers for while the fetch runs (so a slow database does not
    /// hold up their accounting). First waits for the oldest marks while
    /// the ids to leave out are too many.
    ///
    /// An event whose aggregate had an event fail or stay unsent in a batch
    /// landed while the fetch ran is left out: the fetch could not see that
    /// failure, and the event must wait for the next fetch, which does.
    pub(super) async fn fetch(
        &mut self,
        partitions: &[i32],
        state: &mut LoopState,
        stop: &CancellationToken,
    ) -> Result<Vec<ClaimedEvent>, Error> {
        let landed_before_fetch = self.landed_count;
        self.fetch_started_after = Some(landed_before_fetch);
        let fetched = self.fetch_landing_answers(partitions, state, stop).await;
        self.fetch_started_after = None;
        let mut fetched = fetched?;
        if self.landed_count > landed_before_fetch {
            let failed = self.failed_since(landed_before_fetch);
            if !failed.is_empty() {
                fetched.retain(|claimed| !failed.contains(&aggregate_key(claimed)));
            }
        }
        Ok(fetched)
    }

    /// Fetch, landing the batches the broker answers for meanwhile.
    async fn fetch_landing_answers(
        &mut self,
        partitions: &[i32],
        state: &mut LoopState,
        stop: &CancellationToken,
    ) -> Result<Vec<ClaimedEvent>, Error> {
        let fetching = self.start_fetch(partitions).await;
        tokio::pin!(fetching);
        loop {
            let Some(oldest) = self.in_flight.front_mut() else {
                return fetching.await;
            };
            let fetched = tokio::select! {
                biased;
                fetched = &mut fetching => Some(fetched),
                () = oldest.answered() => None,
            };
            match fetched {
                Some(fetched) => return fetched,
                None => {
                    self.land_answered(state, stop).await;
                }
            }
        }
    }

    /// The fetch of the next batch, as a future owning what it needs.
    async fn start_fetch(
        &mut self,
        partitions: &[i32],
    ) -> impl Future<Output = Result<Vec<ClaimedEvent>, Error>> + use<> {
        let in_flight_count = self.events_in_flight();
        let bound = self.max_excluded_ids().max(in_flight_count);
        while self.unmarked.len() + in_flight_count > bound && !self.marking.is_empty() {
            self.settle_oldest_mark().await;
        }
        let exclude: Vec<i64> = self
            .unmarked
            .iter()
            .copied()
            .chain(
                self.in_flight
                    .iter()
                    .flat_map(|batch| batch.ids.iter().copied()),
            )
            .collect();
        let store = Arc::clone(&self.store);
        let partitions = partitions.to_vec();
        let partition_count = self.partition_count;
        let hold_dead = self.settings.hold_dead;
        let limit = self.settings.batch_size;
        async move {
            store
                .fetch_pending(partition_count, &partitions, &exclude, hold_dead, limit)
                .await
        }
    }
}
