//! Batches in flight: sent, their acknowledgements still to come.
//!
//! The loop keeps fetching and sending while the broker confirms, with up
//! to [`MAX_BATCHES_IN_FLIGHT`] batches in flight and no more events than
//! a fetch may leave out ([`Dispatcher::max_excluded_ids`]). It lands them
//! oldest first: as soon as the broker has answered for the oldest, when a
//! bound is reached, or when there is nothing new to send. Landing a batch
//! records its failures and starts its mark.

use std::collections::HashSet;

use tokio_util::sync::CancellationToken;

use super::publish::SentBatch;
use super::waves::AggregateKey;
use super::{Dispatcher, LoopState, quiet};

/// Most batches in flight at once. Small batches come one after the other
/// at a modest steady rate; this many keep being sent through a pause of
/// the broker's confirms (RabbitMQ's confirms of persistent messages wait
/// for its periodic disk sync).
pub(super) const MAX_BATCHES_IN_FLIGHT: usize = 16;

/// What landing a batch showed.
pub(super) struct Landed {
    /// Events in the batch.
    events: usize,
    /// The broker's error, when it took none of the batch's events.
    outage: Option<String>,
}

impl Dispatcher {
    /// Await the last acknowledgements of `sent`, record its failures and
    /// start the mark of its published events.
    pub(super) async fn land(&mut self, sent: SentBatch) -> Landed {
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
        self.settle(outcome, leases).await;
        Landed { events, outage }
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
        let mut last = None;
        while let Some(sent) = self.in_flight.pop_front() {
            last = Some(self.land(sent).await);
        }
        match last {
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
        let mut last = None;
        loop {
            let over_bounds = self.in_flight.len() > MAX_BATCHES_IN_FLIGHT
                || self.events_in_flight() > self.max_excluded_ids();
            let Some(oldest) = self.in_flight.front_mut() else {
                break;
            };
            if !over_bounds && !oldest.is_answered() {
                break;
            }
            let Some(sent) = self.in_flight.pop_front() else {
                break;
            };
            let landed = self.land(sent).await;
            let outage = landed.outage.is_some();
            last = Some(landed);
            if outage {
                // The broker took none of it: those sent behind it fare no
                // better. Land them all before backing off.
                while let Some(sent) = self.in_flight.pop_front() {
                    last = Some(self.land(sent).await);
                }
            }
        }
        match last {
            Some(landed) => self.react_to(landed, state, stop).await,
            None => false,
        }
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
