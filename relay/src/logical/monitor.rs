//! The slot's gauges on `/metrics`: lag, retained WAL, confirmed position
//! and this instance's unsettled events, refreshed on a timer by the
//! relay that runs the logical source.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::slot::{SlotName, slot_status};
use super::source::LogicalSource;
use crate::metrics::RelayMetrics;

/// How often the slot's gauges are refreshed.
pub const SLOT_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Refresh the slot's gauges every [`SLOT_REPORT_INTERVAL`] until `stop`.
/// A slot that has fallen behind so far that the server invalidated it
/// (`wal_status = lost`) is logged as an error on every refresh.
pub async fn report_slot(
    pool: PgPool,
    slot: SlotName,
    source: Arc<LogicalSource>,
    metrics: Arc<RelayMetrics>,
    stop: CancellationToken,
) {
    loop {
        match slot_status(&pool, &slot).await {
            Ok(Some(status)) => {
                metrics.set_slot(&status, source.unsettled_events());
                if status.wal_status == "lost" {
                    tracing::error!(
                        slot = %slot,
                        "the replication slot was invalidated (wal_status = lost): events committed \
                         since its confirmed position are not streamed; drop the slot, run \
                         `outbox-relay migrate --source logical` and re-publish from the table"
                    );
                }
            }
            Ok(None) => tracing::warn!(slot = %slot, "the replication slot does not exist"),
            Err(error) => tracing::warn!(%error, "reading the replication slot's status failed"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(SLOT_REPORT_INTERVAL) => {}
        }
    }
}
