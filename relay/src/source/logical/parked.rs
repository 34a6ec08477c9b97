//! [`ParkedAggregates`]: the logical source's view of the parked aggregates
//! (see `table_path.rs`), read from the table only when it may have
//! changed.
//!
//! Reading it is a transaction of its own (four round trips), and on the
//! happy path it is empty. The stream's holder is the only relay that
//! writes failures, so while the set is empty it can only fill by a write
//! of this relay, which bumps the generation, or by an operator's `dead
//! retry` under `dead_events = "skip"` (a dead event that did not park its
//! aggregate becomes a pending retry that does). An empty set is therefore
//! trusted until this relay writes to the table path or for
//! [`EMPTY_TRUSTED_FOR`], whichever comes first; a non-empty one is read
//! again on every fetch, as the failure path may cost.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::PgPool;
use tokio::time::Instant;

use super::table_path;
use crate::error::Error;
use crate::event::AggregateKey;

/// How long an empty set read from the table is trusted when this relay
/// wrote nothing since: a retried event found by no other way waits at most
/// this long.
pub(crate) const EMPTY_TRUSTED_FOR: Duration = Duration::from_secs(1);

/// The last empty read and the generation it was read at.
#[derive(Debug, Default)]
struct State {
    /// Bumped after every write of this relay to the table path, and when
    /// the stream changes hands.
    generation: u64,
    /// When an empty set was last read, with `hold_dead` and the generation
    /// at the start of that read.
    empty_read: Option<(Instant, bool, u64)>,
}

/// The parked aggregates, cached while they are known to be none.
#[derive(Debug, Default)]
pub(crate) struct ParkedAggregates {
    state: Mutex<State>,
}

impl ParkedAggregates {
    /// The aggregates whose next events must come from the table: none
    /// without a read while an empty read is still trusted.
    pub(super) async fn current(
        &self,
        pool: &PgPool,
        hold_dead: bool,
    ) -> Result<HashSet<AggregateKey>, Error> {
        let generation = {
            let state = self.lock();
            let trusted = state
                .empty_read
                .is_some_and(|(at, read_hold_dead, read_at)| {
                    read_at == state.generation
                        && read_hold_dead == hold_dead
                        && at.elapsed() < EMPTY_TRUSTED_FOR
                });
            if trusted {
                return Ok(HashSet::new());
            }
            state.generation
        };
        let started = Instant::now();
        let parked = table_path::parked_aggregates(pool, hold_dead).await?;
        let mut state = self.lock();
        state.empty_read = parked
            .is_empty()
            .then_some((started, hold_dead, generation));
        Ok(parked)
    }

    /// The table path was written (after the write has returned), or the
    /// stream changed hands: the next fetch reads the set again.
    pub(super) fn changed(&self) {
        let mut state = self.lock();
        state.generation = state.generation.wrapping_add(1);
        state.empty_read = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{OperatorStore, PostgresStore};

    /// A failed event of aggregate `order/1`, written behind the cache's
    /// back, as another writer would.
    const WRITE_FAILED_EVENT: &str = "INSERT INTO outbox_events \
         (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload, \
          attempts, last_error) \
         VALUES (gen_random_uuid(), 'order.placed', 'test', 'order', '1', 'orders', '{}', \
          1, 'rejected by the broker')";

    #[tokio::test]
    async fn an_empty_set_is_read_again_after_a_write_or_once_stale() {
        let db = outbox_testkit::postgres().await;
        let store = PostgresStore::connect(db.url()).await.expect("connect");
        store.migrate().await.expect("migrate");
        let pool = store.pool();
        let parked = ParkedAggregates::default();
        let run = |statement: &'static str| async move {
            sqlx::query(statement).execute(pool).await.expect(statement);
        };

        assert!(parked.current(pool, true).await.expect("read").is_empty());
        run(WRITE_FAILED_EVENT).await;
        assert!(
            parked.current(pool, true).await.expect("read").is_empty(),
            "an empty set read just now is trusted without a read"
        );
        parked.changed();
        assert_eq!(
            parked.current(pool, true).await.expect("read").len(),
            1,
            "a write of this relay makes the next fetch read the set"
        );

        run("DELETE FROM outbox_events").await;
        assert!(
            parked.current(pool, true).await.expect("read").is_empty(),
            "a set that was not empty is read on every fetch"
        );
        run(WRITE_FAILED_EVENT).await;
        tokio::time::sleep(EMPTY_TRUSTED_FOR).await;
        assert_eq!(
            parked.current(pool, true).await.expect("read").len(),
            1,
            "an empty set is read again once it is {EMPTY_TRUSTED_FOR:?} old"
        );
    }
}
