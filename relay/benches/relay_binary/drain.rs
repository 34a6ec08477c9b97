//! One drain case: a fresh database, a backlog written by plain `INSERT`s,
//! then the relay binary started and its `/metrics` read until every event
//! is published, optionally while steady producers keep writing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::activity::{self, Profile};
use crate::broker::Broker;
use crate::database::{BenchDatabase, Statistics};
use crate::history::write_history;
use crate::keys::KeyDistribution;
use crate::relay::RunningRelay;
use crate::sampler::{Watched, sample_until};
use crate::source::SourceKind;
use crate::support::cpu::CpuSpent;
use crate::writers::{Pace, Produced, write_backlog, write_steadily};
use crate::{DRAIN_LIMIT, Settings, WRITERS};

/// The share of the events between which the rate and CPU are measured:
/// the relay's start-up and the last batch stay out.
const MEASURED_FROM: f64 = 0.1;
const MEASURED_TO: f64 = 0.9;

/// Milliseconds between two readings of `pg_stat_activity`.
const PROFILE_INTERVAL: Duration = Duration::from_millis(2);

/// What a drain case does.
#[derive(Clone)]
pub(crate) struct DrainSpec {
    pub(crate) label: String,
    pub(crate) distribution: KeyDistribution,
    /// `ANALYZE` after the backlog is written.
    pub(crate) analyze: bool,
    /// Steady producers at this rate while the relay drains.
    pub(crate) steady_rate: Option<u64>,
    /// Published events written (with `generate_series`) before the backlog.
    pub(crate) history_rows: u64,
    /// Read `pg_stat_activity` during the drain.
    pub(crate) profile: bool,
    /// How the relay reads the outbox.
    pub(crate) source: SourceKind,
    /// TOML of the relay's configuration for this case ("" for the
    /// defaults).
    pub(crate) relay_config: &'static str,
}

/// What a drain case measured.
pub(crate) struct DrainFigures {
    pub(crate) spec: DrainSpec,
    /// Events published in all: the backlog and what producers added.
    pub(crate) published: u64,
    /// Events/s between 10% and 90% of them.
    pub(crate) rate: f64,
    /// Events/s from the first published event to the last.
    pub(crate) whole_rate: f64,
    pub(crate) first_publish: Duration,
    pub(crate) backlog_written_in: Duration,
    pub(crate) statistics: Statistics,
    /// CPU between the 10% and 90% readings, and the events published there.
    pub(crate) cpu: CpuSpent,
    pub(crate) cpu_events: u64,
    /// Mean `outbox_relay_batch_publish_seconds`, and batches.
    pub(crate) batch_publish_ms: f64,
    pub(crate) batches: f64,
    /// Events/s the steady producers committed.
    pub(crate) producer_rate: Option<f64>,
    pub(crate) profile: Option<Profile>,
    /// Rows of `outbox_events` the relay updated or deleted, per published
    /// event.
    pub(crate) rows_written_per_event: f64,
}

pub(crate) async fn drain(settings: &Settings, broker: Broker, spec: DrainSpec) -> DrainFigures {
    let database = BenchDatabase::create(WRITERS as u32 + 2, spec.source).await;
    let target = broker.target(settings, "drain").await;
    let (backlog_written_in, statistics) =
        write_events(settings, &database, target.name(), &spec).await;
    let rows_changed_before = database.rows_changed().await;

    let profile_stop = CancellationToken::new();
    let profiler = spec
        .profile
        .then(|| start_profiler(&database.url, &profile_stop));
    let started = Instant::now();
    let relay = RunningRelay::start_with(
        &database,
        &broker.url(settings),
        &settings.log_filter,
        spec.relay_config,
    )
    .await;

    let written = Arc::new(AtomicU64::new(0));
    let writers_stop = CancellationToken::new();
    let producers = spec.steady_rate.map(|rate| {
        start_producers(
            settings,
            &database,
            target.name(),
            &spec,
            rate,
            Arc::clone(&written),
            writers_stop.clone(),
        )
    });
    // Producers write while the relay drains the backlog; then the relay
    // catches up with what they wrote.
    let backlog = settings.events;
    let watched = Watched {
        relay: &relay,
        database: &database.name,
        broker_processes: broker.processes(),
    };
    let series = sample_until(
        watched,
        started,
        settings.sample_interval,
        DRAIN_LIMIT,
        |published| {
            if producers.is_none() {
                return backlog;
            }
            if published >= backlog {
                writers_stop.cancel();
            }
            if writers_stop.is_cancelled() {
                backlog + written.load(Ordering::Relaxed)
            } else {
                u64::MAX
            }
        },
    )
    .await;
    let producer_rate = match producers {
        Some(task) => Some(task.await.expect("producers").rate),
        None => None,
    };
    let total = backlog + written.load(Ordering::Relaxed);
    let last = relay.wait_published(total, settings.sample_interval).await;
    profile_stop.cancel();
    let profile = match profiler {
        Some(task) => Some(task.await.expect("pg_stat_activity reader")),
        None => None,
    };
    let first_publish = series.first_publish();
    let rate = series.rate_between(total, MEASURED_FROM, MEASURED_TO);
    let whole_rate = series.whole_rate(total);
    let (cpu, cpu_events) = series.cpu_between(total, MEASURED_FROM, MEASURED_TO);
    if settings.log_filter != "info" {
        println!("    relay log: {}", relay.log_path().display());
    }
    relay.stop();
    // The relay's sessions have ended, so their row counts have arrived.
    let rows_written = database.rows_changed().await - rows_changed_before;
    let published = match spec.source {
        SourceKind::Poll => database.settled(total + spec.history_rows).await - spec.history_rows,
        // The logical source writes no state: its counter is the figure.
        SourceKind::Logical | SourceKind::LogicalBacklog => last.published as u64,
    };
    assert_eq!(published, total, "published events after the drain");
    target.remove().await;
    database.drop_database().await;
    DrainFigures {
        spec,
        published,
        rate,
        whole_rate,
        first_publish,
        backlog_written_in,
        statistics,
        cpu,
        cpu_events,
        batch_publish_ms: last.batch_publish_seconds * 1e3 / last.batches.max(1.0),
        batches: last.batches,
        producer_rate,
        profile,
        rows_written_per_event: rows_written as f64 / published.max(1) as f64,
    }
}

/// Read `pg_stat_activity` of the database at `url` until `stop`.
pub(crate) fn start_profiler(
    url: &str,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<Profile> {
    tokio::spawn(activity::profile(
        url.to_owned(),
        PROFILE_INTERVAL,
        stop.clone(),
    ))
}

/// The case's events before the relay starts: the published history, if
/// any, then the backlog, then `ANALYZE` if the case asks for it. Returns
/// how long the backlog took and what the planner then knows.
async fn write_events(
    settings: &Settings,
    database: &BenchDatabase,
    topic: &str,
    spec: &DrainSpec,
) -> (Duration, Statistics) {
    if spec.history_rows > 0 {
        write_history(database, topic, spec.history_rows, settings.payload_bytes).await;
    }
    let backlog_written_in = write_backlog(
        &database.pool,
        topic,
        spec.distribution,
        settings.events,
        settings.payload_bytes,
    )
    .await;
    if spec.analyze {
        database.analyze().await;
    }
    (backlog_written_in, database.statistics().await)
}

/// Steady producers at `rate` until `stop`, counting into `written`.
fn start_producers(
    settings: &Settings,
    database: &BenchDatabase,
    topic: &str,
    spec: &DrainSpec,
    rate: u64,
    written: Arc<AtomicU64>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Produced> {
    let pool = database.pool.clone();
    let topic = topic.to_owned();
    let pace = Pace {
        writers: WRITERS,
        rate,
        limit: u64::MAX,
        distribution: spec.distribution,
        payload_bytes: settings.payload_bytes,
    };
    tokio::spawn(async move {
        write_steadily(&pool, &topic, pace, stop, move |_| {
            written.fetch_add(1, Ordering::Relaxed);
            async {}
        })
        .await
    })
}

/// The lines a drain prints as it finishes.
pub(crate) fn print_drain(figures: &DrainFigures) {
    let stats = figures.statistics;
    println!(
        "  {}: {:.0} events/s (10%→90%), {:.0} events/s first→last event; {} events; first event published {:.0} ms after the relay started; backlog written in {:.1} s; table reltuples {} ({})",
        figures.spec.label,
        figures.rate,
        figures.whole_rate,
        figures.published,
        figures.first_publish.as_secs_f64() * 1e3,
        figures.backlog_written_in.as_secs_f64(),
        stats.reltuples,
        if stats.analyzed {
            "analyzed"
        } else {
            "never analyzed"
        }
    );
    if let Some(rate) = figures.producer_rate {
        println!("    steady producers committed {rate:.0} events/s");
    }
    println!(
        "    {} batches, batch publish mean {:.1} ms (outbox_relay_batch_publish_seconds); {:.2} outbox rows written by the relay per event",
        figures.batches, figures.batch_publish_ms, figures.rows_written_per_event
    );
    println!(
        "    {}",
        figures.cpu.per_event_named(figures.cpu_events, "relay")
    );
    if let Some(profile) = &figures.profile {
        println!("{}", profile.describe(figures.published));
    }
}
