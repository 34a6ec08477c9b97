//! [`RelayAdmin::replay`]: re-publish one topic's published events of a
//! time window, with their original ids; under the logical source, the
//! streamed events the slot confirmed too.

use super::{RelayAdmin, ReplayTime, ReplayWindow};
use crate::config::{BrokerUrl, RelayConfig, build_publisher};
use crate::error::Error;
use crate::operator::{ReplaySource, replay, resolve_window};
use crate::store::OperatorStore;
use crate::tasks::Tasks;

/// The topic and the window to replay, before they are resolved against
/// the database's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayRequest {
    /// The topic (or exchange) whose events are replayed.
    pub topic: String,
    /// Events created at or after this time.
    pub since: ReplayTime,
    /// Events created before this time; the database's now when `None`.
    pub until: Option<ReplayTime>,
}

impl ReplayRequest {
    /// The events of `topic` created since `since`, until now.
    pub fn new(topic: impl Into<String>, since: ReplayTime) -> Self {
        ReplayRequest {
            topic: topic.into(),
            since,
            until: None,
        }
    }

    /// Only the events created before `until`.
    #[must_use]
    pub fn until(mut self, until: ReplayTime) -> Self {
        self.until = Some(until);
        self
    }
}

/// What a replay did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplaySummary {
    /// The window, resolved.
    pub window: ReplayWindow,
    /// Events published again.
    pub replayed: u64,
    /// Streamed events of the window left out (logical source): committed
    /// after the newest retention checkpoint the slot confirmed, so not
    /// known to be published yet.
    pub left_out: u64,
}

impl RelayAdmin {
    /// Replay `request` to `broker`, through a publisher built from
    /// `config` as the relay's is; `config.source` and `config.slot` say
    /// where the events were published from.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the relay deletes each event as it
    /// is published (nothing is kept to replay) or the topic has no
    /// events; [`Error::Logical`] when the slot of the logical source is
    /// missing; a broker's error when it cannot be reached.
    pub async fn replay(
        &self,
        request: &ReplayRequest,
        broker: &BrokerUrl,
        config: &RelayConfig,
    ) -> Result<ReplaySummary, Error> {
        let slot = config.logical_slot_on(self.backend)?;
        if slot.is_none() && config.deletes_on_publish() {
            return Err(Error::InvalidArgument(
                "nothing to replay: with retention.published = \"0s\" the relay deletes each \
                 event as the broker acknowledges it; keep published events \
                 (retention.published above 0s) to replay them"
                    .to_owned(),
            ));
        }
        let Some(slot) = slot else {
            let (window, replayed) = self
                .replay_from(self.store.as_ref(), request, broker, config)
                .await?;
            return Ok(ReplaySummary {
                window,
                replayed,
                left_out: 0,
            });
        };
        #[cfg(feature = "logical")]
        {
            self.replay_streamed(&slot, request, broker, config).await
        }
        #[cfg(not(feature = "logical"))]
        {
            let _ = slot;
            Err(Error::FeatureNotBuilt {
                feature: "logical",
                needed_for: "replaying the logical source's events".to_owned(),
            })
        }
    }

    /// Resolve `request`'s window, then replay what `source` reads of it;
    /// the window and how many events were replayed.
    pub(super) async fn replay_from<S: ReplaySource + ?Sized>(
        &self,
        source: &S,
        request: &ReplayRequest,
        broker: &BrokerUrl,
        config: &RelayConfig,
    ) -> Result<(ReplayWindow, u64), Error> {
        let store: &dyn OperatorStore = self.store.as_ref();
        let window = resolve_window(store, &request.topic, request.since, request.until).await?;
        // The publisher's background work ends with the replay.
        let tasks = Tasks::new();
        let publisher = build_publisher(broker, config, &tasks).await?;
        tracing::info!(
            topic = %window.topic,
            since = %window.since.to_rfc3339(),
            until = %window.until.to_rfc3339(),
            database = %self.label,
            broker = %broker,
            "replay started"
        );
        let page_size = i64::from(config.batch_size());
        let replayed = replay(source, publisher.as_ref(), &window, page_size).await;
        tasks.cancel();
        tasks.wait().await;
        Ok((window, replayed?))
    }
}
