//! Batches in flight: sent, their acknowledgements still to come.
//!
//! The loop keeps fetching and sending while the broker confirms, with up
//! to [`MAX_BATCHES_IN_FLIGHT`] batches in flight, no more events than
//! a fetch may leave out ([`Dispatcher::max_excluded_ids`]) and no more
//! than half of `max_batch_bytes` (`byte_budget.rs`). It lands them
//! oldest first: as soon as the broker has answered for the oldest, when a
//! bound is reached, or when there is nothing new to send. Landing a batch
//! records its failures and starts its mark.

use std::collections::HashSet;

use tokio_util::sync::CancellationToken;

use super::publish::{BatchOutcome, SentBatch};
use super::{Dispatcher, LoopState, quiet};
use crate::event::AggregateKey;
use crate::event::Lease;

/// Most batches in flight at once. At a modest steady rate, batches of a
/// few events follow one another closely; this many keep being sent
/// through a pause of the broker's confirms (RabbitMQ confirms persistent
/// messages after its disk sync, which can take 100 ms and more). The
/// events in flight are bounded too ([`Dispatcher::max_excluded_ids`]).
pub(super) const MAX_BATCHES_IN_FLIGHT: usize = 256;

/// What landing a batch showed.
pub(super) struct Landed {
    /// Events in the batch.
    events: usize,
    /// The broker's error, when it took none of the batch's events.
    outage: Option<String>,
}

impl Dispatcher {
    /// Land `batches`, oldest first: await their acknowledgements, then
    /// record their failures and mark their published events together (one
    /// statement for batches fetched under the same leases, as they are
    /// between two rebalances). Returns what the last one showed.
    pub(super) async fn land_together(&mut self, batches: Vec<SentBatch>) -> Option<Landed> {
        let mut last = None;
        let mut pending: Option<(BatchOutcome, Vec<Lease>)> = None;
        for sent in batches {
            let (landed, outcome, leases) = self.account_for_landing(sent).await;
            last = Some(landed);
            pending = match pending {
                Some((mut merged, merged_leases)) if merged_leases == leases => {
                    merged.absorb(outcome);
                    Some((merged, merged_leases))
                }
                Some((earlier, earlier_leases)) => {
                    self.settle(earlier, earlier_leases).await;
                    Some((outcome, leases))
                }
                None => Some((outcome, leases)),
            };
        }
        if let Some((outcome, leases)) = pending {
            self.settle(outcome, leases).await;
        }
        last
    }

    /// Await the last acknowledgements of `sent` and account for them.
    async fn account_for_landing(&mut self, sent: SentBatch) -> (Landed, BatchOutcome, Vec<Lease>) {
        let failed_before = self.failed_since(sent.landed_before_send);
        let leases = sent.leases.clone();
        let events = sent.len();
        let outcome = self.land_batch(sent, &failed_before).await;
        let outage = (outcome.unavailable == events).then(|| {
            outcome
                .first_unavailable
                .clone()
                .unwrap_or_else(|| "no event was sent".to_owned())
        });
        self.landed_count += 1;
        if !outcome.blocked.is_empty() {
            self.landed_failures
                .push_back((self.landed_count, outcome.blocked.clone()));
        }
        self.forget_failures_no_batch_needs();
        (Landed { events, outage }, outcome, leases)
    }

    /// Aggregates with an event that failed or stayed unsent in a batch
    /// that landed after `landed_before_send` batches had.
    pub(super) fn failed_since(&self, landed_before_send: u64) -> HashSet<AggregateKey> {
        self.landed_failures
            .iter()
            .filter(|(landed, _)| *landed > landed_before_send)
            .flat_map(|(_, aggregates)| aggregates.iter().cloned())
            .collect()
    }

    /// Drop the failures no batch in flight, nor a fetch running, needs:
    /// those of batches that landed before they were sent or started.
    fn forget_failures_no_batch_needs(&mut self) {
        let needed_after = self
            .in_flight
            .front()
            .map(|oldest| oldest.landed_before_send)
            .into_iter()
            .chain(self.fetch_started_after)
            .min();
        match needed_after {
            Some(needed_after) => self
                .landed_failures
                .retain(|(landed, _)| *landed > needed_after),
            None => self.landed_failures.clear(),
        }
    }

    /// Land every batch in flight, oldest first, and react to the last one.
    /// True when it backed off after an outage.
    pub(super) async fn land_all(
        &mut self,
        state: &mut LoopState,
        stop: &CancellationToken,
    ) -> bool {
        let batches: Vec<SentBatch> = self.in_flight.drain(..).collect();
        match self.land_together(batches).await {
            Some(landed) => self.react_to(landed, state, stop).await,
            None => false,
        }
    }

    /// Land the batches in flight the broker has answered for, oldest
    /// first up to the first still waiting, and the oldest ones past the
    /// bounds; after an outage, every one. True when it backed off after
    /// an outage.
    pub(super) async fn land_answered(
        &mut self,
        state: &mut LoopState,
        stop: &CancellationToken,
    ) -> bool {
        let mut answered = Vec::new();
        loop {
            let over_bounds = self.in_flight.len() > MAX_BATCHES_IN_FLIGHT
                || self.events_in_flight() > self.max_excluded_ids()
                || self.bytes_in_flight() > self.max_bytes_in_flight();
            let Some(oldest) = self.in_flight.front_mut() else {
                break;
            };
            if !over_bounds && !oldest.is_answered() {
                break;
            }
            answered.extend(self.in_flight.pop_front());
        }
        let Some(mut last) = self.land_together(answered).await else {
            return false;
        };
        if (last.outage.is_some() || self.stream_lost) && !self.in_flight.is_empty() {
            // The broker took none of it, or the client may have lost an
            // event of it: those sent behind it count as not sent. Land
            // them all before anything new is sent, so the lost events go
            // out again first, in id order.
            let rest: Vec<SentBatch> = self.in_flight.drain(..).collect();
            if let Some(rest_last) = self.land_together(rest).await {
                last = rest_last;
            }
        }
        self.react_to(last, state, stop).await
    }

    /// Nothing new to send: wait until the broker answers for the oldest
    /// batch in flight or new events are announced (at most
    /// `poll_interval_min`), then land what was answered.
    pub(super) async fn wait_for_answers(
        &mut self,
        state: &mut LoopState,
        stop: &CancellationToken,
    ) {
        if let Some(oldest) = self.in_flight.front_mut() {
            tokio::select! {
                () = oldest.answered() => {}
                () = self.wakeup.wait(self.settings.poll_interval_min) => {}
                () = stop.cancelled() => {}
            }
        }
        self.land_answered(state, stop).await;
    }

    /// After a landed batch: back off when the broker took none of it (true),
    /// else note the success.
    async fn react_to(
        &mut self,
        landed: Landed,
        state: &mut LoopState,
        stop: &CancellationToken,
    ) -> bool {
        if let Some(error) = landed.outage {
            self.back_off_after_outage(state, stop, &error, landed.events)
                .await;
            return true;
        }
        self.health.record_success();
        self.next_stall_check = None;
        state.outage_delay = std::time::Duration::ZERO;
        self.keep_notifications_quiet(landed.events >= quiet::QUIET_AFTER_BATCH)
            .await;
        false
    }
}
