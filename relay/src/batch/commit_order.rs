//! Noticing events published out of their aggregate's order: committed out
//! of id order, or acknowledged past an earlier event that failed.

use super::Dispatcher;
use crate::event::ClaimedEvent;
use crate::event::aggregate_key;

/// Aggregates remembered for the commit-order check before the memory is
/// cleared.
const COMMIT_ORDER_MEMORY: usize = 100_000;

impl Dispatcher {
    /// Warn about an event whose aggregate already had a later event
    /// published: its transaction committed after that later one's, which
    /// happens when producers write one aggregate from concurrent
    /// transactions without serializing them. The relay cannot restore the
    /// order; producers must serialize writes to one aggregate.
    pub(super) fn note_commit_order(&mut self, wave: &[ClaimedEvent]) {
        if self.last_published.len() > COMMIT_ORDER_MEMORY {
            self.last_published.clear();
        }
        for claimed in wave {
            // A retried event (attempts > 0) was held back on purpose.
            if claimed.event.attempts == 0
                && let Some(&later) = self.last_published.get(&aggregate_key(claimed))
                && later > claimed.event.id
            {
                tracing::warn!(
                    aggregate_type = %claimed.event.aggregate_type,
                    aggregate_id = %claimed.event.aggregate_id,
                    event_id = %claimed.event.event_id,
                    id = claimed.event.id,
                    later_published_id = later,
                    "event committed after a later event of its aggregate was published; \
                     serialize the producer's writes to one aggregate"
                );
            }
        }
    }
}

impl Dispatcher {
    /// `claimed` was acknowledged although an earlier event of its
    /// aggregate failed in the same batch, or in the batch in flight before
    /// it: both were in flight at once, so the failed one goes out again
    /// after it. The relay cannot take a
    /// stored event back; it says so and counts it.
    pub(super) fn note_published_out_of_order(&mut self, claimed: &ClaimedEvent) {
        self.metrics
            .record_published_out_of_order(&claimed.event.topic);
        tracing::warn!(
            aggregate_type = %claimed.event.aggregate_type,
            aggregate_id = %claimed.event.aggregate_id,
            event_id = %claimed.event.event_id,
            id = claimed.event.id,
            "event acknowledged after an earlier event of its aggregate failed while both \
             were in flight; that event is published again after it"
        );
    }
}
