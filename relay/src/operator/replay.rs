//! `outbox-relay replay`: publish already published events of one topic
//! again, for consumers that lost data or are being rebuilt.
//!
//! The replay reads the published events of the topic created in the
//! [`ReplayWindow`] in id order, a page (`batch_size`) at a time, and
//! publishes each page through the relay's own [`Publisher`] in waves, so
//! the events of one aggregate arrive in id order. Every event keeps its
//! event id and carries the `outboxreplay` extension attribute
//! ([`outbox::wire::REPLAY_ATTRIBUTE`]). The replay writes
//! nothing to the database and takes no lease, so it can run beside live
//! relays. It stops at the first event the broker does not take.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use crate::batch::waves::split_events_into_waves;
use crate::error::Error;
use crate::event::OutboundEvent;
use crate::publish::Publisher;
use crate::store::{OperatorStore, ReplayWindow};

/// Where a replay reads its pages: every [`OperatorStore`] reads the
/// table's published rows; under the logical source,
/// [`crate::operator::StreamedReplay`] adds the streamed events the slot
/// confirmed, whose rows stay `pending`.
pub trait ReplaySource: Send + Sync {
    /// The events of `window` to replay with an id above `after_id`, in id
    /// order, at most `limit`. Reads only.
    fn replay_page<'a>(
        &'a self,
        window: &'a ReplayWindow,
        after_id: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>>;
}

impl<S: OperatorStore + ?Sized> ReplaySource for S {
    fn replay_page<'a>(
        &'a self,
        window: &'a ReplayWindow,
        after_id: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>> {
        self.fetch_published(window, after_id, limit)
    }
}

/// A `--since` or `--until` value before it is resolved against the
/// database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayTime {
    /// An absolute time (RFC 3339).
    At(DateTime<Utc>),
    /// That long before the replay starts (`2h`, `30m`, ...).
    Ago(Duration),
}

impl ReplayTime {
    /// The absolute time, with `now` the start of the replay.
    pub fn resolve(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            ReplayTime::At(time) => time,
            ReplayTime::Ago(duration) => match chrono::Duration::from_std(duration) {
                Ok(ago) => now
                    .checked_sub_signed(ago)
                    .unwrap_or(DateTime::<Utc>::MIN_UTC),
                Err(_) => DateTime::<Utc>::MIN_UTC,
            },
        }
    }
}

/// Resolve a replay's window on the database's clock: `until` defaults to
/// the moment the replay starts, so events created while it runs are left
/// out. Checks that the topic is known and the window is not empty.
///
/// # Errors
/// [`Error::NotFound`] when no event has `topic`; [`Error::InvalidArgument`]
/// when `since` is not before `until`; [`Error::Database`].
pub async fn resolve_window(
    store: &dyn OperatorStore,
    topic: &str,
    since: ReplayTime,
    until: Option<ReplayTime>,
) -> Result<ReplayWindow, Error> {
    let now = store.database_time().await?;
    let since = since.resolve(now);
    let until = until.map_or(now, |until| until.resolve(now));
    if since >= until {
        return Err(Error::InvalidArgument(format!(
            "--since {} is not before --until {}",
            since.to_rfc3339(),
            until.to_rfc3339()
        )));
    }
    if !store.topic_exists(topic).await? {
        return Err(Error::NotFound(format!(
            "unknown topic `{topic}`: no event in outbox_events has it"
        )));
    }
    Ok(ReplayWindow {
        topic: topic.to_owned(),
        since,
        until,
    })
}

/// Publish the published events of `window` that `source` reads again, in
/// id order, `page_size` at a time, marked as replays. Returns how many were replayed.
///
/// # Errors
/// [`Error::ReplayFailed`] at the first event the broker did not take,
/// naming how many events were replayed before it; [`Error::Database`].
pub async fn replay<S: ReplaySource + ?Sized>(
    source: &S,
    publisher: &dyn Publisher,
    window: &ReplayWindow,
    page_size: i64,
) -> Result<u64, Error> {
    let mut replayed: u64 = 0;
    let mut after_id: i64 = 0;
    loop {
        let page = source
            .replay_page(window, after_id, page_size.max(1))
            .await?;
        let Some(last) = page.last() else {
            return Ok(replayed);
        };
        after_id = last.id;
        let page_events = page.len();
        for mut wave in split_events_into_waves(page) {
            for event in &mut wave {
                event.replay = true;
            }
            let outcomes = publisher.publish(&wave).await;
            let mut first_failure = None;
            for (event, outcome) in wave.iter().zip(outcomes) {
                match outcome {
                    Ok(()) => replayed += 1,
                    Err(failure) => {
                        if first_failure.is_none() {
                            first_failure = Some((event.event_id, failure));
                        }
                    }
                }
            }
            if let Some((event_id, failure)) = first_failure {
                tracing::warn!(
                    topic = %window.topic,
                    replayed,
                    event_id = %event_id,
                    error = %failure,
                    "replay stopped"
                );
                return Err(Error::ReplayFailed {
                    topic: window.topic.clone(),
                    replayed,
                    event_id: event_id.to_string(),
                    reason: failure.to_string(),
                });
            }
        }
        tracing::info!(
            topic = %window.topic,
            page_events,
            replayed,
            last_id = after_id,
            "replay page published"
        );
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn times_are_rfc3339_or_a_duration_ago() {
        let now = Utc
            .with_ymd_and_hms(2026, 11, 30, 12, 0, 0)
            .single()
            .expect("valid time");
        let at = ReplayTime::parse("--since", "2026-11-30T10:00:00Z").expect("rfc 3339");
        assert_eq!(
            at.resolve(now),
            Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0)
                .single()
                .expect("valid time")
        );
        let offset = ReplayTime::parse("--since", "2026-11-30T11:00:00+01:00").expect("offset");
        assert_eq!(offset.resolve(now), at.resolve(now));
        let ago = ReplayTime::parse("--since", "2h").expect("duration");
        assert_eq!(ago.resolve(now), at.resolve(now));
        assert_eq!(
            ReplayTime::parse("--until", "1h30m")
                .expect("duration")
                .resolve(now),
            now - chrono::Duration::minutes(90)
        );
    }

    #[test]
    fn bad_times_name_the_flag_and_the_value() {
        for (text, needle) in [
            ("yesterday", "not a duration"),
            ("2h ago", "2h ago"),
            ("-2h", "negative"),
            ("2026-13-01T00:00:00Z", "RFC 3339"),
            ("2026-11-30", "RFC 3339"),
            ("", "empty"),
        ] {
            let error = ReplayTime::parse("--since", text)
                .expect_err(text)
                .to_string();
            assert!(error.contains("--since"), "{error}");
            assert!(error.contains(needle), "{text}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }
}
