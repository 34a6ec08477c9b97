//! `outbox-relay recover-slot`: recovering from a slot the server
//! invalidated (`wal_status = lost`), with nothing lost and a bounded,
//! known set of events published again.
//!
//! Under the stream's lease (so no relay streams meanwhile):
//! 1. a lost slot is dropped, and retention's checkpoints with it (they
//!    describe the old slot; against a new one they would let retention
//!    delete events the old slot never confirmed);
//! 2. the slot is created again (a slot that is there and not lost is
//!    kept): it streams every transaction that commits from its starting
//!    point on;
//! 3. the events created from `since` until the database's time just after
//!    the slot exists, that only the stream could have published (pending,
//!    no attempt, no note), are handed to the table path as a hold marks
//!    them. Every transaction committed before the slot's starting point is
//!    visible by then, so each event is either streamed by the new slot or
//!    handed over (or both, for a transaction that spans the creation):
//!    never neither.
//!
//! The relays then publish the handed-over events from the table as they
//! publish held ones: ordinary publications with their event ids (not
//! replays: some were never published), each aggregate in id order and
//! before its newer streamed events, with the failure path's retries. What
//! is published again is bounded by `since`: the events created since then
//! that the old slot had already published. Running it again is safe: a
//! slot that is not lost is kept, and events already handed over are left
//! as they are.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};

use super::operator_lease::OperatorLease;
use super::slot::{
    DroppedSlot, SlotName, check_stream_prerequisites, ensure_slot_and_publication, slot_status,
};
use crate::Error;

const DROP_SLOT: &str = include_str!("sql/drop_slot.sql");
const FORGET_ALL_CHECKPOINTS: &str = include_str!("sql/forget_all_checkpoints.sql");
const RECOVERY_UNTIL: &str = include_str!("sql/recovery_until.sql");
const HAND_OVER_WINDOW: &str = concat!(
    include_str!("sql/stream_lease_fence.sql"),
    include_str!("sql/hand_over_window.sql")
);

/// The note handed-over events carry in `last_error`.
pub const HANDED_OVER_NOTE: &str = "handed to the table path by recover-slot: published again after the replication slot was re-created";

/// Events handed over per statement.
const HAND_OVER_BATCH: i64 = 5000;

/// What [`recover_slot`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRecovery {
    /// The slot.
    pub slot: String,
    /// Whether an invalidated slot was dropped.
    pub dropped_lost_slot: bool,
    /// Whether the slot was created (else a slot that was not lost was kept).
    pub created_slot: bool,
    /// The start of the window handed over.
    pub since: DateTime<Utc>,
    /// Its end (exclusive): the database's time once the slot existed.
    pub until: DateTime<Utc>,
    /// Events handed to the table path.
    pub handed_over: u64,
}

/// Recover `slot` as the module describes, taking the stream's lease as
/// `recovery_id`. Run on a migrated database, with no relay streaming.
///
/// # Errors
/// [`Error::Logical`] when the server or role cannot stream, or a live
/// relay holds the stream's lease, or the lease was lost meanwhile (run it
/// again); [`Error::Database`] when a statement fails (dropping a slot
/// that a connection still streams from, for one).
pub async fn recover_slot(
    pool: &PgPool,
    slot: &SlotName,
    since: DateTime<Utc>,
    recovery_id: &str,
) -> Result<SlotRecovery, Error> {
    check_stream_prerequisites(pool, slot).await?;
    super::prepare_tables(pool).await?;
    let lease = OperatorLease::acquire(pool, recovery_id, "recover-slot").await?;
    let recovered = recover_under_lease(pool, slot, since, recovery_id, lease.token()).await;
    lease.release().await;
    recovered
}

async fn recover_under_lease(
    pool: &PgPool,
    slot: &SlotName,
    since: DateTime<Utc>,
    recovery_id: &str,
    lease_token: i64,
) -> Result<SlotRecovery, Error> {
    let existing = slot_status(pool, slot).await?;
    let dropped_lost_slot = match &existing {
        Some(status) if status.is_lost() => {
            sqlx::query(DROP_SLOT)
                .bind(slot.as_str())
                .execute(pool)
                .await?;
            tracing::info!(
                slot = %slot,
                confirmed_flush_lsn = status.confirmed_flush_lsn.as_deref().unwrap_or(""),
                "the invalidated replication slot was dropped"
            );
            true
        }
        Some(_) => {
            tracing::info!(slot = %slot, "the replication slot is not invalidated; it is kept");
            false
        }
        None => false,
    };
    let created_slot = existing.is_none() || dropped_lost_slot;
    if created_slot {
        sqlx::query(FORGET_ALL_CHECKPOINTS).execute(pool).await?;
    }
    ensure_slot_and_publication(pool, slot, DroppedSlot::Recreate).await?;
    let until: DateTime<Utc> = sqlx::query_scalar(RECOVERY_UNTIL).fetch_one(pool).await?;
    let handed_over = if since < until {
        hand_over(pool, (since, until), recovery_id, lease_token).await?
    } else {
        0
    };
    tracing::info!(
        slot = %slot,
        since = %since.to_rfc3339(),
        until = %until.to_rfc3339(),
        handed_over,
        "events handed to the table path"
    );
    Ok(SlotRecovery {
        slot: slot.as_str().to_owned(),
        dropped_lost_slot,
        created_slot,
        since,
        until,
        handed_over,
    })
}

/// Hand the window's events over, a batch at a time; returns how many.
async fn hand_over(
    pool: &PgPool,
    (since, until): (DateTime<Utc>, DateTime<Utc>),
    recovery_id: &str,
    lease_token: i64,
) -> Result<u64, Error> {
    let mut handed_over: u64 = 0;
    let mut after_id: i64 = 0;
    loop {
        let row = sqlx::query(HAND_OVER_WINDOW)
            .bind(recovery_id)
            .bind(lease_token)
            .bind(since)
            .bind(until)
            .bind(after_id)
            .bind(HAND_OVER_BATCH)
            .bind(HANDED_OVER_NOTE)
            .fetch_one(pool)
            .await?;
        let lease_held: i64 = row.try_get("lease_held")?;
        if lease_held == 0 {
            return Err(Error::Logical(format!(
                "the stream's lease was lost during the recovery after {handed_over} event(s) \
                 were handed over; run recover-slot again with the same --since"
            )));
        }
        let handed: i64 = row.try_get("handed")?;
        handed_over += u64::try_from(handed).unwrap_or(0);
        match row.try_get::<Option<i64>, _>("last_id")? {
            Some(last_id) => after_id = last_id,
            None => return Ok(handed_over),
        }
    }
}
