//! [`ClientSlot`]: a publisher's current broker connection, opened on
//! demand, replaced after it broke, and numbered, so that a send on a
//! replacement can wait for the sends of the connection it replaced
//! ([`SendOrder`](super::send_order::SendOrder)).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::PublishFailure;

/// A broker connection a [`ClientSlot`] holds.
pub(crate) trait SlotClient: Send + Sync {
    /// Whether it can still carry publishes.
    fn is_live(&self) -> bool;
}

/// The current connection of a publisher, if any.
pub(crate) struct ClientSlot<C> {
    current: Mutex<Option<Arc<C>>>,
    /// Held while connecting, so that concurrent publishes open one
    /// connection, not one each.
    connecting: tokio::sync::Mutex<()>,
    /// Connections opened so far; each one's number is its generation.
    opened: AtomicU64,
}

impl<C: SlotClient> Default for ClientSlot<C> {
    fn default() -> Self {
        ClientSlot {
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            opened: AtomicU64::new(0),
        }
    }
}

impl<C: SlotClient> ClientSlot<C> {
    /// The current connection, if it is live.
    pub(crate) fn live(&self) -> Option<Arc<C>> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|client| client.is_live())
            .cloned()
    }

    /// The current connection, live or not.
    pub(crate) fn current(&self) -> Option<Arc<C>> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The live connection, or a new one from `open`, which gets the new
    /// connection's generation (1 for the first). Concurrent callers wait
    /// for one `open`.
    pub(crate) async fn get_or_open<F, Opening>(&self, open: F) -> Result<Arc<C>, PublishFailure>
    where
        F: FnOnce(u64) -> Opening,
        Opening: Future<Output = Result<C, PublishFailure>>,
    {
        if let Some(client) = self.live() {
            return Ok(client);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(client) = self.live() {
            return Ok(client);
        }
        // A connection left here is broken: drop it.
        drop(
            self.current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let generation = self.opened.load(Ordering::Relaxed) + 1;
        let client = Arc::new(open(generation).await?);
        self.opened.store(generation, Ordering::Relaxed);
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&client));
        Ok(client)
    }

    /// Take `client` out if it is still the current connection, so that the
    /// next publish opens a new one; `None` when it was already replaced.
    pub(crate) fn take_if_current(&self, client: &Arc<C>) -> Option<Arc<C>> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match current.as_ref() {
            Some(held) if Arc::ptr_eq(held, client) => current.take(),
            _ => None,
        }
    }

    /// Connections opened to replace an earlier one.
    pub(crate) fn rebuilds(&self) -> u64 {
        self.opened.load(Ordering::Relaxed).saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    struct Client {
        generation: u64,
        live: AtomicBool,
    }

    impl SlotClient for Client {
        fn is_live(&self) -> bool {
            self.live.load(Ordering::Relaxed)
        }
    }

    fn open(generation: u64) -> std::future::Ready<Result<Client, PublishFailure>> {
        std::future::ready(Ok(Client {
            generation,
            live: AtomicBool::new(true),
        }))
    }

    #[tokio::test]
    async fn a_connection_is_kept_while_live_and_replaced_after() {
        let slot = ClientSlot::<Client>::default();
        let first = slot.get_or_open(open).await.expect("first");
        assert_eq!(first.generation, 1);
        let again = slot.get_or_open(open).await.expect("again");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(slot.rebuilds(), 0);

        first.live.store(false, Ordering::Relaxed);
        assert!(slot.live().is_none());
        let second = slot.get_or_open(open).await.expect("second");
        assert_eq!(second.generation, 2);
        assert_eq!(slot.rebuilds(), 1);

        assert!(slot.take_if_current(&first).is_none(), "already replaced");
        assert!(slot.take_if_current(&second).is_some());
        assert!(slot.current().is_none());
    }

    #[tokio::test]
    async fn a_failed_open_keeps_the_generation() {
        let slot = ClientSlot::<Client>::default();
        let failed = slot
            .get_or_open(|_| std::future::ready(Err(PublishFailure::Unavailable("down".into()))))
            .await;
        assert!(failed.is_err());
        let first = slot.get_or_open(open).await.expect("first");
        assert_eq!(first.generation, 1);
        assert_eq!(slot.rebuilds(), 0);
    }
}
