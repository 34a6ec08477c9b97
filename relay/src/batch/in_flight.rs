//! Landing a sent batch: await its last acknowledgements, record its
//! failures, start its mark, and react to what the broker did with it.

use tokio_util::sync::CancellationToken;

use super::publish::SentBatch;
use super::{Dispatcher, LoopState, quiet};

/// What landing a batch showed.
pub(super) struct Landed {
    /// Events in the batch.
    events: usize,
    /// The broker's error, when it took none of the batch's events.
    pub(super) outage: Option<String>,
}

impl Dispatcher {
    /// Await the last acknowledgements of `sent`, record its failures and
    /// start the mark of its published events.
    pub(super) async fn land(&mut self, sent: SentBatch) -> Landed {
        let failed_before = std::mem::take(&mut self.failed_in_last_landed);
        let leases = sent.leases.clone();
        let events = sent.len();
        let outcome = self.land_batch(sent, &failed_before).await;
        let outage = (outcome.unavailable == events).then(|| {
            outcome
                .first_unavailable
                .clone()
                .unwrap_or_else(|| "no event was sent".to_owned())
        });
        self.failed_in_last_landed = outcome.blocked.clone();
        self.settle(outcome, leases).await;
        Landed { events, outage }
    }

    /// Land the batch in flight, if any, and react to it.
    pub(super) async fn land_in_flight(&mut self, state: &mut LoopState, stop: &CancellationToken) {
        if let Some(sent) = self.in_flight.take() {
            let landed = self.land(sent).await;
            self.react_to(landed, state, stop).await;
        }
    }

    /// After a landed batch: back off when the broker took none of it (true),
    /// else note the success.
    pub(super) async fn react_to(
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
