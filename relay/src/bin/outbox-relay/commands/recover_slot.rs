//! `outbox-relay recover-slot`: re-create a replication slot PostgreSQL
//! invalidated, and hand what was committed since `--since` back to the
//! relays (see [`outbox_relay::operator::recover_slot`]).

use outbox_relay::config::database_url::DatabaseUrl;
use outbox_relay::error::Error;
use outbox_relay::operator::ReplayTime;
use outbox_relay::operator::recover_slot as recover;
use outbox_relay::source::logical::SlotName;
use outbox_relay::store::{OperatorStore, PostgresStore};

pub(super) async fn recover_slot(
    database_url: &DatabaseUrl,
    slot: &SlotName,
    since: ReplayTime,
) -> Result<(), Error> {
    let store = PostgresStore::connect(database_url.as_str()).await?;
    store.migrate().await?;
    let since = since.resolve(store.database_time().await?);
    let recovery_id = format!("recover-slot-{}", uuid::Uuid::now_v7().simple());
    let recovered = recover(store.pool(), slot, since, &recovery_id).await?;
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
