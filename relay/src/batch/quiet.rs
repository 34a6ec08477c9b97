//! Keeping the producers' commit notifications quiet while the relay polls
//! on its own.
//!
//! On PostgreSQL a trigger notifies the relays of new events. A `NOTIFY`
//! costs the producers: the commits of all notifying transactions queue on
//! one lock, held through each one's WAL flush, so outbox writes commit one
//! at a time. A relay that keeps finding events does not need the
//! notification: after a batch of at least [`QUIET_AFTER_BATCH`] events
//! (commits arrive faster than the relay polls), it keeps polling every
//! `poll_interval_min` for [`QUIET_WINDOW`]. While it does, it says so in
//! the database
//! ([`EventSource::quiet_notifications`](crate::source::EventSource::quiet_notifications)),
//! and the trigger skips the `NOTIFY` while no relay waits for one.
//!
//! Below that rate a notification costs the producers little, and it wakes
//! the relay at once, where a poll would wait up to `poll_interval_min`.
//!
//! The window the relay keeps to starts when the database has answered,
//! so it never ends before the one the database keeps. A transaction that
//! inserted during the window and commits after it is found by the next
//! poll of the idle backoff, which starts again from `poll_interval_min`.

use std::time::Duration;

use tokio::time::Instant;

use super::Dispatcher;

/// How long a relay polls on its own after a batch, with the producers'
/// notifications quiet; renewed once half of it has passed.
pub(super) const QUIET_WINDOW: Duration = Duration::from_secs(2);

/// The fewest events a batch must have for the relay to go quiet: events
/// then arrive faster than notifications are worth (on this project's
/// bench machine, notifying commits queue up at about 3,400 per second,
/// and 5,000 events/s make batches of 25 to 50 events).
pub(super) const QUIET_AFTER_BATCH: usize = 32;

impl Dispatcher {
    /// Renew the quiet window when half of it has passed, when the relay
    /// does not need notifications now (`needs_none`: right after a batch
    /// of [`QUIET_AFTER_BATCH`] events or more, or while it holds no lease),
    /// and at any time for a source that is
    /// told of commits without them. A failed renewal is logged; the window
    /// then lapses and the producers notify again.
    pub(super) async fn keep_notifications_quiet(&mut self, needs_none: bool) {
        if !needs_none && self.store.waits_for_notifications() {
            return;
        }
        let now = Instant::now();
        if self
            .quiet_until
            .is_some_and(|until| until > now + QUIET_WINDOW / 2)
        {
            return;
        }
        let relay_id = self.leases.relay_id().to_owned();
        match self
            .store
            .quiet_notifications(&relay_id, QUIET_WINDOW)
            .await
        {
            Ok(true) => self.quiet_until = Some(Instant::now() + QUIET_WINDOW),
            Ok(false) => {}
            Err(error) => tracing::warn!(
                %error,
                "could not renew the quiet window of commit notifications; producers notify again"
            ),
        }
    }

    /// Whether producers may be skipping their notifications because of
    /// this relay: it must then poll every `poll_interval_min`.
    pub(super) fn polls_on_its_own(&self) -> bool {
        self.quiet_until.is_some_and(|until| Instant::now() < until)
    }
}
