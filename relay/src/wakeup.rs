//! [`Wakeup`]: wake the batch loop when events are committed.
//!
//! On PostgreSQL a trigger on `outbox_events` sends `NOTIFY outbox_events`
//! once per inserting statement, and [`Wakeup::listen_postgres`] turns it
//! into a wake-up. Everywhere else, and as the fallback, the loop polls with
//! an adaptive interval.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The channel the outbox trigger notifies.
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

    /// Wake the loop now (or at its next wait).
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

    /// Listen on PostgreSQL for new events until `stop`; reconnects after
    /// errors. Returns when stopped.
    pub async fn listen_postgres(self, pool: PgPool, stop: CancellationToken) {
        while !stop.is_cancelled() {
            let mut listener = match PgListener::connect_with(&pool).await {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::warn!(%error, "cannot open the LISTEN connection; polling meanwhile");
                    pause(&stop).await;
                    continue;
                }
            };
            if let Err(error) = listener.listen(NOTIFY_CHANNEL).await {
                tracing::warn!(%error, "LISTEN failed; polling meanwhile");
                pause(&stop).await;
                continue;
            }
            tracing::debug!(channel = NOTIFY_CHANNEL, "listening for new outbox events");
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    received = listener.recv() => match received {
                        Ok(_) => self.wake(),
                        Err(error) => {
                            tracing::warn!(%error, "LISTEN connection lost; reconnecting");
                            break;
                        }
                    },
                }
            }
            // Events may have been committed while the connection was down.
            self.wake();
        }
    }
}

async fn pause(stop: &CancellationToken) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
}
