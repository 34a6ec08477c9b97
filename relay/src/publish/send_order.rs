//! Keeping later sends behind earlier ones when a broker client is
//! rebuilt.
//!
//! A publisher that keeps order across sends
//! ([`SentEvents::in_order_in_flight`](super::SentEvents::in_order_in_flight))
//! relies on one client (one Kafka producer, one AMQP connection) storing
//! what it was given in order. When that client is replaced (a connection
//! dropped after a confirm timeout or closed by the broker, a producer
//! rebuilt after a fatal error), the events still unacknowledged on the old
//! one may be lost, and a send on the new client would reach the broker
//! before they are sent again. [`SendOrder`] refuses such a send: while a
//! send on an older client is still unsettled (its acknowledgements not yet
//! awaited to the end, nor dropped), a send on a newer client is not handed
//! over at all. The relay then lands everything in flight and fetches again
//! in id order, so the lost events go out first.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::PublishFailure;

/// The sends of one publisher still unsettled, per client generation.
#[derive(Debug, Default)]
pub(crate) struct SendOrder {
    /// Generation → sends on it whose acknowledgements are still to come.
    unsettled: Mutex<BTreeMap<u64, usize>>,
}

impl SendOrder {
    /// A tracker with no send unsettled.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(SendOrder::default())
    }

    /// Start a send on the client of `generation` (a number that grows with
    /// every client the publisher builds). Refused while a send on an older
    /// client is unsettled; the returned guard marks the send settled when
    /// dropped.
    pub(crate) fn enter(
        self: &Arc<Self>,
        generation: u64,
        broker: &str,
    ) -> Result<UnsettledSend, PublishFailure> {
        let mut unsettled = self
            .unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((&older, &count)) = unsettled.range(..generation).next_back() {
            return Err(PublishFailure::Unavailable(format!(
                "not sent: {count} earlier send(s) on a replaced {broker} client \
                 (generation {older}) are not settled yet; events lost with it go out first"
            )));
        }
        *unsettled.entry(generation).or_insert(0) += 1;
        Ok(UnsettledSend {
            order: Arc::clone(self),
            generation,
        })
    }

    /// Sends not yet settled, over every generation.
    #[cfg(test)]
    fn unsettled(&self) -> usize {
        self.unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .sum()
    }
}

/// A send whose acknowledgements are still to come; settled when dropped.
#[derive(Debug)]
pub(crate) struct UnsettledSend {
    order: Arc<SendOrder>,
    generation: u64,
}

impl Drop for UnsettledSend {
    fn drop(&mut self) {
        let mut unsettled = self
            .order
            .unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = unsettled.get_mut(&self.generation) {
            *count -= 1;
            if *count == 0 {
                unsettled.remove(&self.generation);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_on_one_client_never_wait_for_each_other() {
        let order = SendOrder::new();
        let first = order.enter(1, "test").expect("first");
        let second = order.enter(1, "test").expect("second");
        assert_eq!(order.unsettled(), 2);
        drop((first, second));
        assert_eq!(order.unsettled(), 0);
    }

    #[test]
    fn a_send_on_a_new_client_waits_until_the_old_client_s_sends_settle() {
        let order = SendOrder::new();
        let old_first = order.enter(1, "test").expect("old");
        let old_second = order.enter(1, "test").expect("old");
        let refused = order
            .enter(2, "test")
            .expect_err("refused while old sends are unsettled");
        assert!(refused.message().contains("2 earlier send(s)"), "{refused}");
        drop(old_first);
        assert!(order.enter(2, "test").is_err(), "one old send is left");
        drop(old_second);
        let new = order
            .enter(2, "test")
            .expect("the old client's sends settled");
        // A send on the old client after that is not held back: only a newer
        // client waits for an older one.
        let late_old = order.enter(1, "test").expect("older generation");
        drop((new, late_old));
        assert_eq!(order.unsettled(), 0);
    }
}
