//! A slot's backlog: the events committed before the slot existed, which
//! it never streams. Polling relays or an application may have written
//! them long before; a slot starts at the end of the WAL.
//!
//! Whoever creates the slot (`run`, `migrate` or `recover-slot`) does so
//! under [`SlotCreationLock`], in this order, each step committed before
//! the next:
//! 1. [`begin`]: the slot's row in `outbox_slot_backlogs`, unbound;
//! 2. the slot is created;
//! 3. [`bind`]: the highest id visible is its bound. Every transaction
//!    committed before the slot's consistent point is visible by then, so
//!    each event is streamed by the slot, or within the bound, or both
//!    (a transaction that commits while the slot is created): never
//!    neither.
//!
//! A process killed after step 1 leaves an unbound row, which tells the
//! next one that the slot is being created (not dropped by an operator)
//! and that the bound is still to fix; one killed after step 3 leaves a
//! bound row. Either way nothing is lost.
//!
//! Before it streams, the holder of the stream's lease runs [`hand_over`]:
//! the pending, untouched events within the bound go to the table path, as
//! `recover-slot` hands its window over (`last_error` marks them, no
//! attempt is used), a batch at a time, fenced by the lease, with the
//! progress saved by the same statement. The table path then publishes
//! them with polling's semantics, each aggregate in id order and before
//! its streamed events (which are held behind them). Events both within
//! the bound and streamed are published once when the table path holds
//! them first; those streamed before the hand-over reached them (only
//! after a crash between two batches, since the stream opens after the
//! hand-over) may be published twice.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgConnection;
use sqlx::{Connection, PgPool, Row};

use super::table_path::Writer;
use crate::error::Error;
use crate::source::SlotName;

sql_files!(
    lock_slot_creation,
    unlock_slot_creation,
    begin_slot_backlog,
    bind_slot_backlog,
    slot_backlog_state,
    slot_backlogs,
    fenced_hand_over = stream_lease_fence + hand_over_slot_backlog
);

/// The note the backlog of a new slot carries in `last_error` once handed
/// to the table path.
pub const BACKLOG_NOTE: &str =
    "handed to the table path: committed before the replication slot existed";

/// The note of the events `recover-slot` hands over.
pub const HANDED_OVER_NOTE: &str = "handed to the table path by recover-slot: published again after the replication slot was re-created";

/// Events handed over per statement.
const HAND_OVER_BATCH: i64 = 5000;

/// The session lock under which one slot, its publication and its backlog
/// are created: relays starting together create the slot once, and none
/// reads a half-made state. Held by a connection of its own, outside the
/// pool; dropping it closes that connection, which releases the lock.
pub(crate) struct SlotCreationLock {
    connection: PgConnection,
    slot: SlotName,
}

impl SlotCreationLock {
    /// Wait for the lock of `slot`.
    pub(super) async fn acquire(pool: &PgPool, slot: &SlotName) -> Result<Self, Error> {
        let mut connection = pool.acquire().await?.detach();
        sqlx::query(sql::lock_slot_creation)
            .bind(slot.as_str())
            .execute(&mut connection)
            .await?;
        Ok(SlotCreationLock {
            connection,
            slot: slot.clone(),
        })
    }

    /// Release the lock and close its connection.
    pub(super) async fn release(mut self) {
        let unlocked = sqlx::query(sql::unlock_slot_creation)
            .bind(self.slot.as_str())
            .execute(&mut self.connection)
            .await;
        if let Err(error) = unlocked {
            tracing::warn!(%error, slot = %self.slot, "releasing the slot creation lock failed; closing its connection releases it");
        }
        if let Err(error) = self.connection.close().await {
            tracing::debug!(%error, "closing the slot creation lock's connection failed");
        }
    }
}

/// Where a backlog ends: the highest id visible once the slot existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BacklogBound {
    /// The highest id.
    pub id: i64,
    /// The database's time when it was read.
    pub at: DateTime<Utc>,
}

/// A slot's row in `outbox_slot_backlogs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BacklogState {
    /// `None` when the slot is being created.
    pub(super) bound: Option<BacklogBound>,
    pub(super) finished: bool,
}

impl BacklogState {
    /// Begun and not bound: a process is creating the slot, or was killed
    /// while it did.
    pub(super) fn being_created(&self) -> bool {
        !self.finished && self.bound.is_none()
    }
}

/// Step 1: the slot's backlog, unbound. `since`: only the events created at
/// or after it (`recover-slot`); `None`: every pending, untouched event.
pub(crate) async fn begin(
    pool: &PgPool,
    slot: &SlotName,
    since: Option<DateTime<Utc>>,
) -> Result<(), Error> {
    sqlx::query(sql::begin_slot_backlog)
        .bind(slot.as_str())
        .bind(since)
        .execute(pool)
        .await?;
    Ok(())
}

/// Step 3, once the slot exists: the bound of an unbound backlog (`None`
/// when it was bound already, or there is none).
pub(crate) async fn bind(pool: &PgPool, slot: &SlotName) -> Result<Option<BacklogBound>, Error> {
    let Some(row) = slot.row(pool, sql::bind_slot_backlog).await? else {
        return Ok(None);
    };
    let bound = BacklogBound {
        id: row.try_get("bound_id")?,
        at: row.try_get("bound_at")?,
    };
    tracing::info!(
        slot = %slot,
        bound_id = bound.id,
        "the events committed before the replication slot existed are its backlog, up to this id"
    );
    Ok(Some(bound))
}

/// The slot's backlog row, if it has one.
pub(crate) async fn state(pool: &PgPool, slot: &SlotName) -> Result<Option<BacklogState>, Error> {
    let Some(row) = slot.row(pool, sql::slot_backlog_state).await? else {
        return Ok(None);
    };
    let bound_id: Option<i64> = row.try_get("bound_id")?;
    let bound_at: Option<DateTime<Utc>> = row.try_get("bound_at")?;
    let finished_at: Option<DateTime<Utc>> = row.try_get("finished_at")?;
    Ok(Some(BacklogState {
        bound: bound_id
            .zip(bound_at)
            .map(|(id, at)| BacklogBound { id, at }),
        finished: finished_at.is_some(),
    }))
}

/// How a [`hand_over`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandedOver {
    /// Nothing is left to hand over; this many events were handed by this
    /// call.
    Finished(u64),
    /// The backlog is not bound yet: the slot is being created.
    Unbound,
    /// The stream's lease was lost after this many events.
    LeaseLost(u64),
}

/// Hand the slot's backlog to the table path, a batch at a time, as
/// `writer` (the holder of the stream's lease), each event marked with
/// `note`; `after_batch` is told how many were handed so far.
pub(crate) async fn hand_over(
    pool: &PgPool,
    slot: &SlotName,
    writer: Writer<'_>,
    note: &str,
    mut after_batch: impl FnMut(u64),
) -> Result<HandedOver, Error> {
    let mut handed_over: u64 = 0;
    loop {
        let row = writer
            .fenced(sql::fenced_hand_over)
            .bind(slot.as_str())
            .bind(HAND_OVER_BATCH)
            .bind(note)
            .fetch_one(pool)
            .await?;
        let lease_held: i64 = row.try_get("lease_held")?;
        if lease_held == 0 {
            return Ok(HandedOver::LeaseLost(handed_over));
        }
        let found: i64 = row.try_get("found")?;
        if found == 0 {
            return Ok(match state(pool, slot).await? {
                Some(state) if state.being_created() => HandedOver::Unbound,
                _ => HandedOver::Finished(handed_over),
            });
        }
        let handed: i64 = row.try_get("handed")?;
        handed_over += u64::try_from(handed).unwrap_or(0);
        after_batch(handed_over);
        if row.try_get::<bool, _>("finished")? {
            return Ok(HandedOver::Finished(handed_over));
        }
    }
}

/// What is left of one slot's backlog, for `status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotBacklog {
    /// The slot.
    pub slot: String,
    /// Events still to publish: those not handed over yet and those handed
    /// over and not published yet.
    pub remaining: i64,
    /// Of them, the events not handed to the table path yet.
    pub not_handed_over: i64,
    /// The oldest of them.
    pub oldest_at: Option<DateTime<Utc>>,
}

/// The backlog still to publish of each slot that has one, by slot name.
///
/// # Errors
/// [`Error::Database`] when the statement fails.
pub async fn slot_backlogs(pool: &PgPool) -> Result<Vec<SlotBacklog>, Error> {
    let rows = sqlx::query(sql::slot_backlogs)
        .bind(vec![BACKLOG_NOTE.to_owned(), HANDED_OVER_NOTE.to_owned()])
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| {
            let not_handed_over: i64 = row.try_get("not_handed_over")?;
            let handed: i64 = row.try_get("handed")?;
            Ok(SlotBacklog {
                slot: row.try_get("slot_name")?,
                remaining: not_handed_over.saturating_add(handed),
                not_handed_over,
                oldest_at: row.try_get("oldest_at")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::from)
}
