//! Fetching a batch, leaving out the events the relay still has in hand:
//! the batch in flight, and the events published whose mark is still in
//! flight.
//!
//! The ids left out travel in the statement's parameters, 12 bytes an id
//! on PostgreSQL, and the server compares every row it scans with them, so
//! they are kept to [`MAX_EXCLUDED_IDS`] (or the batch in flight, when
//! `batch_size` is larger). Past the bound, the fetch first waits for the
//! oldest marks, which then need no exclusion at all. (The bound once also
//! kept the message under one TLS record, 16 KB: sqlx sets no
//! `TCP_NODELAY`, and a second record waited 40 ms for the server's
//! delayed acknowledgement. The store now sets it; see
//! `store/tcp_nodelay.rs`.)

use super::Dispatcher;
use super::publish::SentBatch;
use crate::Error;
use crate::store::ClaimedEvent;

/// Most ids a fetch leaves out: 12 KB of parameters on PostgreSQL.
const MAX_EXCLUDED_IDS: usize = 1_000;

impl Dispatcher {
    /// Fetch a batch, leaving out the batch in flight and the events
    /// published but not yet marked; first waits for the oldest marks while
    /// they are too many to leave out.
    pub(super) async fn fetch(&mut self, partitions: &[i32]) -> Result<Vec<ClaimedEvent>, Error> {
        let in_flight_count = self.in_flight.as_ref().map_or(0, SentBatch::len);
        let bound = MAX_EXCLUDED_IDS.max(in_flight_count);
        while self.unmarked.len() + in_flight_count > bound && !self.marking.is_empty() {
            self.settle_oldest_mark().await;
        }
        let in_flight: &[i64] = self
            .in_flight
            .as_ref()
            .map_or(&[], |batch| batch.ids.as_slice());
        let exclude: Vec<i64> = self
            .unmarked
            .iter()
            .copied()
            .chain(in_flight.iter().copied())
            .collect();
        self.store
            .fetch_pending(
                self.partition_count,
                partitions,
                &exclude,
                self.settings.hold_dead,
                self.settings.batch_size,
            )
            .await
    }
}
