//! `outbox-relay run`: the relay, its HTTP endpoint, and the graceful stop
//! on SIGTERM or SIGINT.

use std::sync::Arc;

use outbox_relay::RelayMetrics;
use outbox_relay::batch::PublishHealth;
use outbox_relay::config::broker_url::BrokerUrl;
use outbox_relay::config::build_publisher;
use outbox_relay::config::database_url::DatabaseUrl;
use outbox_relay::config::open_store;
use outbox_relay::config::{RelayConfig, relay_settings};
use outbox_relay::error::Error;
use outbox_relay::event::Wakeup;
use outbox_relay::http::{HttpEndpoint, HttpState};
use outbox_relay::leases::LeaseStore;
use outbox_relay::operator::{BacklogSource, TableBacklog};
use outbox_relay::publish::Publisher;
use outbox_relay::source::logical;
use outbox_relay::source::logical::{LogicalSource, SlotName};
use outbox_relay::source::{EventSource, OutboxStore};
use outbox_relay::store::{Connections, OperatorStore, PostgresStore};
use outbox_relay::tasks::Tasks;
use outbox_relay::{Relay, RetentionSettings};

pub(super) async fn run(
    database_url: DatabaseUrl,
    broker_url: BrokerUrl,
    config: RelayConfig,
    slot: Option<SlotName>,
    skip_migrate: bool,
) -> Result<(), Error> {
    let mut signals = StopSignals::catch()?;
    let shutdown_timeout = config.shutdown_timeout;
    // Every task the relay spawns runs on `tasks` or a child of it.
    let tasks = Tasks::new();
    let started = tokio::select! {
        started = start(database_url, broker_url, config, slot, skip_migrate, &tasks) => Some(started),
        () = signals.recv() => None,
    };
    let result = match started {
        None => {
            tracing::info!("stopped while starting; nothing was claimed");
            Ok(())
        }
        Some(Err(error)) => Err(error),
        Some(Ok(running)) => {
            supervise(
                running.relay_task,
                &mut signals,
                running.relay,
                running.http,
                slot_failure(running.slot_watch),
                shutdown_timeout,
            )
            .await
        }
    };
    end_every_task(&tasks).await;
    result
}

/// Stop every task still running and wait for it, at most
/// [`TASKS_STOP_TIMEOUT`] (a relay whose graceful stop timed out may still
/// hold one).
async fn end_every_task(tasks: &Tasks) {
    tasks.cancel();
    match tokio::time::timeout(TASKS_STOP_TIMEOUT, tasks.wait()).await {
        Ok(()) => tracing::debug!("every task ended"),
        Err(_) => tracing::warn!(
            tasks_left = tasks.len(),
            "tasks still running after the stop; they end with the process"
        ),
    }
}

/// A started relay: its batch loop's task and the tasks that stop it, the
/// HTTP endpoint's task and its tasks, and the slot's watch (logical
/// source).
struct Running {
    relay_task: tokio::task::JoinHandle<Result<outbox_relay::DispatchTotals, Error>>,
    relay: Tasks,
    http: (tokio::task::JoinHandle<()>, Tasks),
    slot_watch: Option<tokio::task::JoinHandle<Result<(), Error>>>,
}

/// Everything before the relay runs: bind the endpoint, open the source,
/// the publisher and the store, and spawn the batch loop.
async fn start(
    database_url: DatabaseUrl,
    broker_url: BrokerUrl,
    config: RelayConfig,
    slot: Option<SlotName>,
    skip_migrate: bool,
    tasks: &Tasks,
) -> Result<Running, Error> {
    let relay_id = config.instance_id.clone().unwrap_or_else(default_relay_id);
    // Bind first: a taken port is a configuration error, reported before
    // anything connects or is claimed.
    let endpoint = HttpEndpoint::bind(config.http.listen).await?;
    // The publisher connects in the background while the database is
    // opened and checked: start-up takes the longer of the two, not their
    // sum. A database that cannot stream is refused before anything is
    // read.
    let publisher: Arc<dyn Publisher> = build_publisher(&broker_url, &config, tasks).await?;
    let logical = match &slot {
        Some(slot) => Some(open_logical_source(&database_url, slot, skip_migrate, &config).await?),
        None => None,
    };
    let store = match &logical {
        Some((postgres, _)) => Arc::clone(postgres) as Arc<dyn OutboxStore>,
        None => open_polling_store(&database_url, skip_migrate).await?,
    };
    // On the logical source, streamed and published rows stay `pending`:
    // its gauges count only what it has not published.
    let backlog: Arc<dyn BacklogSource> = match &logical {
        Some((_, source)) => Arc::clone(source) as Arc<dyn BacklogSource>,
        None => Arc::new(TableBacklog(Arc::clone(&store))),
    };
    let metrics = Arc::new(RelayMetrics::new());
    let health = Arc::new(PublishHealth::new(config.effective_handover_after()));
    // The endpoint stops after the relay: `/metrics` and `/readyz` answer
    // while the batch in flight finishes.
    let http_tasks = tasks.child();
    let http_task = endpoint.serve(
        HttpState {
            store: Arc::clone(&store),
            backlog,
            publisher: Arc::clone(&publisher),
            metrics: Arc::clone(&metrics),
            health: Arc::clone(&health),
        },
        &http_tasks,
    );
    tracing::info!(
        relay_id = %relay_id,
        database = %database_url,
        broker = %broker_url,
        "outbox relay ready"
    );

    let relay_tasks = tasks.child();
    let wakeup = Wakeup::new();
    let mut settings = relay_settings(relay_id, &config);
    // Under the logical source, published events stay `pending`: its own
    // retention deletes them once the slot has confirmed them.
    let logical_retention = match &logical {
        Some(_) => settings.retention.take(),
        None => None,
    };
    let relay = Relay::new(Arc::clone(&store), publisher, settings)
        .with_wakeup(wakeup.clone())
        .with_metrics(Arc::clone(&metrics))
        .with_publish_health(health)
        .with_tasks(relay_tasks.clone());
    let (relay, slot_watch) = match logical {
        Some(logical) => {
            let beside = StreamTasks {
                metrics,
                retention: logical_retention,
                tasks: http_tasks.child(),
            };
            let (relay, slot_watch) =
                attach_logical_source(relay, logical, &store, beside, wakeup, &relay_tasks);
            (relay, Some(slot_watch))
        }
        None => {
            store.watch_commits(wakeup, &relay_tasks);
            (relay, None)
        }
    };
    let relay_task = relay_tasks.spawn(relay.run(relay_tasks.stop_token()));
    Ok(Running {
        relay_task,
        relay: relay_tasks,
        http: (http_task, http_tasks),
        slot_watch,
    })
}

/// The error that ends the relay from beside it: the slot's watch reports
/// a slot the server invalidated. Never resolves otherwise.
async fn slot_failure(watch: Option<tokio::task::JoinHandle<Result<(), Error>>>) -> Error {
    if let Some(watch) = watch {
        match watch.await {
            Ok(Err(error)) => return error,
            Ok(Ok(())) => {}
            Err(join_error) => tracing::error!(%join_error, "the slot's watch failed"),
        }
    }
    std::future::pending().await
}

/// The store of the polling source, migrated unless `skip_migrate`.
async fn open_polling_store(
    database_url: &DatabaseUrl,
    skip_migrate: bool,
) -> Result<Arc<dyn OutboxStore>, Error> {
    let store = open_store(database_url, Connections::KeptOpen).await?;
    if !skip_migrate {
        store.migrate().await?;
    }
    Ok(store)
}

/// What runs beside a relay on the logical source: the slot's report to
/// `/metrics` and, when retention is on, its own retention; both run on
/// `tasks` and end with them.
struct StreamTasks {
    metrics: Arc<RelayMetrics>,
    retention: Option<RetentionSettings>,
    tasks: Tasks,
}

/// Put the logical source behind `relay`: it supplies the events and the
/// stream's lease, watches commits, and its slot report and retention run
/// beside it. Returns the relay and the slot report's task, which ends
/// with an error when the server invalidates the slot.
fn attach_logical_source(
    relay: Relay,
    (postgres, source): (Arc<PostgresStore>, Arc<LogicalSource>),
    store: &Arc<dyn OutboxStore>,
    beside: StreamTasks,
    wakeup: Wakeup,
    relay_tasks: &Tasks,
) -> (Relay, tokio::task::JoinHandle<Result<(), Error>>) {
    source.watch_commits(wakeup, relay_tasks);
    let slot_watch = beside.tasks.spawn(outbox_relay::operator::report_slot(
        postgres.pool().clone(),
        source.slot().clone(),
        Arc::clone(&source),
        beside.metrics,
        beside.tasks.stop_token(),
    ));
    if let Some(retention) = beside.retention {
        beside
            .tasks
            .spawn(outbox_relay::operator::run_logical_retention(
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

/// Wait for a stop signal (or the relay ending on its own, which it does
/// only when it cannot start, or `failure` from beside it), then stop the
/// relay within `shutdown_timeout` and the HTTP endpoint after it. After a
/// `failure` the relay ends with that error.
async fn supervise(
    mut relay_task: tokio::task::JoinHandle<Result<outbox_relay::DispatchTotals, Error>>,
    signals: &mut StopSignals,
    relay: Tasks,
    (http_task, http): (tokio::task::JoinHandle<()>, Tasks),
    failure: impl std::future::Future<Output = Error>,
    shutdown_timeout: std::time::Duration,
) -> Result<(), Error> {
    let mut failed = None;
    tokio::select! {
        () = signals.recv() => {}
        error = failure => failed = Some(error),
        ended = &mut relay_task => {
            http.cancel();
            stop_http_endpoint(http_task).await;
            return match ended {
                Ok(result) => result.map(|_| ()),
                Err(join_error) => Err(Error::Shutdown(format!("the relay task failed: {join_error}"))),
            };
        }
    }
    tracing::info!("stop requested; finishing the batch in flight");
    relay.cancel();
    let stopped = tokio::time::timeout(shutdown_timeout, relay_task).await;
    http.cancel();
    stop_http_endpoint(http_task).await;
    if let Some(error) = failed {
        return Err(error);
    }
    match stopped {
        Ok(Ok(result)) => result.map(|_| ()),
        Ok(Err(join_error)) => Err(Error::Shutdown(format!(
            "the relay task failed: {join_error}"
        ))),
        Err(_) => {
            tracing::warn!(
                timeout_ms = shutdown_timeout.as_millis() as u64,
                "graceful stop timed out; leases expire on their own"
            );
            Err(Error::Shutdown(format!(
                "graceful stop did not finish within {} ms",
                shutdown_timeout.as_millis()
            )))
        }
    }
}

/// Check that the database can stream from `slot`, migrate it (unless
/// `skip_migrate`), and create the slot and its publication when missing.
/// The stream's buffer holds `max_batch_bytes` of payloads.
async fn open_logical_source(
    database_url: &DatabaseUrl,
    slot: &SlotName,
    skip_migrate: bool,
    config: &RelayConfig,
) -> Result<(Arc<PostgresStore>, Arc<LogicalSource>), Error> {
    let postgres =
        Arc::new(PostgresStore::connect_with(database_url.as_str(), Connections::KeptOpen).await?);
    logical::check_prerequisites(postgres.pool(), slot).await?;
    if !skip_migrate {
        postgres.migrate().await?;
    }
    logical::prepare(postgres.pool(), slot).await?;
    let source = LogicalSource::new(Arc::clone(&postgres), database_url.as_str(), slot.clone())?
        .with_buffer_bytes(usize::try_from(config.max_batch_bytes).unwrap_or(usize::MAX));
    tracing::info!(slot = %slot, "events come from the replication slot");
    Ok((postgres, Arc::new(source)))
}

/// Wait briefly for the HTTP endpoint to close its connections, then drop
/// whatever a scraper still holds open.
async fn stop_http_endpoint(task: tokio::task::JoinHandle<()>) {
    let abort = task.abort_handle();
    match tokio::time::timeout(HTTP_STOP_TIMEOUT, task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "the http endpoint task failed"),
        Err(_) => abort.abort(),
    }
}

/// How long a stop waits for the HTTP endpoint's open connections.
const HTTP_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the tasks still running after the relay and its endpoint
/// stopped may take to end.
const TASKS_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `host-pid-random`: unique per process, readable in `outbox_partitions`.
fn default_relay_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "relay".to_owned());
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    format!(
        "{host}-{}-{}",
        std::process::id(),
        &suffix[suffix.len() - 6..]
    )
}

/// SIGTERM and SIGINT, caught from the moment the relay starts: one that
/// arrives while it connects and migrates waits for [`StopSignals::recv`],
/// so the relay then stops as it does in service and exits 0, instead of
/// being killed by the signal's default action.
struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn catch() -> Result<Self, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Wait for SIGTERM or SIGINT, also one caught before this call.
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => tracing::info!(signal = "SIGTERM", "signal received"),
            _ = self.interrupt.recv() => tracing::info!(signal = "SIGINT", "signal received"),
        }
    }
}
