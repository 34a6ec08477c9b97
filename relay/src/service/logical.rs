//! The logical source of a [`RelayService`](super::RelayService): opened,
//! then attached to its relay.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::batch::RelayMetrics;
use crate::config::RelayConfig;
use crate::error::Error;
use crate::event::Wakeup;
use crate::leases::LeaseStore;
use crate::operator::RetentionSettings;
use crate::relay::Relay;
use crate::service::RelayDatabase;
use crate::source::logical::LogicalSource;
use crate::source::{EventSource, OutboxStore, SlotName};
use crate::store::{Connections, OperatorStore, PostgresStore};
use crate::tasks::Tasks;

/// The PostgreSQL store and the source streaming from its slot.
pub(super) struct Opened {
    pub(super) postgres: Arc<PostgresStore>,
    pub(super) source: Arc<LogicalSource>,
}

/// What runs beside a relay on the logical source: the slot's report
/// to `/metrics` and, when retention is on, its own retention; both
/// run on `tasks` and end with them.
pub(super) struct Beside {
    pub(super) metrics: Arc<RelayMetrics>,
    pub(super) retention: Option<RetentionSettings>,
    pub(super) tasks: Tasks,
}

/// Check that the database can stream from the config's slot, migrate
/// it (when `migrate`), and create the slot and its publication when
/// missing. The stream's buffer holds `max_batch_bytes` of payloads.
pub(super) async fn open(
    database: &RelayDatabase,
    config: &RelayConfig,
    migrate: bool,
) -> Result<Opened, Error> {
    let RelayDatabase::Url(url) = database else {
        return Err(Error::InvalidArgument(
            "the logical source needs the database as a URL".to_owned(),
        ));
    };
    let slot = SlotName::parse(&config.slot)?;
    let postgres =
        Arc::new(PostgresStore::connect_with(url.as_str(), Connections::KeptOpen).await?);
    crate::source::logical::check_prerequisites(postgres.pool(), &slot).await?;
    if migrate {
        postgres.migrate().await?;
    }
    crate::source::logical::prepare(postgres.pool(), &slot).await?;
    let source = LogicalSource::new(Arc::clone(&postgres), url.as_str(), slot.clone())?
        .with_buffer_bytes(usize::try_from(config.max_batch_bytes).unwrap_or(usize::MAX));
    tracing::info!(slot = %slot, "events come from the replication slot");
    Ok(Opened {
        postgres,
        source: Arc::new(source),
    })
}

/// Put the logical source behind `relay`: it supplies the events and
/// the stream's lease, watches commits, and its slot report and
/// retention run beside it. Returns the relay and the slot report's
/// task, which ends with an error when the server invalidates the
/// slot.
pub(super) fn attach(
    relay: Relay,
    opened: Opened,
    store: &Arc<dyn OutboxStore>,
    beside: Beside,
    wakeup: Wakeup,
    relay_tasks: &Tasks,
) -> (Relay, JoinHandle<Result<(), Error>>) {
    let Opened { postgres, source } = opened;
    source.watch_commits(wakeup, relay_tasks);
    let slot_watch = beside.tasks.spawn(crate::operator::report_slot(
        postgres.pool().clone(),
        source.slot().clone(),
        Arc::clone(&source),
        beside.metrics,
        beside.tasks.stop_token(),
    ));
    if let Some(retention) = beside.retention {
        beside.tasks.spawn(crate::operator::run_logical_retention(
            postgres.pool().clone(),
            Arc::clone(store) as Arc<dyn OperatorStore>,
            source.slot().clone(),
            retention,
            beside.tasks.stop_token(),
        ));
    }
    let relay = relay
        .with_event_source(Arc::clone(&source) as Arc<dyn EventSource>)
        .with_lease_store(source as Arc<dyn LeaseStore>);
    (relay, slot_watch)
}
