//! [`Wakeup`]: wake the batch loop when events are committed.
//!
//! A store raises it where the database can tell of commits
//! ([`EventSource::watch_commits`](crate::source::EventSource::watch_commits):
//! PostgreSQL's `NOTIFY`). Everywhere else, and as the fallback, the loop
//! polls with an adaptive interval.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// The channel the outbox trigger on PostgreSQL notifies.
#[cfg(any(feature = "postgres", feature = "test-util"))]
pub const NOTIFY_CHANNEL: &str = "outbox_events";

/// A wake-up signal shared by whatever learns of new events and the loop.
#[derive(Debug, Clone, Default)]
pub struct Wakeup {
    notify: Arc<Notify>,
}

impl Wakeup {
    /// A signal nobody raises yet: the loop only polls.
    pub fn new() -> Self {
        Wakeup::default()
    }

    /// Wake the loop now (or at its next wait): on a commit notification
    /// (PostgreSQL) or a streamed event.
    #[cfg(any(feature = "postgres", feature = "test-util"))]
    pub fn wake(&self) {
        self.notify.notify_one();
    }

    /// Wait for a wake-up, at most `delay`.
    pub async fn wait(&self, delay: Duration) {
        tokio::select! {
            () = self.notify.notified() => {}
            () = tokio::time::sleep(delay) => {}
        }
    }
}
