//! [`DeliveryPolicy::deliver_batch`]: many messages in one inbox
//! transaction, with the promise of one: every event's inbox row and its
//! handler's effects commit together, and nothing is acknowledged before.
//!
//! 1. **Decode** each message; poison goes to the dead-letter path at once,
//!    as one message would.
//! 2. **One transaction**: the event ids are recorded with one statement
//!    that returns the new ones ([`InboxBackend::record_messages`]); the
//!    handler gets the new events in delivery order
//!    ([`Handler::handle_batch`]); commit. An event id delivered twice in
//!    the batch, or processed before, is a duplicate.
//! 3. **A database outage** (begin, the inbox rows, commit, or a handler
//!    error caused by a lost connection) rolls back and tries the whole
//!    batch again after a pause, not counted as an attempt.
//! 4. **A handler failure** (an error or a panic) rolls back, and each
//!    message is [`Settlement::RunAlone`]: the adapter runs it again on its
//!    own through [`DeliveryPolicy::deliver`], in order per key and keys
//!    side by side, so only the failing event retries, backs off, or is
//!    dead-lettered, and no other key waits for it.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::attempt::{is_database_outage, panic_message};
use super::{BrokerMessage, DeliveryPolicy, Settlement, pause, release};
use crate::backend::InboxBackend;
use crate::delivery::Delivery;
use crate::error::Error;
use crate::handler::{BatchItem, Handler};
use crate::incoming::IncomingEvent;

/// A decoded message of a batch: its index in the batch, its CloudEvent,
/// the handler's event and the attempts recorded on it before.
struct Decoded<E> {
    index: usize,
    incoming: IncomingEvent,
    event: E,
    previous_attempts: u32,
}

/// How one try of the batch's transaction ended.
enum BatchResult {
    /// Committed: whether each decoded message was new (handled) or a
    /// duplicate, in the order of the decoded messages.
    Committed(Vec<bool>),
    /// The database could not be reached; nothing committed.
    DatabaseOutage(String),
    /// The handler failed or panicked; nothing committed.
    HandlerFailed(String),
}

impl<DB: InboxBackend, H: Handler<DB>> DeliveryPolicy<DB, H> {
    /// Take every message of `messages` to its end in as few transactions
    /// as the module describes; one settlement per message, in order.
    pub(crate) async fn deliver_batch<M: BrokerMessage>(
        &self,
        messages: &[M],
        give_up: &CancellationToken,
    ) -> Vec<Settlement> {
        let mut settlements = vec![Settlement::Released; messages.len()];
        let mut decoded = Vec::with_capacity(messages.len());
        for (index, message) in messages.iter().enumerate() {
            let previous_attempts = message.previous_attempts();
            match self.decode(message) {
                Ok((incoming, event)) => decoded.push(Decoded {
                    index,
                    incoming,
                    event,
                    previous_attempts,
                }),
                Err(reason) => {
                    tracing::error!(%reason, "poison message in a batch; dead-lettering it");
                    settlements[index] = self
                        .dead_letter(message, &reason, previous_attempts, give_up)
                        .await;
                }
            }
        }
        if decoded.len() <= 1 {
            for one in &decoded {
                settlements[one.index] = self
                    .deliver_decoded(
                        &messages[one.index],
                        &one.incoming,
                        &one.event,
                        one.previous_attempts,
                        give_up,
                    )
                    .await;
            }
            return settlements;
        }

        let mut outages: u32 = 0;
        loop {
            match self.try_batch(&decoded).await {
                BatchResult::Committed(handled) => {
                    for (one, new) in decoded.iter().zip(handled) {
                        settlements[one.index] = self.counted(&one.incoming.id, new);
                    }
                    return settlements;
                }
                BatchResult::DatabaseOutage(error) => {
                    outages = outages.saturating_add(1);
                    self.stats.count_database_outage();
                    let delay = self.retry.delay(outages);
                    tracing::warn!(
                        events = decoded.len(),
                        %error,
                        outages,
                        retry_in_ms = super::millis(delay),
                        "database unreachable; retrying the batch (not counted as an attempt)"
                    );
                    if !pause(delay, give_up).await {
                        release();
                        return settlements;
                    }
                }
                BatchResult::HandlerFailed(error) => {
                    tracing::warn!(
                        events = decoded.len(),
                        %error,
                        "a handler failed in the batch; rolled back, running its messages one \
                         at a time"
                    );
                    for one in &decoded {
                        settlements[one.index] = Settlement::RunAlone;
                    }
                    return settlements;
                }
            }
        }
    }

    /// Count a message of a committed batch: processed when its event was
    /// new, else a duplicate.
    fn counted(&self, event_id: &str, new: bool) -> Settlement {
        if new {
            self.stats.count_processed();
            tracing::debug!(event_id, "event processed in a batch");
            Settlement::Processed
        } else {
            self.stats.count_duplicate();
            tracing::debug!(event_id, "duplicate event skipped in a batch");
            Settlement::Duplicate
        }
    }

    /// One try of the batch's transaction, in an `inbox.handle_batch` span.
    async fn try_batch(&self, decoded: &[Decoded<H::Event>]) -> BatchResult {
        let span = tracing::info_span!(
            "inbox.handle_batch",
            consumer = %self.inbox.consumer(),
            events = decoded.len(),
        );
        let transaction = async {
            let mut tx = outbox::begin_transaction(self.inbox.pool()).await?;
            let event_ids: Vec<&str> = decoded.iter().map(|one| one.incoming.id.as_str()).collect();
            let inserted = DB::record_messages(&mut *tx, self.inbox.consumer(), &event_ids).await?;
            let handled = first_deliveries(&event_ids, &inserted);
            let deliveries: Vec<Delivery<'_>> = decoded
                .iter()
                .map(|one| Delivery::new(&one.incoming, one.previous_attempts.saturating_add(1)))
                .collect();
            let batch: Vec<BatchItem<'_, H::Event>> = decoded
                .iter()
                .zip(&deliveries)
                .zip(&handled)
                .filter(|(_, new)| **new)
                .map(|((one, delivery), _)| BatchItem::new(&one.event, *delivery))
                .collect();
            if batch.is_empty() {
                tx.rollback().await?;
                return Ok(handled);
            }
            match self.handler.handle_batch(&mut *tx, &batch).await {
                Ok(()) => {
                    tx.commit().await?;
                    Ok(handled)
                }
                Err(source) => {
                    tx.rollback().await?;
                    Err(Error::Handler {
                        event_id: format!("one of {} in a batch", batch.len()),
                        source,
                    })
                }
            }
        }
        .instrument(span);
        match AssertUnwindSafe(transaction).catch_unwind().await {
            Ok(Ok(handled)) => BatchResult::Committed(handled),
            Ok(Err(error)) if is_database_outage(&error) => {
                BatchResult::DatabaseOutage(error.to_string())
            }
            Ok(Err(error)) => BatchResult::HandlerFailed(error.to_string()),
            Err(panic) => BatchResult::HandlerFailed(format!(
                "a handler panicked in the batch: {}",
                panic_message(panic.as_ref())
            )),
        }
    }
}

/// Whether each of `event_ids` is handled by this batch: recorded by it
/// (in `inserted`) and its first occurrence in the batch; a later
/// occurrence of the same id is a duplicate delivery.
fn first_deliveries(event_ids: &[&str], inserted: &HashSet<String>) -> Vec<bool> {
    let mut seen = HashSet::with_capacity(event_ids.len());
    event_ids
        .iter()
        .map(|id| inserted.contains(*id) && seen.insert(*id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_id_is_handled_once_and_an_old_one_not_at_all() {
        let inserted: HashSet<String> = ["a", "c"].iter().map(|id| (*id).to_owned()).collect();
        assert_eq!(
            first_deliveries(&["a", "b", "a", "c"], &inserted),
            [true, false, false, true]
        );
    }
}
