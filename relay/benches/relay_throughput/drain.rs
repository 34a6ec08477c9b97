//! The relay's drain of pre-enqueued events, and the read-only ceiling.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use outbox_relay::RelayConfig;
use outbox_relay::config::relay_settings;
use outbox_relay::event::Wakeup;
use outbox_relay::publish::Publisher;
use outbox_relay::relay::Relay;
use outbox_relay::source::{EventSource, OutboxStore};
use outbox_relay::store::{OperatorStore, PostgresStore, ReplayWindow};
use tokio_util::sync::CancellationToken;

use crate::events::enqueue_all;
use crate::scenarios::print_drain;
use crate::support::cpu;
use crate::support::events::unique_name;
use crate::targets::{create_database, warm_up};
use crate::timed::{Phases, TimedPublisher, TimedStore};
use crate::{DRAIN_TIMEOUT, Settings};

pub(crate) struct DrainResult {
    pub(crate) batch_size: u32,
    pub(crate) events: u64,
    pub(crate) rate: f64,
    pub(crate) elapsed: Duration,
    pub(crate) startup: Duration,
    pub(crate) enqueue: Duration,
    pub(crate) phases: String,
    pub(crate) cpu: cpu::CpuSpent,
}

/// Enqueue every event first, then start the relay in-process and time it
/// until the last event is marked published.
pub(crate) async fn relay_drain(
    settings: &Settings,
    publisher: Arc<dyn Publisher>,
    target: &str,
    batch_size: u32,
    broker_processes: &[&str],
) -> DrainResult {
    let database = create_database().await;
    let enqueue = enqueue_all(settings, &database.pool, target).await;
    warm_up(publisher.as_ref(), settings, target).await;

    let opened = Arc::new(
        PostgresStore::connect_with(&database.url, outbox_relay::store::Connections::KeptOpen)
            .await
            .expect("open store"),
    );
    let phases = Phases::new(settings.events);
    let store: Arc<dyn OutboxStore> = Arc::new(TimedStore {
        inner: opened.clone() as Arc<dyn OutboxStore>,
        phases: Arc::clone(&phases),
    });
    let timed: Arc<dyn Publisher> = Arc::new(TimedPublisher {
        inner: publisher,
        phases: Arc::clone(&phases),
        acks: None,
        failures: AtomicU64::new(0),
    });
    let mut config = RelayConfig::default();
    config.batch_size = Some(batch_size);
    let stop = CancellationToken::new();
    let wakeup = Wakeup::new();
    opened.watch_commits(
        wakeup.clone(),
        &outbox_relay::tasks::Tasks::stopped_by(stop.clone()),
    );
    let relay =
        Relay::new(store, timed, relay_settings(unique_name("relay"), &config)).with_wakeup(wakeup);

    let cpu_before = cpu::sample(std::process::id(), broker_processes);
    let started = Instant::now();
    let task = tokio::spawn(relay.run(stop.clone()));
    let finished = phases.wait_reached(DRAIN_TIMEOUT).await.unwrap_or_else(|| {
        panic!(
            "drain timed out: {} of {} marked",
            phases.mark_rows.load(Ordering::Relaxed),
            settings.events
        )
    });
    let cpu = cpu_before.until(&cpu::sample(std::process::id(), broker_processes));
    stop.cancel();
    let totals = task.await.expect("relay task").expect("relay run");
    let elapsed = finished - started;
    let startup = phases
        .first_fetch
        .lock()
        .unwrap()
        .map_or(Duration::ZERO, |at| at - started);
    let published = database.published().await;
    assert_eq!(
        published as u64, settings.events,
        "published rows after the drain (relay totals {totals:?})"
    );
    let report = phases.report(elapsed);
    opened.pool().close().await;
    drop(opened);
    database.drop_database().await;
    DrainResult {
        batch_size,
        events: settings.events,
        rate: settings.events as f64 / elapsed.as_secs_f64(),
        elapsed,
        startup,
        enqueue,
        phases: report,
        cpu,
    }
}

/// The upper bound of any relay that reads its events from PostgreSQL: the
/// same events, already published, read once each in id order, a page at a
/// time (`fetch_published`, the replay's read) with the next page fetched
/// while the current one publishes, and each page published whole. Nothing
/// is written to the database and no per-aggregate waves are formed, so a
/// relay can only be slower.
pub(crate) async fn read_only_ceiling(
    settings: &Settings,
    publisher: Arc<dyn Publisher>,
    target: &str,
    page_size: u32,
    broker_processes: &[&str],
) -> DrainResult {
    let database = create_database().await;
    let enqueue = enqueue_all(settings, &database.pool, target).await;
    for statement in [
        "UPDATE outbox_events SET state = 'published', published_at = now()",
        "VACUUM ANALYZE outbox_events",
    ] {
        sqlx::raw_sql(statement)
            .execute(&database.pool)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {error}"));
    }
    warm_up(publisher.as_ref(), settings, target).await;
    let opened = Arc::new(
        PostgresStore::connect_with(&database.url, outbox_relay::store::Connections::KeptOpen)
            .await
            .expect("open store"),
    );
    let store = Arc::clone(&opened);
    let now = chrono::Utc::now();
    let window = Arc::new(ReplayWindow {
        topic: target.to_owned(),
        since: now - chrono::Duration::days(1),
        until: now + chrono::Duration::days(1),
    });
    let fetch = |after_id: i64| {
        let store = Arc::clone(&store);
        let window = Arc::clone(&window);
        tokio::spawn(async move {
            let started = Instant::now();
            let page = store
                .fetch_published(&window, after_id, i64::from(page_size))
                .await
                .expect("fetch_published");
            (page, started.elapsed())
        })
    };

    let cpu_before = cpu::sample(std::process::id(), broker_processes);
    let started = Instant::now();
    let mut next = fetch(0);
    let (mut published, mut pages) = (0u64, 0u64);
    let (mut fetch_time, mut publish_time) = (Duration::ZERO, Duration::ZERO);
    loop {
        let (page, fetched_in) = next.await.expect("fetch task");
        fetch_time += fetched_in;
        let Some(last) = page.last() else { break };
        next = fetch(last.id);
        let publishing = Instant::now();
        for result in publisher.publish(&page).await {
            if let Err(failure) = result {
                panic!("read-only ceiling: publish failed: {failure}");
            }
            published += 1;
        }
        publish_time += publishing.elapsed();
        pages += 1;
    }
    let elapsed = started.elapsed();
    let cpu = cpu_before.until(&cpu::sample(std::process::id(), broker_processes));
    assert_eq!(published, settings.events, "read-only ceiling published");
    opened.pool().close().await;
    drop(opened);
    database.drop_database().await;
    DrainResult {
        batch_size: page_size,
        events: published,
        rate: published as f64 / elapsed.as_secs_f64(),
        elapsed,
        startup: Duration::ZERO,
        enqueue,
        phases: format!(
            "    {pages} pages: fetch_published {:.2} s (overlapped), publish {:.2} s",
            fetch_time.as_secs_f64(),
            publish_time.as_secs_f64()
        ),
        cpu,
    }
}

/// The two ways 100,000 pre-enqueued events are sent, run one after the
/// other for each batch size.
#[derive(Clone, Copy)]
pub(crate) enum DrainRun {
    /// The relay, in-process: [`relay_drain`].
    Relay,
    /// Read once and publish, no writes: [`read_only_ceiling`].
    ReadOnlyCeiling,
}

impl DrainRun {
    /// Prefix of the topic or exchange the run uses.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            DrainRun::Relay => "relay",
            DrainRun::ReadOnlyCeiling => "ceiling",
        }
    }

    pub(crate) async fn run(
        self,
        settings: &Settings,
        publisher: Arc<dyn Publisher>,
        target: &str,
        batch_size: u32,
        broker_processes: &[&str],
    ) -> DrainResult {
        match self {
            DrainRun::Relay => {
                relay_drain(settings, publisher, target, batch_size, broker_processes).await
            }
            DrainRun::ReadOnlyCeiling => {
                read_only_ceiling(settings, publisher, target, batch_size, broker_processes).await
            }
        }
    }

    /// Print `result` and keep it with the others of its kind.
    pub(crate) fn report(
        self,
        result: DrainResult,
        raw: f64,
        raw_publisher: f64,
        drains: &mut Vec<DrainResult>,
        ceilings: &mut Vec<DrainResult>,
    ) {
        match self {
            DrainRun::Relay => {
                print_drain(&result, raw, raw_publisher);
                drains.push(result);
            }
            DrainRun::ReadOnlyCeiling => {
                print_ceiling(&result, raw);
                ceilings.push(result);
            }
        }
    }
}

pub(crate) fn print_ceiling(ceiling: &DrainResult, raw: f64) {
    println!(
        "  read-only ceiling (read each event once, publish, no writes), page {}: {:.0} events/s ({} events in {:.2} s), ratio to raw client = {:.2}",
        ceiling.batch_size,
        ceiling.rate,
        ceiling.events,
        ceiling.elapsed.as_secs_f64(),
        ceiling.rate / raw
    );
    println!("    {}", ceiling.cpu.per_event(ceiling.events));
    println!("{}", ceiling.phases);
}
