//! `outbox-relay leave-logical`: back from `--source logical` to polling
//! (see [`RelayAdmin::leave_logical`]).

use outbox_relay::admin::RelayAdmin;
use outbox_relay::config::{DatabaseUrl, SlotName};
use outbox_relay::error::Error;

pub(super) async fn leave_logical(
    database_url: &DatabaseUrl,
    slot: &SlotName,
) -> Result<(), Error> {
    let admin = RelayAdmin::connect(database_url.clone()).await?;
    let left = admin.leave_logical(slot).await?;
    println!(
        "{} streamed event(s) the slot had confirmed were marked published; {} event(s) the \
         slot had not confirmed stay pending and are published (again, for those already \
         streamed) by the polling relays; the replication slot and publication `{}` are \
         dropped: start the relays with --source poll",
        left.marked_published, left.left_pending, left.slot
    );
    Ok(())
}
