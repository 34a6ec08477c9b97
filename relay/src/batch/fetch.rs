//! Fetching a batch, leaving out the events the relay still has in hand:
//! the batches in flight, and the events published whose mark is still in
//! flight. When a full batch is sent, the next one is fetched beside its
//! send ([`Dispatcher::prefetch_after`]).
//!
//! The ids left out travel in the statement's parameters, 12 bytes an id
//! on PostgreSQL, and the server compares every row it scans with them, so
//! they are kept few: the batches in flight are bounded to
//! [`MAX_EXCLUDED_IDS`] events (or one batch, when `batch_size` is larger;
//! `in_flight.rs`), and the unmarked events with the batch being sent to
//! as many again: past that, the fetch first waits for the oldest marks,
//! which then need no exclusion at all. (The bound once also
//! kept the message under one TLS record, 16 KB: sqlx 0.9.0 set no
//! `TCP_NODELAY`, and a second record waited 40 ms for the server's
//! delayed acknowledgement. sqlx sets it again from 0.9.1;
//! `tests/database_sockets.rs` checks it.)

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::byte_budget::payload_bytes;
use super::publish::SentBatch;
use super::{Dispatcher, LoopState};
use crate::error::Error;
use crate::event::FetchRequest;
use crate::event::aggregate_key;
use crate::event::{ClaimedEvent, FetchLimit, Lease};

/// Most ids a fetch leaves out: 12 KB of parameters on PostgreSQL.
const MAX_EXCLUDED_IDS: usize = 1_000;

/// A batch being fetched while the previous one is sent, in a task of its
/// own, with the leases it is fetched under and how many batches had landed
/// when it started.
pub(super) struct Prefetched {
    leases: Vec<Lease>,
    limit: FetchLimit,
    task: JoinHandle<Result<Vec<ClaimedEvent>, Error>>,
    landed_before_fetch: u64,
}

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
    ///
    /// The batch fetched ahead while the previous one was sent
    /// ([`Dispatcher::prefetch_after`]) is taken when it was fetched under
    /// `leases`.
    pub(super) async fn fetch(
        &mut self,
        leases: &[Lease],
        state: &mut LoopState,
        stop: &CancellationToken,
    ) -> Result<Vec<ClaimedEvent>, Error> {
        let (landed_before_fetch, limit, fetching): (u64, FetchLimit, BoxFuture<'static, _>) =
            match self.prefetched.take() {
                Some(prefetched) if prefetched.leases == leases => {
                    let task = prefetched.task;
                    let fetching =
                        async move { task.await.map_err(|error| Error::Io(error.into()))? };
                    (
                        prefetched.landed_before_fetch,
                        prefetched.limit,
                        Box::pin(fetching),
                    )
                }
                other => {
                    if let Some(stale) = other {
                        stale.task.abort();
                    }
                    if self.bytes_in_flight() > self.max_bytes_in_flight() {
                        self.land_answered(state, stop).await;
                    }
                    // Within half of `max_batch_bytes` in flight, a quarter
                    // is left at least; past it, one event.
                    let limit = self.fetch_limit(0).unwrap_or(FetchLimit::new(1, 0));
                    let landed_before_fetch = self.landed_count;
                    self.fetch_started_after = Some(landed_before_fetch);
                    let partitions: Vec<i32> =
                        leases.iter().map(|lease| lease.partition_no).collect();
                    let fetching = self.start_fetch(&partitions, &[], limit).await;
                    (landed_before_fetch, limit, Box::pin(fetching))
                }
            };
        let fetched = self.fetch_landing_answers(fetching, state, stop).await;
        self.fetch_started_after = None;
        let mut fetched = fetched?;
        self.more_waiting = self.note_fetched(&fetched, limit);
        if self.landed_count > landed_before_fetch {
            let failed = self.failed_since(landed_before_fetch);
            if !failed.is_empty() {
                fetched.retain(|claimed| !failed.contains(&aggregate_key(claimed)));
            }
        }
        Ok(fetched)
    }

    /// Start fetching, in a task of its own, the batch after `current`,
    /// which is about to be sent; [`Dispatcher::fetch`] takes its result.
    /// It leaves out `current` too. Nothing is fetched ahead when less than
    /// a quarter of `max_batch_bytes` is left beside `current` and the
    /// batches in flight.
    pub(super) async fn prefetch_after(&mut self, leases: &[Lease], current: &[ClaimedEvent]) {
        self.drop_prefetched();
        let Some(limit) = self.fetch_limit(payload_bytes(current)) else {
            return;
        };
        let landed_before_fetch = self.landed_count;
        self.fetch_started_after = Some(landed_before_fetch);
        let partitions: Vec<i32> = leases.iter().map(|lease| lease.partition_no).collect();
        let current: Vec<i64> = current.iter().map(|claimed| claimed.event.id).collect();
        let fetching = self.start_fetch(&partitions, &current, limit).await;
        self.prefetched = Some(Prefetched {
            leases: leases.to_vec(),
            limit,
            task: self.tasks.spawn(fetching),
            landed_before_fetch,
        });
    }

    /// Forget the batch fetched ahead: the leases changed, or the broker is
    /// down and it would be stale by the time it is sent.
    pub(super) fn drop_prefetched(&mut self) {
        if let Some(prefetched) = self.prefetched.take() {
            prefetched.task.abort();
            self.fetch_started_after = None;
        }
    }

    /// Await `fetching`, landing the batches the broker answers for
    /// meanwhile.
    async fn fetch_landing_answers(
        &mut self,
        fetching: BoxFuture<'static, Result<Vec<ClaimedEvent>, Error>>,
        state: &mut LoopState,
        stop: &CancellationToken,
    ) -> Result<Vec<ClaimedEvent>, Error> {
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

    /// The fetch of the next batch within `limit`, as a future owning what
    /// it needs. It leaves out `also_exclude` besides the batches in flight
    /// and the unmarked events.
    async fn start_fetch(
        &mut self,
        partitions: &[i32],
        also_exclude: &[i64],
        limit: FetchLimit,
    ) -> impl Future<Output = Result<Vec<ClaimedEvent>, Error>> + use<> {
        // The batches in flight are left out on top of the bound: they are
        // bounded by it too (`in_flight.rs`).
        while self.unmarked.len() + also_exclude.len() > self.max_excluded_ids()
            && !self.marking.is_empty()
        {
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
            .chain(also_exclude.iter().copied())
            .collect();
        let store = Arc::clone(&self.store);
        let partitions = partitions.to_vec();
        let partition_count = self.partition_count;
        let hold_dead = self.settings.hold_dead;
        async move {
            let started = std::time::Instant::now();
            let fetched = store
                .fetch_pending(FetchRequest {
                    partition_count,
                    partitions: &partitions,
                    exclude: &exclude,
                    hold_dead,
                    limit,
                })
                .await;
            if let Ok(events) = &fetched {
                tracing::debug!(
                    events = events.len(),
                    excluded = exclude.len(),
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "fetched"
                );
            }
            fetched
        }
    }
}
