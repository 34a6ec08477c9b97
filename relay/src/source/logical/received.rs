//! [`Received`]: events the stream delivered and the batch loop has not
//! settled yet, shared by the stream task (which appends whole committed
//! transactions) and the event source (which hands them out, settles them
//! and confirms the positions they free).

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::acknowledgements::{AcknowledgementTracker, WalPosition};
use crate::event::ClaimedEvent;
use crate::event::Wakeup;

/// Events held in memory before the stream stops reading: the server keeps
/// the rest in the slot. Their payload bytes are bounded too
/// ([`Received::with_max_bytes`]).
pub(crate) const MAX_RECEIVED_EVENTS: usize = 50_000;

/// The state of the stream one lease acquisition runs.
#[derive(Debug, Default)]
pub(crate) struct ReceivedState {
    /// Unsettled events in commit order.
    pub(crate) events: VecDeque<ClaimedEvent>,
    /// The payload bytes of `events`.
    pub(crate) bytes: usize,
    /// Which positions may be confirmed.
    pub(crate) tracker: AcknowledgementTracker,
}

/// Shared between the stream task and the event source.
#[derive(Debug)]
pub(crate) struct Received {
    state: Mutex<ReceivedState>,
    /// Raised when events arrive.
    wakeup: Mutex<Option<Wakeup>>,
    /// The position to confirm to the server, read by the stream task.
    confirmed: watch::Sender<WalPosition>,
    /// Raised when events are settled, so a full buffer reads on.
    room: Notify,
    /// Since when the stream has failed to open, without a session started
    /// since.
    failing_since: Mutex<Option<Instant>>,
    /// The payload bytes past which the buffer is full.
    max_bytes: usize,
}

impl Default for Received {
    fn default() -> Self {
        Received::with_max_bytes(
            usize::try_from(crate::source::DEFAULT_MAX_BATCH_BYTES).unwrap_or(usize::MAX),
        )
    }
}

impl Received {
    /// A buffer that is full once its events' payloads add up to
    /// `max_bytes` (or it holds [`MAX_RECEIVED_EVENTS`]). The stream adds
    /// whole transactions, so one transaction larger than that is still
    /// taken, alone.
    pub(crate) fn with_max_bytes(max_bytes: usize) -> Self {
        Received {
            max_bytes,
            state: Mutex::default(),
            wakeup: Mutex::default(),
            confirmed: watch::Sender::new(0),
            room: Notify::new(),
            failing_since: Mutex::default(),
        }
    }

    /// The state, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ReceivedState> {
        // Every writer replaces or appends whole values: a panic cannot
        // leave the state half written.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Start a stream session at the slot's confirmed position: what an
    /// earlier session received and did not settle is streamed again.
    pub(crate) fn begin_session(&self, confirmed: WalPosition) {
        let mut state = self.lock();
        state.events.clear();
        state.bytes = 0;
        state.tracker = AcknowledgementTracker::starting_at(confirmed);
        self.confirmed.send_replace(confirmed);
    }

    /// No stream runs any more: forget what it received.
    pub(crate) fn end_session(&self) {
        let mut state = self.lock();
        state.events.clear();
        state.bytes = 0;
        state.tracker = AcknowledgementTracker::default();
        self.room.notify_waiters();
    }

    /// A committed transaction ending at `end` with `events`.
    pub(crate) fn push_transaction(&self, end: WalPosition, events: Vec<ClaimedEvent>) {
        let has_events = !events.is_empty();
        let moved = {
            let mut state = self.lock();
            let moved = state
                .tracker
                .record_transaction(end, events.iter().map(|claimed| claimed.event.id));
            state.bytes += events
                .iter()
                .map(ClaimedEvent::payload_bytes)
                .sum::<usize>();
            state.events.extend(events);
            moved
        };
        if let Some(position) = moved {
            self.confirmed.send_replace(position);
        }
        if has_events && let Some(wakeup) = self.wakeup_handle() {
            wakeup.wake();
        }
    }

    /// The server reports `position` between transactions.
    pub(crate) fn observe_idle_position(&self, position: WalPosition) {
        let moved = self.lock().tracker.observe_idle_position(position);
        if let Some(position) = moved {
            self.confirmed.send_replace(position);
        }
    }

    /// Settle `ids`; returns how many were unsettled events of the stream.
    pub(crate) fn settle(&self, ids: &[i64]) -> u64 {
        let (settled, moved) = {
            let mut state = self.lock();
            let (settled, moved) = state.tracker.settle(ids);
            if settled > 0 {
                let removed = remove_settled(&mut state.events, ids, settled);
                state.bytes = state.bytes.saturating_sub(removed);
            }
            (settled, moved)
        };
        if let Some(position) = moved {
            self.confirmed.send_replace(position);
        }
        self.room.notify_waiters();
        settled
    }

    /// Whether the buffer is full: by count, or by payload bytes.
    pub(crate) fn is_full(&self) -> bool {
        let state = self.lock();
        state.events.len() >= MAX_RECEIVED_EVENTS || state.bytes >= self.max_bytes
    }

    /// Completes once events are settled after this call. Take it before
    /// checking [`Received::is_full`]: a settle between the check and the
    /// wait's first poll then still wakes the wait (`notify_waiters` keeps
    /// no permit for a wait begun after it).
    pub(crate) fn room_made(&self) -> Notified<'_> {
        self.room.notified()
    }

    /// Follow the position to confirm.
    pub(crate) fn confirmed_positions(&self) -> watch::Receiver<WalPosition> {
        self.confirmed.subscribe()
    }

    /// A session failed or could not start.
    pub(crate) fn note_stream_failed(&self) {
        self.failing_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get_or_insert_with(Instant::now);
    }

    /// Forget past failures: a session started (the server accepted
    /// `START_REPLICATION`), or the stream starts anew.
    pub(crate) fn clear_stream_failure(&self) {
        *self
            .failing_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// How long the stream has failed to open, if it has.
    pub(crate) fn failing_for(&self) -> Option<std::time::Duration> {
        self.failing_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .map(|since| since.elapsed())
    }

    /// Raise `wakeup` whenever events arrive.
    pub(crate) fn set_wakeup(&self, wakeup: Wakeup) {
        *self
            .wakeup
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(wakeup);
    }

    /// Raise the wakeup now: events to publish are waiting elsewhere (the
    /// table path).
    pub(crate) fn wake(&self) {
        if let Some(wakeup) = self.wakeup_handle() {
            wakeup.wake();
        }
    }

    fn wakeup_handle(&self) -> Option<Wakeup> {
        self.wakeup
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// Remove from `events` the `settled` of `ids` that the tracker had
/// unsettled. Batches are settled in the order they were handed out, so
/// they are almost always at the front: those are popped, and the rest of
/// the buffer (up to [`MAX_RECEIVED_EVENTS`]) is scanned only when some are
/// left, after a failure or a hold settled events out of order. Returns
/// the payload bytes removed.
fn remove_settled(events: &mut VecDeque<ClaimedEvent>, ids: &[i64], settled: u64) -> usize {
    let mut left: HashSet<i64> = ids.iter().copied().collect();
    let mut found: u64 = 0;
    let mut removed = 0;
    while let Some(front) = events.front() {
        if !left.remove(&front.event.id) {
            break;
        }
        removed += events
            .pop_front()
            .as_ref()
            .map_or(0, ClaimedEvent::payload_bytes);
        found += 1;
    }
    if found < settled {
        events.retain(|claimed| {
            let settles = left.contains(&claimed.event.id);
            if settles {
                removed += claimed.payload_bytes();
            }
            !settles
        });
    }
    removed
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[test]
    fn a_settle_between_the_check_and_the_wait_still_wakes_the_stream() {
        let received = received_one_to_six();
        // The stream takes the wait, checks the buffer, and only then polls
        // the wait: the batch loop settles events in between.
        let room_made = received.room_made();
        received.settle(&[1, 2]);
        assert_eq!(
            room_made.now_or_never(),
            Some(()),
            "the settle before the first poll must not be missed"
        );
        // A wait taken after the settle waits for the next one.
        assert_eq!(received.room_made().now_or_never(), None);
    }

    /// A session holding events 1 to 6, in three transactions of two.
    fn received_one_to_six() -> Received {
        let received = Received::default();
        received.begin_session(100);
        for (end, ids) in [(200, [1, 2]), (300, [3, 4]), (400, [5, 6])] {
            let events = ids
                .iter()
                .map(|&id| ClaimedEvent::for_test(id, "a", "orders"))
                .collect();
            received.push_transaction(end, events);
        }
        received
    }

    fn buffered(received: &Received) -> Vec<i64> {
        let state = received.lock();
        state
            .events
            .iter()
            .map(|claimed| claimed.event.id)
            .collect()
    }

    #[test]
    fn the_buffer_is_full_once_its_payloads_reach_the_bound() {
        // Every test event carries `{}`: two bytes.
        let received = Received::with_max_bytes(10);
        received.begin_session(100);
        let transaction = |ids: &[i64]| {
            ids.iter()
                .map(|&id| ClaimedEvent::for_test(id, "a", "orders"))
                .collect()
        };
        received.push_transaction(200, transaction(&[1, 2, 3, 4]));
        assert!(!received.is_full(), "8 bytes of 10");
        // A transaction is taken whole, past the bound.
        received.push_transaction(300, transaction(&[5, 6, 7]));
        assert!(received.is_full(), "14 bytes of 10");
        received.settle(&[1, 6]);
        assert!(received.is_full(), "10 bytes of 10");
        received.settle(&[2]);
        assert!(!received.is_full(), "8 bytes of 10");
        received.end_session();
        assert_eq!(received.lock().bytes, 0);
    }

    #[test]
    fn settling_in_order_removes_from_the_front() {
        let received = received_one_to_six();
        assert_eq!(received.settle(&[1, 2, 3]), 3);
        assert_eq!(buffered(&received), vec![4, 5, 6]);
        assert_eq!(received.lock().tracker.confirmed(), 200);
    }

    #[test]
    fn settling_out_of_order_removes_exactly_those_events() {
        let received = received_one_to_six();
        // A hold or a failure settles events behind unsettled ones, with
        // ids the stream never had and ids settled before.
        assert_eq!(received.settle(&[5, 2, 99]), 2);
        assert_eq!(buffered(&received), vec![1, 3, 4, 6]);
        assert_eq!(received.settle(&[1, 3, 5]), 2);
        assert_eq!(buffered(&received), vec![4, 6]);
        assert_eq!(received.lock().tracker.confirmed(), 200);
        assert_eq!(received.settle(&[6, 4]), 2);
        assert!(buffered(&received).is_empty());
        assert_eq!(received.lock().tracker.confirmed(), 400);
    }
}
