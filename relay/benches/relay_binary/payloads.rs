//! The `payloads` case: per broker and payload size (1 KB, 64 KB and
//! 900 KB by default), the raw client's rate, then a backlog written by
//! plain SQL (10 events per transaction over 10 aggregates, never
//! analyzed) drained by the release binary polling and reading the WAL
//! (the slot made before the backlog), each with the relay's rate, its
//! peak resident size (`VmHWM`, read before it stops), whether it logged an
//! `ERROR`, and a consumer's check that every event arrived once and each
//! aggregate's in order.
//!
//! The consumer reads after the drain, as nothing consumed during the raw
//! client's run either: the broker does the same work in both. With
//! `--profile`, `pg_stat_activity` is read during each drain, for the time
//! the relay's sessions spend fetching and marking.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::activity::Profile;
use crate::broker::{Broker, Target};
use crate::database::BenchDatabase;
use crate::deliveries::{self, DeliveryCheck};
use crate::drain::start_profiler;
use crate::keys::KeyDistribution;
use crate::relay::RunningRelay;
use crate::sampler::{Watched, sample_until};
use crate::source::SourceKind;
use crate::support::consumers::Deliveries;
use crate::support::cpu::CpuSpent;
use crate::writers::write_payload_backlog;
use crate::{DRAIN_LIMIT, Settings, raw_records};

/// Aggregates of the backlog, each written in turn.
const AGGREGATES: u64 = 10;
/// Between two readings of the relay's `/metrics`: finer than the other
/// drains', since a backlog of 1 KB payloads takes a few seconds.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// Connections of the bench's own pool: it writes with one.
const CONNECTIONS: u32 = 2;
/// Longest wait for the consumer to read every event.
const CONSUME_LIMIT: Duration = Duration::from_secs(600);
/// How long the consumer must go without a delivery, once it has as many
/// as were written, before its deliveries count as complete: a duplicate
/// may come after the last new event.
const QUIET: Duration = Duration::from_secs(3);
/// The rate is measured between these shares of the events.
const MEASURED_FROM: f64 = 0.1;
const MEASURED_TO: f64 = 0.9;

/// One payload size of the case and the events of its backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PayloadSize {
    /// About this many bytes of JSON per payload.
    pub(crate) bytes: usize,
    pub(crate) events: u64,
}

impl PayloadSize {
    /// `BYTES:EVENTS`, as `--payloads` lists them.
    pub(crate) fn parse(text: &str) -> PayloadSize {
        let parsed = text.split_once(':').and_then(|(bytes, events)| {
            Some(PayloadSize {
                bytes: bytes.trim().parse().ok()?,
                events: events.trim().parse().ok()?,
            })
        });
        match parsed {
            Some(size) if size.bytes > 0 && size.events > 0 => size,
            _ => panic!("--payloads takes BYTES:EVENTS pairs, e.g. 900000:1500, not {text:?}"),
        }
    }

    /// `1 KB`, `64 KB`, `900 KB`, `1.5 MB`.
    pub(crate) fn label(&self) -> String {
        if self.bytes >= 1_000_000 {
            format!("{} MB", self.bytes as f64 / 1e6)
        } else if self.bytes >= 1_000 {
            format!("{} KB", self.bytes as f64 / 1e3)
        } else {
            format!("{} B", self.bytes)
        }
    }

    /// The backlog's payload bytes, in MB.
    pub(crate) fn megabytes(&self) -> f64 {
        self.bytes as f64 * self.events as f64 / 1e6
    }
}

/// What one drain of the case measured.
pub(crate) struct PayloadFigures {
    pub(crate) broker: Broker,
    pub(crate) size: PayloadSize,
    pub(crate) source: SourceKind,
    /// The raw client's messages/s, same broker and size, same run.
    pub(crate) raw_rate: f64,
    /// Events/s between 10% and 90% of the backlog.
    pub(crate) rate: f64,
    /// From the relay's start to its last event.
    pub(crate) drained_in: Duration,
    pub(crate) backlog_written_in: Duration,
    /// `VmHWM` once every event was published.
    pub(crate) peak_rss_kib: u64,
    /// CPU between the 10% and 90% readings, and the events between them.
    pub(crate) cpu: CpuSpent,
    pub(crate) cpu_events: u64,
    /// Batches published, and the seconds spent publishing them
    /// (`outbox_relay_batch_publish_seconds`).
    pub(crate) batches: f64,
    pub(crate) batch_publish_seconds: f64,
    /// The relay's sessions, with `--profile`.
    pub(crate) profile: Option<Profile>,
    pub(crate) deliveries: DeliveryCheck,
    /// The `ERROR` lines of the relay's log.
    pub(crate) errors: Vec<String>,
}

impl PayloadFigures {
    pub(crate) fn ratio(&self) -> f64 {
        self.rate / self.raw_rate
    }

    pub(crate) fn peak_rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }

    /// What went wrong, against a peak of `max_rss_mib`.
    pub(crate) fn failures(&self, max_rss_mib: u64) -> Vec<String> {
        let name = format!(
            "{}, {} payloads, {}",
            self.broker.path(),
            self.size.label(),
            self.source.label()
        );
        let mut failures = Vec::new();
        if self.peak_rss_kib > max_rss_mib * 1024 {
            failures.push(format!(
                "{name}: the relay's peak RSS was {:.0} MiB, above {max_rss_mib} MiB",
                self.peak_rss_mib()
            ));
        }
        if !self.deliveries.passed() {
            failures.push(format!("{name}: {}", self.deliveries.describe()));
        }
        if let Some(first) = self.errors.first() {
            failures.push(format!(
                "{name}: the relay logged {} ERROR lines, the first: {first}",
                self.errors.len()
            ));
        }
        failures
    }
}

/// Every size of `settings.payloads` on `broker`: the raw client, then the
/// relay polling and reading the WAL.
pub(crate) async fn payload_sizes(settings: &Settings, broker: Broker) -> Vec<PayloadFigures> {
    let distribution = KeyDistribution::Uniform {
        aggregates: AGGREGATES,
    };
    let mut results = Vec::new();
    for &size in &settings.payloads {
        let records = raw_records(distribution, size.events, size.bytes);
        let raw = broker.raw(settings, &records).await;
        drop(records);
        println!(
            "  {} payloads, raw client: {:.0} msg/s over {} messages; {}",
            size.label(),
            raw.rate,
            raw.acknowledged,
            raw.cpu.per_event_named(raw.acknowledged, "client")
        );
        for source in [SourceKind::Poll, SourceKind::Logical] {
            let figures = drain_payloads(settings, broker, size, source, raw.rate).await;
            print_payload_drain(&figures);
            results.push(figures);
        }
    }
    results
}

/// One backlog of `size` on a fresh database and target, drained by the
/// relay reading it from `source`, then checked with a consumer.
async fn drain_payloads(
    settings: &Settings,
    broker: Broker,
    size: PayloadSize,
    source: SourceKind,
    raw_rate: f64,
) -> PayloadFigures {
    let database = BenchDatabase::create(CONNECTIONS, source).await;
    let target = broker.target(settings, "payloads").await;
    let backlog_written_in = write_payload_backlog(
        &database.pool,
        target.name(),
        size.events,
        size.bytes,
        AGGREGATES,
    )
    .await;

    let profile_stop = CancellationToken::new();
    let profiler = settings
        .profile
        .then(|| start_profiler(&database.url, &profile_stop));
    let started = Instant::now();
    let relay = RunningRelay::start(&database, &broker.url(settings), &settings.log_filter).await;
    let watched = Watched {
        relay: &relay,
        database: &database.name,
        broker_processes: broker.processes(),
    };
    let series = sample_until(watched, started, SAMPLE_INTERVAL, DRAIN_LIMIT, |_| {
        size.events
    })
    .await;
    let peak_rss_kib = relay.peak_rss_kib();
    profile_stop.cancel();
    let profile = match profiler {
        Some(task) => Some(task.await.expect("pg_stat_activity reader")),
        None => None,
    };
    let last = series
        .readings
        .last()
        .map(|reading| reading.scrape)
        .unwrap_or_default();
    let log = relay.stop();
    let errors = log
        .lines()
        .filter(|line| line.contains("ERROR"))
        .map(str::to_owned)
        .collect();

    let total = size.events;
    let drained_in = series
        .crossing(total as f64)
        .map_or(Duration::ZERO, |at| at - started);
    let (cpu, cpu_events) = series.cpu_between(total, MEASURED_FROM, MEASURED_TO);
    let written = database.written().await;
    let delivered = consume(settings, broker, &target, written.len()).await;
    let deliveries = deliveries::check(&written, &delivered);
    target.remove().await;
    database.drop_database().await;
    PayloadFigures {
        broker,
        size,
        source,
        raw_rate,
        rate: series.rate_between(total, MEASURED_FROM, MEASURED_TO),
        drained_in,
        backlog_written_in,
        peak_rss_kib,
        cpu,
        cpu_events,
        batches: last.batches,
        batch_publish_seconds: last.batch_publish_seconds,
        profile,
        deliveries,
        errors,
    }
}

/// Every delivery of `target`: until the consumer has `expected` of them
/// and none came for [`QUIET`], or [`CONSUME_LIMIT`] passed.
async fn consume(
    settings: &Settings,
    broker: Broker,
    target: &Target,
    expected: usize,
) -> Vec<String> {
    let (deliveries, task) = broker.deliveries(settings, target).await;
    let started = Instant::now();
    let mut count = 0;
    let mut last_change = Instant::now();
    loop {
        let now = count_of(&deliveries);
        if now != count {
            count = now;
            last_change = Instant::now();
        }
        let quiet = count >= expected && last_change.elapsed() >= QUIET;
        if quiet || started.elapsed() >= CONSUME_LIMIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    task.abort();
    let _ = task.await;
    std::mem::take(&mut *deliveries.lock().expect("the deliveries' lock"))
}

fn count_of(deliveries: &Deliveries) -> usize {
    deliveries.lock().expect("the deliveries' lock").len()
}

/// The line a drain prints as it finishes.
fn print_payload_drain(figures: &PayloadFigures) {
    println!(
        "  {} payloads, {}: {} events ({:.0} MB) written in {:.1} s, drained in {:.1} s; {:.0} events/s (10%→90%), {:.2} × raw; peak RSS {:.0} MiB; {}; {} ERROR lines",
        figures.size.label(),
        figures.source.label(),
        figures.size.events,
        figures.size.megabytes(),
        figures.backlog_written_in.as_secs_f64(),
        figures.drained_in.as_secs_f64(),
        figures.rate,
        figures.ratio(),
        figures.peak_rss_mib(),
        figures.deliveries.describe(),
        figures.errors.len()
    );
    println!(
        "    {}",
        figures.cpu.per_event_named(figures.cpu_events, "relay")
    );
    println!(
        "    {} batches, batch publish mean {:.1} ms, {:.1} s publishing in all (outbox_relay_batch_publish_seconds)",
        figures.batches,
        figures.batch_publish_seconds * 1e3 / figures.batches.max(1.0),
        figures.batch_publish_seconds
    );
    if let Some(profile) = &figures.profile {
        println!("{}", profile.describe(figures.size.events));
    }
}
