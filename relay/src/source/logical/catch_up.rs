//! Before the stream opens: the slot's backlog (see `slot_backlog.rs`)
//! handed to the table path by the holder of the stream's lease, retried
//! until it is done, the lease is lost or the stream is stopped.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::slot_backlog::{BACKLOG_NOTE, HandedOver, hand_over};
use super::table_path::Writer;
use crate::source::SlotName;

/// The longest pause between two attempts.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Hand the backlog of `slot` over as `relay_id` under `lease_token`;
/// `after_batch` runs after each batch, so the table path can publish what
/// was handed over while the rest is. Returns whether the stream may open:
/// false once the lease is lost or `stop` is cancelled.
pub(crate) async fn hand_over_backlog(
    pool: &PgPool,
    slot: &SlotName,
    relay_id: &str,
    lease_token: i64,
    stop: &CancellationToken,
    mut after_batch: impl FnMut(),
) -> bool {
    let writer = Writer {
        relay_id,
        lease_token,
    };
    let mut delay = Duration::from_millis(100);
    let mut announced = false;
    loop {
        let handed = hand_over(pool, slot, writer, BACKLOG_NOTE, |handed| {
            if !announced {
                tracing::info!(
                    slot = %slot,
                    "publishing the backlog: the events committed before the replication slot \
                     existed go to the table path before the stream opens"
                );
                announced = true;
            }
            tracing::debug!(slot = %slot, handed, "backlog events handed to the table path");
            after_batch();
        });
        let retry = match tokio::select! {
            () = stop.cancelled() => return false,
            handed = handed => handed,
        } {
            Ok(HandedOver::Finished(handed)) => {
                if handed > 0 {
                    tracing::info!(
                        slot = %slot,
                        handed,
                        "the slot's backlog is with the table path; streaming"
                    );
                }
                return true;
            }
            Ok(HandedOver::LeaseLost(handed)) => {
                tracing::warn!(
                    slot = %slot,
                    lease_token,
                    handed,
                    "the stream's lease was lost while handing the slot's backlog over; the next \
                     holder goes on from where it stopped"
                );
                return false;
            }
            Ok(HandedOver::Unbound) => {
                tracing::info!(
                    slot = %slot,
                    "the replication slot is being created by another process; waiting for its \
                     backlog's bound"
                );
                delay
            }
            Err(error) => {
                tracing::warn!(
                    slot = %slot,
                    %error,
                    retry_in_ms = delay.as_millis() as u64,
                    "handing the slot's backlog to the table path failed; retrying"
                );
                delay
            }
        };
        tokio::select! {
            () = stop.cancelled() => return false,
            () = tokio::time::sleep(retry) => {}
        }
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}
