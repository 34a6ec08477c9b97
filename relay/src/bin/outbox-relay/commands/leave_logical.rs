//! `outbox-relay leave-logical`: back from `--source logical` to polling
//! (see [`outbox_relay::operator::leave_logical`]).

use outbox_relay::config::database_url::DatabaseUrl;
use outbox_relay::error::Error;
use outbox_relay::operator::leave_logical as leave;
use outbox_relay::source::logical::SlotName;
use outbox_relay::store::{OperatorStore, PostgresStore};

pub(super) async fn leave_logical(
    database_url: &DatabaseUrl,
    slot: &SlotName,
) -> Result<(), Error> {
    let store = PostgresStore::connect(database_url.as_str()).await?;
    store.migrate().await?;
    let operator_id = format!("leave-logical-{}", uuid::Uuid::now_v7().simple());
    let left = leave(store.pool(), slot, &operator_id).await?;
    println!(
        "{} streamed event(s) the slot had confirmed were marked published; {} event(s) the \
         slot had not confirmed stay pending and are published (again, for those already \
         streamed) by the polling relays; the replication slot and publication `{}` are \
         dropped: start the relays with --source poll",
        left.marked_published, left.left_pending, left.slot
    );
    Ok(())
}
