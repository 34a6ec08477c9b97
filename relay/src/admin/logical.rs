//! The WAL source's commands: preparing a database to stream, replaying
//! streamed events, re-creating an invalidated slot, and going back to
//! polling.

use super::{LeftLogical, RelayAdmin, ReplayRequest, ReplaySummary, SlotRecovery};
use crate::config::{BrokerUrl, RelayConfig, SlotName};
use crate::error::Error;
use crate::operator::{ReplayTime, StreamedReplay, unconfirmed_in_window};
use crate::source::logical::{check_prerequisites, missing_slot_error, prepare, slot_status};

impl RelayAdmin {
    /// Check that the database can stream from `slot`, migrate it, and
    /// create the slot and its publication when missing: what
    /// `outbox-relay migrate --source logical` does.
    ///
    /// # Errors
    /// [`Error::Logical`] naming what keeps the server or the role from
    /// streaming (`wal_level`, the replication attribute, an invalidated
    /// slot); [`Error::Database`] when a statement fails.
    pub async fn prepare_logical(&self, slot: &SlotName) -> Result<(), Error> {
        let postgres = self.postgres("the logical source")?;
        check_prerequisites(postgres.pool(), slot).await?;
        self.store.migrate().await?;
        prepare(postgres.pool(), slot).await
    }

    /// Re-create `slot` after the server invalidated it, and hand the
    /// events created since `since` back to the polling path, which
    /// publishes them again in each aggregate's order. Run with no relay
    /// streaming from the slot.
    ///
    /// # Errors
    /// [`Error::Logical`] when the server or the role cannot stream, or a
    /// live relay holds the stream's lease; [`Error::Database`] when a
    /// statement fails.
    pub async fn recover_slot(
        &self,
        slot: &SlotName,
        since: ReplayTime,
    ) -> Result<SlotRecovery, Error> {
        let postgres = self.postgres("recover-slot")?;
        self.store.migrate().await?;
        let since = since.resolve(self.store.database_time().await?);
        let recovery_id = format!("recover-slot-{}", uuid::Uuid::now_v7().simple());
        crate::operator::recover_slot(postgres.pool(), slot, since, &recovery_id).await
    }

    /// Leave the logical source for polling: mark published what the slot
    /// confirmed, leave the rest pending for the polling relays, drop the
    /// slot and its publication. Run with every relay on the slot stopped.
    ///
    /// # Errors
    /// [`Error::Logical`] when the slot is missing or invalidated (which
    /// events it confirmed is then unknown), or the stream's lease is held;
    /// [`Error::Database`] when a statement fails.
    pub async fn leave_logical(&self, slot: &SlotName) -> Result<LeftLogical, Error> {
        let postgres = self.postgres("leave-logical")?;
        self.store.migrate().await?;
        let operator_id = format!("leave-logical-{}", uuid::Uuid::now_v7().simple());
        crate::operator::leave_logical(postgres.pool(), slot, &operator_id).await
    }

    /// [`RelayAdmin::replay`] under the logical source: the table's
    /// published events and the streamed ones the slot confirmed.
    pub(super) async fn replay_streamed(
        &self,
        slot: &SlotName,
        request: &ReplayRequest,
        broker: &BrokerUrl,
        config: &RelayConfig,
    ) -> Result<ReplaySummary, Error> {
        let postgres = self.postgres("replaying streamed events")?;
        if slot_status(postgres.pool(), slot).await?.is_none() {
            return Err(missing_slot_error(
                slot,
                "name the slot with --slot, or replay without --source logical once the relays \
                 poll",
            ));
        }
        let source = StreamedReplay::new(postgres.pool(), slot);
        let (window, replayed) = self.replay_from(&source, request, broker, config).await?;
        let left_out = unconfirmed_in_window(postgres.pool(), slot, &window).await?;
        Ok(ReplaySummary {
            window,
            replayed,
            left_out,
        })
    }
}
