//! `outbox-relay recover-slot`: re-create a replication slot PostgreSQL
//! invalidated, and hand what was committed since `--since` back to the
//! relays (see [`RelayAdmin::recover_slot`]).

use outbox_relay::admin::{RelayAdmin, ReplayTime};
use outbox_relay::config::{DatabaseUrl, SlotName};
use outbox_relay::error::Error;

pub(super) async fn recover_slot(
    database_url: &DatabaseUrl,
    slot: &SlotName,
    since: ReplayTime,
) -> Result<(), Error> {
    let admin = RelayAdmin::connect(database_url.clone()).await?;
    let recovered = admin.recover_slot(slot, since).await?;
    let slot_done = match (recovered.dropped_lost_slot, recovered.created_slot) {
        (true, _) => "the invalidated replication slot was dropped and created again",
        (false, true) => "the replication slot was created",
        (false, false) => "the replication slot was not invalidated and was kept",
    };
    println!(
        "{slot_done} (`{}`); {} event(s) created from {} to before {} handed to the relays, \
         which publish them again from the table, each aggregate in id order: start the relays \
         with --source logical --slot {}",
        recovered.slot,
        recovered.handed_over,
        recovered.since.to_rfc3339(),
        recovered.until.to_rfc3339(),
        recovered.slot
    );
    Ok(())
}
