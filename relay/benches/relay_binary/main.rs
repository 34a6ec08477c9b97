//! The relay as users run it: the release `outbox-relay` binary in a
//! process of its own, with its default configuration, draining backlogs
//! written by plain SQL `INSERT`s into never-analyzed tables, its rate read
//! from its own `/metrics`.
//!
//! ```sh
//! cargo bench -p outbox-relay --bench relay_binary
//! cargo bench -p outbox-relay --bench relay_binary -- --events 3000 --sizes 10000 --latency-secs 2
//! ```
//!
//! Cases (`--cases`, comma-separated; all by default), per broker:
//! - `uniform`: 100,000 events over 1,000 aggregates, drawn uniformly,
//!   written 500 `INSERT`s per transaction, never analyzed.
//! - `delete-mark`: `uniform` with `retention.published = "0s"`, whose mark
//!   deletes the acknowledged rows: its rate and PostgreSQL CPU per event
//!   against `uniform`'s, which updates them.
//! - `analyzed`: the same backlog after `ANALYZE`.
//! - `zipf`: Zipf (s = 1.1) over 10,000 aggregates; `five`: 5 aggregates;
//!   `one`: 1 aggregate.
//! - `steady`: the uniform backlog while 8 writers commit 5,000 events/s,
//!   one per transaction.
//! - `logical` and `logical-steady`: `uniform` and `steady` with the relay
//!   reading the WAL (`--source logical`), beside the polling ones.
//! - `logical-backlog`: `uniform` written before the slot exists, then the
//!   relay with `--source logical`, which creates the slot and publishes
//!   the backlog from the table (a switch from polling).
//! - `latency`: commit → consumer at `--latency-rates` (500,1000,5000),
//!   through the relay (polling, and reading the WAL) and through a direct
//!   producer; through the relay also commit → ack, from the relay's
//!   `outbox_relay_commit_to_ack_seconds` histogram over the measured
//!   window, its quantiles interpolated within a bucket as PromQL's
//!   `histogram_quantile` does.
//! - `history`: fetch and mark cost with `--sizes` published rows already in
//!   the table (10,000, 1,000,000 and 10,000,000), Kafka only.
//! - `payloads`: per size of `--payloads` (100,000 × 1 KB, 10,000 × 64 KB and
//!   1,500 × 900 KB), the raw client, then a backlog written by plain SQL
//!   (one multi-row `INSERT ... SELECT` per transaction of 10, over 10
//!   aggregates) drained polling and reading the WAL (the slot made before
//!   the backlog); the relay's rate against the raw client's, its peak
//!   resident size (`VmHWM`) and a consumer's check, after the drain, that
//!   every event arrived once and each aggregate's in order. The bench
//!   fails, after printing its summary, when a peak is above
//!   `--max-rss-mib`, an event is missing, duplicated or out of order, or
//!   the relay logged an `ERROR`.
//! - `outage`: the relay's CPU while the broker is away for `--outage-secs`
//!   (15): Kafka frozen (a tansu of the case's own, SIGSTOP), RabbitMQ
//!   stopped and frozen (through a proxy), with writers committing at each
//!   of `--outage-rates` (50,500 events/s) from before the relay starts. It
//!   fails, after printing, when the relay used more than
//!   `--max-outage-cores` (0.1) over an outage, counted from the moment the
//!   broker went away, or an event spent an attempt. Not on Redis or NATS
//!   yet (a line says so).
//! - `peers`: RabbitMQ only: the relay beside mq-bridge 1.2.0 (its Python
//!   package, set up in `target/bench-venv`), `--peer-pairs` (3) pairs
//!   alternating the two, each on a fresh database and durable queue with a
//!   backlog of `--peer-events` (10,000) over 100 aggregates in 10
//!   transactions: polling against its `sqlx` poll, then `--source logical`
//!   against its `postgres_cdc`; the time from each process's start until
//!   the queue holds every event, and the medians of the pairs' ratios
//!   against the targets (1.1 and 1.3).
//!
//! The raw clients (rdkafka idempotent with acks=all, lapin with publisher
//! confirms, redis-rs pipelining the relay's `XADD`s on one multiplexed
//! connection, 500 per pipeline and 3 pipelines unanswered, async-nats
//! publishing the relay's messages to JetStream with 1,500
//! acknowledgements outstanding) run first, on the same broker, for the
//! ratios.
//!
//! Settings, as `--name value` arguments: `--events` (100000),
//! `--cases`, `--brokers` (`kafka,rabbitmq,redis`; also `nats`), `--sizes`, `--latency-rates`,
//! `--latency-secs` (10), `--latency-held-acks-ms` (0: the relay's
//! RabbitMQ connection through a proxy that holds the broker's answers,
//! publisher confirms included, back for that long every 200 ms, as a
//! queue confirming on its disk syncs does), `--steady-rate` (5000),
//! `--payload-bytes` (300),
//! `--sample-ms` (500, between two readings of `/metrics`; each reading
//! counts the pending events in the database, which costs it CPU),
//! `--kafka-partitions` (4), `--relay-log` (the relay's `RUST_LOG`, `info`),
//! `--payloads` (`BYTES:EVENTS` pairs, `1000:100000,64000:10000,900000:1500`),
//! `--max-rss-mib` (256, the relay's peak in the `payloads` case),
//! `--profile` (read `pg_stat_activity` during every drain, not only the
//! history's; it costs the database some CPU).
//! The services come from `OUTBOX_TEST_POSTGRES_URL`,
//! `OUTBOX_TEST_KAFKA_BROKERS`, `OUTBOX_TEST_AMQP_URL`,
//! `OUTBOX_TEST_REDIS_URL` and `OUTBOX_TEST_NATS_URL`, as for the tests;
//! each case's Redis stream is deleted afterwards, and on NATS each case
//! creates a JetStream stream of its own (file storage, taking the one
//! subject of the case's topic) and deletes it afterwards; nothing else on
//! the servers is touched.
//!
//! The bench has no test harness: `cargo bench` passes `--bench`, and
//! without it (`cargo test -p outbox-relay --bench relay_binary`) only the
//! bench's own unit tests run.

mod activity;
mod broker;
mod consumer_process;
mod database;
mod deliveries;
mod drain;
mod held_acks;
mod histogram;
mod history;
mod keys;
mod latency;
mod mq_bridge;
mod outage;
mod payloads;
mod peers;
mod queue_fill;
mod relay;
mod report;
mod sampler;
mod slowest;
mod source;
mod sql;
#[path = "../support/mod.rs"]
mod support;
mod writers;

use std::time::Duration;

use crate::broker::Broker;
use crate::drain::{DrainSpec, drain, print_drain};
use crate::keys::{KeyDistribution, Keys};
use crate::latency::{Route, latency};
use crate::payloads::{PayloadSize, payload_sizes};
use crate::report::{BrokerResults, print_summary};
use crate::source::SourceKind;
use crate::support::consumers::percentiles;
use crate::support::events::payload;
use crate::support::raw::RawRecord;

/// Steady producers: concurrent writers, one connection each.
const WRITERS: u64 = 8;
/// Aggregates of the uniform distribution.
const UNIFORM_AGGREGATES: u64 = 1000;
/// Longest a drain may take.
const DRAIN_LIMIT: Duration = Duration::from_secs(1800);
/// Every case, in the order they run.
const CASES: &[&str] = &[
    "uniform",
    "delete-mark",
    "analyzed",
    "zipf",
    "five",
    "one",
    "steady",
    "logical",
    "logical-steady",
    "logical-backlog",
    "latency",
    "history",
    "payloads",
    "outage",
    "peers",
];

#[derive(Debug, Clone)]
struct Settings {
    events: u64,
    cases: Vec<String>,
    brokers: Vec<Broker>,
    sizes: Vec<u64>,
    latency_rates: Vec<u64>,
    latency_secs: u64,
    /// The latency case on RabbitMQ: how long the relay's confirms are
    /// held back, every [`held_acks::HELD_ACKS_PERIOD`] (zero: not at all).
    latency_held_acks: Duration,
    steady_rate: u64,
    payload_bytes: usize,
    sample_interval: Duration,
    kafka_partitions: i32,
    log_filter: String,
    /// Read `pg_stat_activity` during every drain, not only the history's.
    profile: bool,
    /// The `payloads` case's sizes and backlogs.
    payloads: Vec<PayloadSize>,
    /// The highest peak RSS of the relay the `payloads` case accepts.
    max_rss_mib: u64,
    /// The `outage` case: how long the broker stays away, the writers'
    /// rates, and the most CPU the relay may use meanwhile, in cores.
    outage: Duration,
    outage_rates: Vec<u64>,
    max_outage_cores: f64,
    kafka_brokers: String,
    amqp_url: String,
    redis_url: String,
    nats_url: String,
}

impl Settings {
    fn load() -> Settings {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let lookup = |flag: &str| -> Option<String> {
            args.iter()
                .position(|arg| arg == flag)
                .and_then(|index| args.get(index + 1).cloned())
        };
        let list = |flag: &str, default: &str| -> Vec<String> {
            lookup(flag)
                .unwrap_or_else(|| default.to_owned())
                .split(',')
                .map(|item| item.trim().replace('_', ""))
                .filter(|item| !item.is_empty())
                .collect()
        };
        let number = |text: &str| -> u64 {
            text.parse()
                .unwrap_or_else(|_| panic!("not a number: {text}"))
        };
        let one = |flag: &str, default: u64| lookup(flag).map_or(default, |text| number(&text));
        let cases = list("--cases", &CASES.join(","));
        for case in &cases {
            assert!(
                CASES.contains(&case.as_str()),
                "unknown case {case}: one of {CASES:?}"
            );
        }
        Settings {
            events: one("--events", 100_000),
            cases,
            brokers: list("--brokers", "kafka,rabbitmq,redis")
                .iter()
                .map(|name| Broker::parse(name))
                .collect(),
            sizes: list("--sizes", "10000,1000000,10000000")
                .iter()
                .map(|size| number(size))
                .collect(),
            latency_rates: list("--latency-rates", "500,1000,5000")
                .iter()
                .map(|rate| number(rate))
                .collect(),
            latency_secs: one("--latency-secs", 10),
            latency_held_acks: Duration::from_millis(one("--latency-held-acks-ms", 0)),
            steady_rate: one("--steady-rate", 5000),
            payload_bytes: one("--payload-bytes", 300) as usize,
            sample_interval: Duration::from_millis(one("--sample-ms", 500)),
            kafka_partitions: one("--kafka-partitions", 4) as i32,
            log_filter: lookup("--relay-log").unwrap_or_else(|| "info".to_owned()),
            profile: args.iter().any(|arg| arg == "--profile"),
            payloads: list("--payloads", "1000:100000,64000:10000,900000:1500")
                .iter()
                .map(|pair| PayloadSize::parse(pair))
                .collect(),
            max_rss_mib: one("--max-rss-mib", 256),
            outage: Duration::from_secs(one("--outage-secs", 15)),
            outage_rates: list("--outage-rates", "50,500")
                .iter()
                .map(|rate| number(rate))
                .collect(),
            max_outage_cores: lookup("--max-outage-cores").map_or(0.1, |text| {
                text.parse()
                    .unwrap_or_else(|_| panic!("not a number: {text}"))
            }),
            kafka_brokers: outbox_testkit::kafka::brokers(),
            amqp_url: outbox_testkit::rabbitmq::amqp_url(),
            redis_url: outbox_testkit::redis::redis_url(),
            nats_url: outbox_testkit::nats::nats_url(),
        }
    }

    fn runs(&self, case: &str) -> bool {
        self.cases.iter().any(|selected| selected == case)
    }
}

/// The drain cases of one broker, by name.
fn drain_specs(settings: &Settings) -> Vec<(&'static str, DrainSpec)> {
    let uniform = KeyDistribution::Uniform {
        aggregates: UNIFORM_AGGREGATES,
    };
    let spec_from = |label: &str, distribution, analyze, steady_rate, source| DrainSpec {
        label: label.to_owned(),
        distribution,
        analyze,
        steady_rate,
        history_rows: 0,
        profile: settings.profile,
        source,
        relay_config: "",
    };
    let spec = |label: &str, distribution, analyze, steady_rate| {
        spec_from(label, distribution, analyze, steady_rate, SourceKind::Poll)
    };
    let steady_label = format!("uniform, with 8 writers at {}/s", settings.steady_rate);
    let zipf = KeyDistribution::Zipf {
        aggregates: 10_000,
        exponent: 1.1,
    };
    let all = [
        (
            "uniform",
            spec(
                "uniform, 1,000 aggregates, no statistics",
                uniform,
                false,
                None,
            ),
        ),
        (
            "delete-mark",
            DrainSpec {
                relay_config: "[retention]\npublished = \"0s\"\n",
                ..spec(
                    "uniform, 1,000 aggregates, no statistics; the mark deletes (retention.published = \"0s\")",
                    uniform,
                    false,
                    None,
                )
            },
        ),
        (
            "analyzed",
            spec(
                "uniform, 1,000 aggregates, after ANALYZE",
                uniform,
                true,
                None,
            ),
        ),
        ("zipf", spec(&zipf.label(), zipf, false, None)),
        (
            "five",
            spec(
                "5 aggregates",
                KeyDistribution::Uniform { aggregates: 5 },
                false,
                None,
            ),
        ),
        (
            "one",
            spec(
                "1 aggregate",
                KeyDistribution::Uniform { aggregates: 1 },
                false,
                None,
            ),
        ),
        (
            "steady",
            spec(&steady_label, uniform, false, Some(settings.steady_rate)),
        ),
        (
            "logical",
            spec_from(
                "logical source: uniform, 1,000 aggregates",
                uniform,
                false,
                None,
                SourceKind::Logical,
            ),
        ),
        (
            "logical-steady",
            spec_from(
                &format!("logical source: {steady_label}"),
                uniform,
                false,
                Some(settings.steady_rate),
                SourceKind::Logical,
            ),
        ),
        (
            "logical-backlog",
            spec_from(
                "logical source, backlog before the slot: uniform, 1,000 aggregates",
                uniform,
                false,
                None,
                SourceKind::LogicalBacklog,
            ),
        ),
    ];
    all.into_iter()
        .filter(|(name, _)| settings.runs(name))
        .collect()
}

/// The raw client's records: `events` keys from `distribution`, each with
/// a payload of `payload_bytes`.
pub(crate) fn raw_records(
    distribution: KeyDistribution,
    events: u64,
    payload_bytes: usize,
) -> Vec<RawRecord> {
    let mut keys = Keys::new(distribution, 0x0b0c);
    (0..events)
        .map(|sequence| {
            let key = keys.next_aggregate();
            RawRecord {
                payload: payload(&key, sequence, payload_bytes),
                key,
            }
        })
        .collect()
}

/// Run the bench's unit tests; a failure panics.
fn run_unit_tests() {
    let tests = histogram::tests::ALL
        .iter()
        .chain(deliveries::tests::ALL)
        .chain(relay::tests::ALL);
    support::unit_tests::run("relay_binary", tests);
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(consumer_process::CONSUME) {
        consumer_process::consume(&args[1..]).await;
        return;
    }
    if !args.iter().any(|arg| arg == "--bench") {
        run_unit_tests();
        return;
    }
    let settings = Settings::load();
    println!(
        "relay_binary: {} events per backlog, cases {:?}, brokers {:?}, history sizes {:?}, latency {:?}/s for {} s, payloads {:?} (peak RSS ≤ {} MiB), relay {}",
        settings.events,
        settings.cases,
        settings.brokers,
        settings.sizes,
        settings.latency_rates,
        settings.latency_secs,
        settings.payloads,
        settings.max_rss_mib,
        env!("CARGO_BIN_EXE_outbox-relay")
    );
    let specs = drain_specs(&settings);
    let mut brokers = Vec::new();
    let mut payloads = Vec::new();
    for &broker in &settings.brokers {
        println!("== {}", broker.path());
        let raw = if specs.is_empty() {
            None
        } else {
            let records = raw_records(
                KeyDistribution::Uniform {
                    aggregates: UNIFORM_AGGREGATES,
                },
                settings.events,
                settings.payload_bytes,
            );
            let raw = broker.raw(&settings, &records).await;
            println!(
                "  raw client: {:.0} msg/s; {}",
                raw.rate,
                raw.cpu.per_event_named(raw.acknowledged, "client")
            );
            Some(raw)
        };
        let mut drains = Vec::new();
        for (name, spec) in &specs {
            let figures = drain(&settings, broker, spec.clone()).await;
            print_drain(&figures);
            drains.push((*name, figures));
        }
        if settings.runs("payloads") {
            payloads.extend(payload_sizes(&settings, broker).await);
        }
        brokers.push(BrokerResults {
            broker,
            raw,
            drains,
        });
    }
    let mut latencies = Vec::new();
    if settings.runs("latency") {
        for &broker in &settings.brokers {
            for &rate in &settings.latency_rates {
                for route in [Route::Direct, Route::Relay, Route::Logical] {
                    let mut figures = latency(&settings, broker, route, rate).await;
                    println!(
                        "  latency {} {route:?} at {rate}/s (committed {:.0}/s): commit → consumer {}{}",
                        broker.path(),
                        figures.producer_rate,
                        percentiles(&mut figures.latencies),
                        figures.ack_summary()
                    );
                    latencies.push(figures);
                }
            }
        }
    }
    let history = if settings.runs("history") {
        println!("== fetch and mark against the table's size (Kafka)");
        history::history_sizes(&settings).await
    } else {
        Vec::new()
    };
    let mut outages = Vec::new();
    if settings.runs("outage") {
        println!(
            "== the relay's CPU while the broker is away for {:?}",
            settings.outage
        );
        for &broker in &settings.brokers {
            if outage::Outage::of(broker).is_empty() {
                println!(
                    "  outage: skipped on {}: no way to take it away yet",
                    broker.path()
                );
            }
            for &kind in outage::Outage::of(broker) {
                for &rate in &settings.outage_rates {
                    let figures = outage::outage(&settings, kind, rate).await;
                    println!("  {}", figures.line());
                    outages.push(figures);
                }
            }
        }
    }
    if settings.runs("peers") {
        peers::peers(&settings).await;
    }
    print_summary(&settings, &brokers, &latencies, &history, &payloads);
    let failures: Vec<String> = payloads
        .iter()
        .flat_map(|figures| figures.failures(settings.max_rss_mib))
        .collect();
    let outage_failures: Vec<String> = outages
        .iter()
        .filter(|figures| {
            figures.cores() > settings.max_outage_cores || figures.failed_attempts > 0
        })
        .map(|figures| figures.line())
        .collect();
    assert!(
        outage_failures.is_empty(),
        "relay_binary outage: above {} cores or with failed attempts:\n- {}",
        settings.max_outage_cores,
        outage_failures.join("\n- ")
    );
    assert!(
        failures.is_empty(),
        "relay_binary payloads: {} failures:\n- {}",
        failures.len(),
        failures.join("\n- ")
    );
}
