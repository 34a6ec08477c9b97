//! What `outbox-relay replay --source logical` reads. Streamed events are
//! published without a write, so their rows stay `pending`; a replay of
//! the published rows alone would leave them out. [`StreamedReplay`] adds
//! those the broker acknowledged, judged as retention judges them: by the
//! newest retention checkpoint the slot has confirmed. The events committed
//! after that checkpoint are left out, and [`unconfirmed_in_window`] counts
//! them so the replay can say so.

use futures::future::BoxFuture;
use sqlx::PgPool;

use crate::error::Error;
use crate::event::OutboundEvent;
use crate::operator::ReplaySource;
use crate::source::SlotName;
use crate::store::ReplayWindow;
use crate::store::rows::{map_rows, outbound_from_row};

sql_files!(
    checkpointed_fetch_replayable = usable_checkpoint + fetch_replayable,
    checkpointed_count_unconfirmed = usable_checkpoint + count_unconfirmed_in_window
);

/// The pages of a replay under the logical source: the published rows and
/// the streamed events the slot confirmed.
pub struct StreamedReplay<'a> {
    pool: &'a PgPool,
    slot: &'a SlotName,
}

impl<'a> StreamedReplay<'a> {
    /// Pages of the events of `slot`'s database on `pool`.
    pub fn new(pool: &'a PgPool, slot: &'a SlotName) -> Self {
        StreamedReplay { pool, slot }
    }
}

impl ReplaySource for StreamedReplay<'_> {
    fn replay_page<'b>(
        &'b self,
        window: &'b ReplayWindow,
        after_id: i64,
        limit: i64,
    ) -> BoxFuture<'b, Result<Vec<OutboundEvent>, Error>> {
        Box::pin(async move {
            let rows = sqlx::query(sql::checkpointed_fetch_replayable)
                .bind(self.slot.as_str())
                .bind(&window.topic)
                .bind(window.since)
                .bind(window.until)
                .bind(after_id)
                .bind(limit)
                .fetch_all(self.pool)
                .await?;
            Ok(map_rows(&rows, outbound_from_row)?)
        })
    }
}

/// Streamed events of `window` not yet known to be acknowledged: committed
/// after the newest retention checkpoint the slot has confirmed (or with no
/// such checkpoint yet). A replay leaves them out.
///
/// # Errors
/// [`Error::Database`] when the statement fails.
pub async fn unconfirmed_in_window(
    pool: &PgPool,
    slot: &SlotName,
    window: &ReplayWindow,
) -> Result<u64, Error> {
    let count: i64 = sqlx::query_scalar(sql::checkpointed_count_unconfirmed)
        .bind(slot.as_str())
        .bind(&window.topic)
        .bind(window.since)
        .bind(window.until)
        .fetch_one(pool)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}
