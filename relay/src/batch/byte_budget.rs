//! The payload bytes the loop holds: one fetch and the batches in flight
//! together stay within `max_batch_bytes` (plus, at most, one event larger
//! than what was left: a fetch always returns its first event).
//!
//! The batches in flight take at most half of it: past that, the oldest
//! land before the next fetch (`in_flight.rs`), so a fetch always has half
//! of it at least. A batch fetched ahead while another is sent is fetched
//! only when a quarter is left.
//!
//! The database sums the sizes of the candidates of a fetch, and converts
//! every candidate's payload to text to do it, though it sends only those
//! that fit. So the number of candidates follows the payload size seen so
//! far: twice as many as fit at that size, and never more than
//! `batch_size`.

use super::Dispatcher;
use super::publish::SentBatch;
use crate::event::{ClaimedEvent, FetchLimit};

/// The payload bytes of `events`.
pub(super) fn payload_bytes(events: &[ClaimedEvent]) -> usize {
    events.iter().map(ClaimedEvent::payload_bytes).sum()
}

impl Dispatcher {
    /// The payload bytes of the batches in flight.
    pub(super) fn bytes_in_flight(&self) -> usize {
        self.in_flight.iter().map(SentBatch::bytes).sum()
    }

    /// Most payload bytes in flight before the oldest batches land.
    pub(super) fn max_bytes_in_flight(&self) -> usize {
        self.max_batch_bytes() / 2
    }

    fn max_batch_bytes(&self) -> usize {
        usize::try_from(self.settings.max_batch_bytes).unwrap_or(usize::MAX)
    }

    /// What the next fetch may return, besides the batches in flight and
    /// `also_held` bytes held elsewhere (the batch about to be sent);
    /// `None` when less than a quarter of `max_batch_bytes` is left.
    pub(super) fn fetch_limit(&self, also_held: usize) -> Option<FetchLimit> {
        let cap = self.max_batch_bytes();
        let held = self.bytes_in_flight().saturating_add(also_held);
        let room = cap.saturating_sub(held);
        if held > 0 && room < cap / 4 {
            return None;
        }
        let events = match self.bytes_per_event {
            Some(per_event) if per_event > 0 => {
                let fit = room / per_event;
                i64::try_from(fit.saturating_mul(2).saturating_add(1)).unwrap_or(i64::MAX)
            }
            _ => self.settings.batch_size,
        };
        Some(FetchLimit::new(
            events.clamp(1, self.settings.batch_size.max(1)),
            i64::try_from(room).unwrap_or(i64::MAX),
        ))
    }

    /// Note the batch `fetched` under `limit`: the payload size it shows,
    /// and whether more may be waiting (it filled the limit's events, or
    /// half its bytes).
    pub(super) fn note_fetched(&mut self, fetched: &[ClaimedEvent], limit: FetchLimit) -> bool {
        if fetched.is_empty() {
            return false;
        }
        let bytes = payload_bytes(fetched);
        self.bytes_per_event = Some(bytes / fetched.len());
        let events = i64::try_from(fetched.len()).unwrap_or(i64::MAX);
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        events >= limit.events || bytes.saturating_mul(2) >= limit.bytes
    }
}
