//! The slot's gauges on `/metrics`: lag, retained WAL, confirmed position
//! and this instance's unsettled events, refreshed on a timer by the
//! relay that runs the logical source, with the slot's backlog still to
//! publish; and the watch for a slot the server invalidated or an operator
//! dropped, or a publication dropped or altered, which ends the relay.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::batch::RelayMetrics;
use crate::error::Error;
use crate::source::SlotName;
use crate::source::logical::LogicalSource;
use crate::source::logical::slot::{
    PublicationState, check_publication, dropped_slot_error, lost_slot_error, publication_state,
    slot_being_created, slot_status,
};

/// How often the slot's gauges are refreshed.
pub const SLOT_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Whether the slot is missing while its publication exists and no process
/// is creating it: an operator dropped it.
async fn dropped_while_published(pool: &PgPool, slot: &SlotName) -> Result<bool, Error> {
    Ok(
        publication_state(pool, slot).await? != PublicationState::Missing
            && !slot_being_created(pool, slot).await?,
    )
}

/// Refresh the slot's gauges every [`SLOT_REPORT_INTERVAL`] until `stop`
/// (then `Ok`). A slot that has fallen behind so far that the server
/// invalidated it (`wal_status = lost`) cannot stream any more: it ends the
/// watch with the one-line error naming the recovery, and the relay stops
/// with it; so do a slot an operator dropped and a publication dropped or
/// altered under the slot, which would strand what commits meanwhile.
///
/// # Errors
/// [`Error::Logical`] when the slot is invalidated.
pub async fn report_slot(
    pool: PgPool,
    slot: SlotName,
    source: Arc<LogicalSource>,
    metrics: Arc<RelayMetrics>,
    stop: CancellationToken,
) -> Result<(), Error> {
    loop {
        match slot_status(&pool, &slot).await {
            Ok(Some(status)) => {
                metrics.set_slot(&status, source.unsettled_events());
                if status.is_lost() {
                    tracing::error!(
                        slot = %slot,
                        confirmed_flush_lsn = status.confirmed_flush_lsn.as_deref().unwrap_or(""),
                        "the replication slot was invalidated (wal_status = lost); stopping"
                    );
                    return Err(lost_slot_error(&status));
                }
                if let Err(error) = check_publication(&pool, &slot).await {
                    if matches!(error, Error::Logical(_)) {
                        tracing::error!(slot = %slot, %error, "the slot's publication changed; stopping");
                        return Err(error);
                    }
                    tracing::warn!(%error, "reading the slot's publication failed");
                }
            }
            Ok(None) => match dropped_while_published(&pool, &slot).await {
                Ok(true) => {
                    tracing::error!(slot = %slot, "the replication slot was dropped; stopping");
                    return Err(dropped_slot_error(&slot));
                }
                Ok(false) => tracing::warn!(slot = %slot, "the replication slot does not exist"),
                Err(error) => {
                    tracing::warn!(%error, "reading the replication slot's status failed")
                }
            },
            Err(error) => tracing::warn!(%error, "reading the replication slot's status failed"),
        }
        match source.slot_backlog().await {
            Ok(backlog) => metrics.set_slot_backlog(backlog.map_or(0, |backlog| backlog.remaining)),
            Err(error) => tracing::warn!(%error, "reading the slot's backlog failed"),
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(SLOT_REPORT_INTERVAL) => {}
        }
    }
}
