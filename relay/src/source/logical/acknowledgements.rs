//! [`AcknowledgementTracker`]: which position of the stream may be
//! confirmed to the server.
//!
//! The rule: the confirmed (flush) position never passes a transaction
//! that has an event neither acknowledged by the broker nor durably
//! recorded as failed. Transactions arrive in commit order; each is held
//! until every one of its events is settled, and the confirmed position is
//! the end of the last transaction of the settled prefix. A transaction
//! settled out of order waits for the ones before it.

use std::collections::{BTreeMap, HashMap};

/// A WAL position, as the server counts it.
pub(crate) type WalPosition = u64;

/// Transactions of the stream not yet confirmed, in commit order.
#[derive(Debug, Default)]
pub(crate) struct AcknowledgementTracker {
    /// Unsettled events per transaction, by the transaction's end position
    /// (commit order). A transaction with none left stays until it is the
    /// oldest.
    transactions: BTreeMap<WalPosition, usize>,
    /// The transaction of each unsettled event.
    transaction_of: HashMap<i64, WalPosition>,
    /// The position confirmed so far.
    confirmed: WalPosition,
}

impl AcknowledgementTracker {
    /// A tracker starting at `confirmed`, the slot's confirmed position.
    pub(crate) fn starting_at(confirmed: WalPosition) -> Self {
        AcknowledgementTracker {
            confirmed,
            ..AcknowledgementTracker::default()
        }
    }

    /// A committed transaction ending at `end` with the events `ids`.
    /// Returns a new confirmed position when the transaction has no events
    /// and nothing before it is unsettled.
    pub(crate) fn record_transaction(
        &mut self,
        end: WalPosition,
        ids: impl IntoIterator<Item = i64>,
    ) -> Option<WalPosition> {
        let mut count = 0;
        for id in ids {
            self.transaction_of.insert(id, end);
            count += 1;
        }
        *self.transactions.entry(end).or_insert(0) += count;
        self.advance()
    }

    /// Settle `ids` (acknowledged, or recorded as failed). Returns how many
    /// were unsettled events of the stream, and the new confirmed position
    /// when it moved.
    pub(crate) fn settle(&mut self, ids: &[i64]) -> (u64, Option<WalPosition>) {
        let mut settled = 0;
        for id in ids {
            let Some(end) = self.transaction_of.remove(id) else {
                continue;
            };
            settled += 1;
            if let Some(outstanding) = self.transactions.get_mut(&end) {
                *outstanding = outstanding.saturating_sub(1);
            }
        }
        (settled, self.advance())
    }

    /// The server reports `position` while no transaction is open on the
    /// stream: everything committed before it was received. With nothing
    /// unsettled, it can be confirmed, so a quiet slot does not hold WAL.
    pub(crate) fn observe_idle_position(&mut self, position: WalPosition) -> Option<WalPosition> {
        if !self.transactions.is_empty() || position <= self.confirmed {
            return None;
        }
        self.confirmed = position;
        Some(position)
    }

    /// The position confirmed so far.
    #[cfg(feature = "test-util")]
    pub(crate) fn confirmed(&self) -> WalPosition {
        self.confirmed
    }

    /// Events received and not yet settled.
    pub(crate) fn unsettled_events(&self) -> usize {
        self.transaction_of.len()
    }

    /// Whether `id` is an unsettled event of the stream.
    pub(crate) fn is_unsettled(&self, id: i64) -> bool {
        self.transaction_of.contains_key(&id)
    }

    /// Pop the settled prefix; the new confirmed position if it moved.
    fn advance(&mut self) -> Option<WalPosition> {
        let mut moved = None;
        while let Some(entry) = self.transactions.first_entry() {
            if *entry.get() > 0 {
                break;
            }
            let end = *entry.key();
            entry.remove();
            if end > self.confirmed {
                self.confirmed = end;
                moved = Some(end);
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_transaction_settled_first_waits_for_the_earlier_one() {
        let mut tracker = AcknowledgementTracker::starting_at(10);
        assert_eq!(tracker.record_transaction(100, [2]), None);
        assert_eq!(tracker.record_transaction(200, [1, 3]), None);
        assert_eq!(tracker.settle(&[1, 3]), (2, None));
        assert_eq!(tracker.confirmed(), 10);
        assert_eq!(tracker.settle(&[2]), (1, Some(200)));
        assert_eq!(tracker.unsettled_events(), 0);
    }

    #[test]
    fn a_transaction_is_confirmed_only_once_all_its_events_are_settled() {
        let mut tracker = AcknowledgementTracker::starting_at(0);
        tracker.record_transaction(100, [1, 2]);
        assert_eq!(tracker.settle(&[1]), (1, None));
        assert!(tracker.is_unsettled(2));
        assert_eq!(tracker.settle(&[2, 2, 99]), (1, Some(100)));
    }

    #[test]
    fn an_empty_transaction_is_confirmed_behind_the_ones_before_it() {
        let mut tracker = AcknowledgementTracker::starting_at(0);
        tracker.record_transaction(100, [1]);
        assert_eq!(tracker.record_transaction(150, []), None);
        assert_eq!(tracker.settle(&[1]), (1, Some(150)));
        assert_eq!(tracker.record_transaction(300, []), Some(300));
    }

    #[test]
    fn an_idle_position_is_confirmed_only_with_nothing_unsettled() {
        let mut tracker = AcknowledgementTracker::starting_at(50);
        assert_eq!(tracker.observe_idle_position(40), None);
        tracker.record_transaction(100, [1]);
        assert_eq!(tracker.observe_idle_position(500), None);
        tracker.settle(&[1]);
        assert_eq!(tracker.observe_idle_position(500), Some(500));
        assert_eq!(tracker.confirmed(), 500);
    }
}
