//! The slot's gauges on `/metrics`: lag, retained WAL, confirmed position
//! and this instance's unsettled events, refreshed on a timer by the
//! relay that runs the logical source; and the watch for a slot the server
//! invalidated, which ends the relay.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::slot::{SlotName, lost_slot_error, slot_status};
use super::source::LogicalSource;
use crate::Error;
use crate::metrics::RelayMetrics;

/// How often the slot's gauges are refreshed.
pub const SLOT_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Refresh the slot's gauges every [`SLOT_REPORT_INTERVAL`] until `stop`
/// (then `Ok`). A slot that has fallen behind so far that the server
/// invalidated it (`wal_status = lost`) cannot stream any more: it ends the
/// watch with the one-line error naming the recovery, and the relay stops
/// with it.
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
            }
            Ok(None) => tracing::warn!(slot = %slot, "the replication slot does not exist"),
            Err(error) => tracing::warn!(%error, "reading the replication slot's status failed"),
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(SLOT_REPORT_INTERVAL) => {}
        }
    }
}
