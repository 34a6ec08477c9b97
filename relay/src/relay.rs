//! [`Relay`]: one relay instance, from start to graceful stop.
//!
//! Stop happens in three steps: the caller cancels the token (on SIGTERM or
//! SIGINT); the dispatcher stops fetching, finishes the batch in hand and
//! its marks; then the background tasks stop and every lease is released.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::batch::PublishHealth;
use crate::batch::RelayMetrics;
use crate::batch::{DispatchSettings, DispatchTotals, Dispatcher};
use crate::error::Error;
use crate::event::Wakeup;
use crate::leases::LeaseKeeper;
use crate::leases::LeaseStore;
use crate::operator::{RetentionSettings, run_retention};
use crate::publish::Publisher;
use crate::source::{EventSource, OutboxStore};
use crate::store::OperatorStore;
use crate::tasks::Tasks;

/// Settings of one relay instance.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelaySettings {
    /// This instance's id, the owner of its leases.
    pub relay_id: String,
    /// How long a partition lease lasts without renewal.
    pub lease_duration: Duration,
    /// The batch loop's settings.
    pub dispatch: DispatchSettings,
    /// Retention of published events; `None` keeps them.
    pub retention: Option<RetentionSettings>,
}

/// A relay instance: a store, a publisher and settings.
pub struct Relay {
    store: Arc<dyn OutboxStore>,
    publisher: Arc<dyn Publisher>,
    settings: RelaySettings,
    wakeup: Wakeup,
    metrics: Arc<RelayMetrics>,
    health: Arc<PublishHealth>,
    /// Where committed events come from; the store unless replaced.
    events: Arc<dyn EventSource>,
    /// Whose leases the batch loop works under; the store's partition
    /// leases unless replaced.
    leases: Arc<dyn LeaseStore>,
    /// Where its background tasks run: lease renewal, retention, the
    /// marks and the fetch ahead.
    tasks: Tasks,
}

impl Relay {
    /// A relay that polls; add wake-ups with [`Relay::with_wakeup`].
    pub fn new(
        store: Arc<dyn OutboxStore>,
        publisher: Arc<dyn Publisher>,
        settings: RelaySettings,
    ) -> Self {
        let health = Arc::new(PublishHealth::new(settings.dispatch.handover_after));
        Relay {
            events: store.clone() as Arc<dyn EventSource>,
            leases: store.clone() as Arc<dyn LeaseStore>,
            store,
            publisher,
            settings,
            wakeup: Wakeup::new(),
            metrics: Arc::new(RelayMetrics::new()),
            health,
            tasks: Tasks::new(),
        }
    }

    /// Spawn the relay's background tasks on `tasks` (the program's root,
    /// or a child of it), so that the program can wait for every one of
    /// them. [`Relay::run`] returns once those it spawned have ended.
    pub fn with_tasks(mut self, tasks: Tasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// Take committed events from `events` instead of polling the store's
    /// table; leases, retention and operator reads still use the store.
    #[cfg(any(feature = "logical", feature = "test-util"))]
    pub fn with_event_source(mut self, events: Arc<dyn EventSource>) -> Self {
        self.events = events;
        self
    }

    /// Work under the leases of `leases` instead of the store's partition
    /// leases: a source with its own unit of work (one replication stream)
    /// leases that unit, and [`LeaseStore::partition_count`] says how many
    /// units there are. Pair it with [`Relay::with_event_source`].
    #[cfg(any(feature = "logical", feature = "test-util"))]
    pub fn with_lease_store(mut self, leases: Arc<dyn LeaseStore>) -> Self {
        self.leases = leases;
        self
    }

    /// Report publish health into `health` (e.g. one read by the HTTP
    /// endpoint's `/readyz`) instead of a private one.
    pub fn with_publish_health(mut self, health: Arc<PublishHealth>) -> Self {
        self.health = health;
        self
    }

    /// Whether this relay can publish.
    #[cfg(feature = "test-util")]
    pub fn publish_health(&self) -> &Arc<PublishHealth> {
        &self.health
    }

    /// Record into `metrics` (e.g. ones served on the HTTP endpoint)
    /// instead of a private set.
    pub fn with_metrics(mut self, metrics: Arc<RelayMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics this relay records into.
    #[cfg(feature = "test-util")]
    pub fn metrics(&self) -> &Arc<RelayMetrics> {
        &self.metrics
    }

    /// Use `wakeup`, raised when events are committed.
    pub fn with_wakeup(mut self, wakeup: Wakeup) -> Self {
        self.wakeup = wakeup;
        self
    }

    /// Run until `stop` is cancelled, then stop gracefully and release every
    /// lease. Returns the run's totals.
    ///
    /// # Errors
    /// Only when the relay cannot start (the partition table is unreadable).
    pub async fn run(self, stop: CancellationToken) -> Result<DispatchTotals, Error> {
        let partition_count = self.leases.partition_count().await?;
        if partition_count < 1 {
            return Err(Error::NotFound(
                "outbox_partitions is empty: run `outbox-relay migrate` on this database"
                    .to_owned(),
            ));
        }
        let keeper = Arc::new(LeaseKeeper::new(
            Arc::clone(&self.leases),
            self.settings.relay_id.clone(),
            self.settings.lease_duration,
            partition_count,
        ));
        tracing::info!(relay_id = %self.settings.relay_id, partition_count, "relay starting");

        let background = self.tasks.child();
        let mut spawned =
            vec![background.spawn(renew_leases(Arc::clone(&keeper), background.stop_token()))];
        if let Some(retention) = self.settings.retention.clone() {
            spawned.push(background.spawn(run_retention(
                self.store.clone() as Arc<dyn OperatorStore>,
                retention,
                background.stop_token(),
            )));
        }

        let dispatcher = Dispatcher::new(
            Arc::clone(&self.events),
            Arc::clone(&self.publisher),
            Arc::clone(&keeper),
            self.wakeup.clone(),
            self.settings.dispatch.clone(),
            Arc::clone(&self.metrics),
            Arc::clone(&self.health),
        )
        .with_tasks(self.tasks.clone());
        let totals = dispatcher.run(stop).await;

        background.cancel();
        for task in spawned {
            if let Err(error) = task.await {
                tracing::error!(%error, "a background task of the relay failed");
            }
        }
        match keeper.release_all().await {
            Ok(()) => self.metrics.set_leases_held(0),
            Err(error) => {
                tracing::warn!(%error, "releasing leases failed; they expire on their own")
            }
        }
        tracing::info!(
            published = totals.published,
            failed = totals.failed,
            dead = totals.dead,
            stale_marks = totals.stale_marks,
            "relay stopped"
        );
        Ok(totals)
    }
}

/// Renew leases every third of the lease until `stop`.
async fn renew_leases(keeper: Arc<LeaseKeeper>, stop: CancellationToken) {
    loop {
        let delay = match keeper.renew().await {
            Ok(()) => keeper.renew_interval(),
            Err(error) => {
                tracing::warn!(%error, "lease renewal failed; retrying");
                Duration::from_secs(1).min(keeper.renew_interval())
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}
