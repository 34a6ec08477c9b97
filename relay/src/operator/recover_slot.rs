//! `outbox-relay recover-slot`: recovering from a slot the server
//! invalidated (`wal_status = lost`), with nothing lost and a bounded,
//! known set of events published again.
//!
//! Under the stream's lease (so no relay streams meanwhile):
//! 1. a slot that cannot stream on is dropped: one the server invalidated,
//!    or one whose publication was dropped (pgoutput cannot decode what
//!    committed after that);
//! 2. the slot is created again as any slot is (`slot_backlog.rs`), and an
//!    altered publication repaired; a slot that can stream on is kept. The
//!    slot's backlog is the events created from `since` up to the highest
//!    id visible once the slot exists, that only the stream could have
//!    published (pending, no attempt, no note);
//! 3. that backlog is handed to the table path here, with the machinery
//!    the relays use for a new slot's backlog. Each event is either
//!    streamed by the slot or handed over (or both, for a transaction that
//!    spans the creation): never neither.
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
use sqlx::PgPool;

use super::lease::OperatorLease;
use crate::error::Error;
use crate::source::SlotName;
use crate::source::logical::slot::{
    DroppedSlot, PublicationState, check_stream_prerequisites, ensure_slot_and_publication,
    publication_state, slot_status,
};
use crate::source::logical::slot_backlog::{HANDED_OVER_NOTE, HandedOver, hand_over};
use crate::source::logical::table_path::Writer;

sql_files!(drop_slot);

/// What [`recover_slot`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRecovery {
    /// The slot.
    pub slot: String,
    /// Whether a slot that could not stream on (invalidated, or its
    /// publication dropped) was dropped.
    pub dropped_lost_slot: bool,
    /// Whether the slot was created (else a slot that could stream on was
    /// kept).
    pub created_slot: bool,
    /// The start of the window handed over.
    pub since: DateTime<Utc>,
    /// The database's time once the slot existed: the window holds the
    /// events up to the highest id visible then.
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
    crate::source::logical::prepare_tables(pool).await?;
    let lease = OperatorLease::acquire(pool, recovery_id, "recover-slot").await?;
    let writer = Writer {
        relay_id: recovery_id,
        lease_token: lease.token(),
    };
    let recovered = recover_under_lease(pool, slot, since, writer).await;
    lease.release().await;
    recovered
}

async fn recover_under_lease(
    pool: &PgPool,
    slot: &SlotName,
    since: DateTime<Utc>,
    writer: Writer<'_>,
) -> Result<SlotRecovery, Error> {
    let existing = slot_status(pool, slot).await?;
    let publication = publication_state(pool, slot).await?;
    let dropped_lost_slot = match &existing {
        Some(status) if status.is_lost() || publication == PublicationState::Missing => {
            sqlx::query(sql::drop_slot)
                .bind(slot.as_str())
                .execute(pool)
                .await?;
            tracing::info!(
                slot = %slot,
                invalidated = status.is_lost(),
                confirmed_flush_lsn = status.confirmed_flush_lsn.as_deref().unwrap_or(""),
                "the replication slot could not stream on and was dropped"
            );
            true
        }
        Some(_) => {
            tracing::info!(slot = %slot, "the replication slot can stream on; it is kept");
            false
        }
        None => false,
    };
    let created_slot = existing.is_none() || dropped_lost_slot;
    let bound = ensure_slot_and_publication(pool, slot, DroppedSlot::Recreate { since })
        .await?
        .ok_or_else(|| {
            Error::Logical(format!(
                "the backlog of replication slot `{slot}` was bound by another process meanwhile; \
                 run recover-slot again with the same --since"
            ))
        })?;
    let handed_over = match hand_over(pool, slot, writer, HANDED_OVER_NOTE, |_| {}).await? {
        HandedOver::Finished(handed) => handed,
        HandedOver::Unbound => {
            return Err(Error::Logical(format!(
                "the backlog of replication slot `{slot}` is being created by another process; \
                 run recover-slot again with the same --since"
            )));
        }
        HandedOver::LeaseLost(handed) => {
            return Err(Error::Logical(format!(
                "the stream's lease was lost during the recovery after {handed} event(s) were \
                 handed over; run recover-slot again with the same --since"
            )));
        }
    };
    tracing::info!(
        slot = %slot,
        since = %since.to_rfc3339(),
        until = %bound.at.to_rfc3339(),
        bound_id = bound.id,
        handed_over,
        "events handed to the table path"
    );
    Ok(SlotRecovery {
        slot: slot.as_str().to_owned(),
        dropped_lost_slot,
        created_slot,
        since,
        until: bound.at,
        handed_over,
    })
}
