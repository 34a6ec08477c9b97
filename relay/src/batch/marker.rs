//! Marks in flight: each batch's acknowledged events are marked published
//! by one fenced statement in the background, overlapped with the next
//! batches, and left out of fetches until their mark settles.

use std::sync::Arc;

use tokio::task::{JoinError, JoinHandle};

use super::Dispatcher;
use super::publish::BatchOutcome;
use crate::error::Error;
use crate::event::Fence;
use crate::event::Lease;

/// A mark in flight: the ids it was given and its task, which returns the
/// rows it marked.
pub(super) type MarkInFlight = (Vec<i64>, JoinHandle<Result<u64, Error>>);

/// A mark that finished: its ids and what its task returned.
pub(super) type SettledMark = (Vec<i64>, Result<Result<u64, Error>, JoinError>);

/// Marks of earlier batches that may run while the next batch publishes:
/// each is one fenced `UPDATE`, so several overlap on the database.
const MAX_MARKS_IN_FLIGHT: usize = 3;

impl Dispatcher {
    /// Record failures now; mark successes in the background, overlapped
    /// with the next batches.
    pub(super) async fn settle(&mut self, outcome: BatchOutcome, leases: Vec<Lease>) {
        if !outcome.rejected.is_empty() {
            self.record_rejections(&outcome.rejected, &leases).await;
        }
        if outcome.published.is_empty() {
            return;
        }
        while self.marking.len() >= MAX_MARKS_IN_FLIGHT {
            self.settle_oldest_mark().await;
        }
        self.unmarked.extend(outcome.published.iter().copied());
        let store = Arc::clone(&self.store);
        let relay_id = self.leases.relay_id().to_owned();
        let partition_count = self.partition_count;
        let ids = outcome.published;
        let task_ids = ids.clone();
        let delete = self.settings.delete_acknowledged;
        let task = self.tasks.spawn(async move {
            let fence = Fence {
                relay_id: &relay_id,
                partition_count,
                leases: &leases,
            };
            if delete {
                store.delete_acknowledged(fence, &task_ids).await
            } else {
                store.mark_published(fence, &task_ids).await
            }
        });
        self.marking.push_back((ids, task));
    }

    /// Wait for every mark in flight and account for it.
    pub(super) async fn finish_marking(&mut self) {
        while !self.marking.is_empty() {
            self.settle_oldest_mark().await;
        }
    }

    /// Wait for the oldest mark in flight and account for it.
    pub(super) async fn settle_oldest_mark(&mut self) {
        let Some((ids, task)) = self.take_oldest_mark() else {
            return;
        };
        let result = task.await;
        self.account_for_marks(vec![(ids, result)]);
    }

    /// Take the oldest mark in flight off the list, its ids no longer left
    /// out of fetches: whoever takes it awaits it before fetching, and
    /// accounts for it with [`Dispatcher::account_for_marks`].
    pub(super) fn take_oldest_mark(&mut self) -> Option<MarkInFlight> {
        let (ids, task) = self.marking.pop_front()?;
        for id in &ids {
            self.unmarked.remove(id);
        }
        Some((ids, task))
    }

    /// Account for marks that finished: published totals, stale marks.
    pub(super) fn account_for_marks(&mut self, settled: Vec<SettledMark>) {
        for (ids, result) in settled {
            match result {
                Ok(Ok(marked)) => {
                    self.totals.published += marked;
                    let stale = ids.len() as u64 - marked.min(ids.len() as u64);
                    if stale > 0 {
                        self.totals.stale_marks += stale;
                        self.metrics.record_stale_marks(stale);
                        tracing::warn!(
                            stale,
                            "published events not marked: their partition lease was lost (they will be published again)"
                        );
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, events = ids.len(), "marking published events failed; they will be published again");
                }
                Err(error) => {
                    tracing::error!(%error, events = ids.len(), "the marking task failed; the events will be published again");
                }
            }
        }
    }
}
