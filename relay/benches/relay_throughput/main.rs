//! Relay benchmark (issue 3): drain rate and commit-to-ack latency of the
//! relay, run in-process, against the raw producer rate of the same broker
//! client on the same broker.
//!
//! ```sh
//! cargo bench -p outbox-relay --bench relay_throughput
//! OUTBOX_BENCH_EVENTS=20000 cargo bench -p outbox-relay --bench relay_throughput
//! cargo bench -p outbox-relay --bench relay_throughput -- --events 20000 --only kafka
//! ```
//!
//! Besides the relay's drain it runs a read-only ceiling per broker and
//! batch size: the same events read once each from PostgreSQL and published
//! with no database write, the bound of any relay design that reads its
//! events from the table. Every run prints the CPU time per event of this
//! process, of PostgreSQL and of the broker, read from `/proc`.
//!
//! Needs the test services (`scripts/test.sh --services-only`): PostgreSQL,
//! RabbitMQ and a Kafka-API broker. Every scenario uses a fresh database,
//! topic, exchange and queue of its own (through `outbox_testkit`) and
//! removes them at the end.
//!
//! Settings, as environment variables or `--name value` arguments:
//! - `OUTBOX_BENCH_EVENTS` / `--events`: events per drain run (100000).
//! - `OUTBOX_BENCH_AGGREGATES` / `--aggregates`: aggregates the events are
//!   spread over, round-robin (1000).
//! - `OUTBOX_BENCH_PAYLOAD_BYTES` / `--payload-bytes`: payload size (300).
//! - `OUTBOX_BENCH_BATCH_SIZES` / `--batch-sizes`: relay `batch_size` of
//!   each drain run, comma-separated (`500,2000`; 500 is the default config).
//! - `OUTBOX_BENCH_LATENCY_RATE` / `--latency-rate`: events/s of the latency
//!   run (1000); `OUTBOX_BENCH_LATENCY_SECS` / `--latency-secs` (10).
//! - `OUTBOX_BENCH_KAFKA_PARTITIONS` / `--kafka-partitions` (4).
//! - `OUTBOX_BENCH_ONLY` / `--only`: `store`, `kafka`, `rabbitmq` or
//!   `logical` (the drain with `--source logical` on both brokers).
//! - `OUTBOX_TEST_POSTGRES_URL`, `OUTBOX_TEST_KAFKA_BROKERS`,
//!   `OUTBOX_TEST_AMQP_URL`: the services, as for the tests.
//! - `RUST_LOG`: the relay's log (to stderr), `warn` by default.

mod drain;
mod events;
mod latency;
mod logical;
mod raw;
mod scenarios;
mod store_only;
#[path = "../support/mod.rs"]
mod support;
mod targets;
mod timed;

use std::time::Duration;

use crate::scenarios::{kafka_scenarios, print_summary, rabbitmq_scenarios};
use crate::store_only::{print_store_only, store_only};

/// Events per enqueue transaction when filling the table before a drain.
const ENQUEUE_CHUNK: u64 = 1000;
/// Events per `publish` call when the relay's publisher is timed directly.
const PUBLISHER_CHUNK: usize = 10_000;
/// Publisher confirms in flight at most for raw lapin.
const AMQP_WINDOW: usize = 5_000;
/// Process names of the brokers, for the CPU figures.
const KAFKA_PROCESSES: &[&str] = &["tansu"];
const RABBITMQ_PROCESSES: &[&str] = &["beam.smp"];
/// Longest wait for a drain or for the last deliveries of a latency run.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);
/// Concurrent producer tasks of the latency run (one-row transactions are
/// bound by the commit's fsync, so one task alone cannot keep 1,000/s).
const LATENCY_PRODUCERS: u64 = 8;

// ---------------------------------------------------------------------------
// Settings

#[derive(Debug, Clone)]
struct Settings {
    events: u64,
    aggregates: u64,
    payload_bytes: usize,
    batch_sizes: Vec<u32>,
    latency_rate: u64,
    latency_secs: u64,
    kafka_partitions: i32,
    only: Option<String>,
    kafka_brokers: String,
    amqp_url: String,
}

impl Settings {
    fn load() -> Settings {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let lookup = |flag: &str, env: &str| -> Option<String> {
            args.iter()
                .position(|arg| arg == flag)
                .and_then(|index| args.get(index + 1).cloned())
                .or_else(|| std::env::var(env).ok())
                .filter(|value| !value.trim().is_empty())
        };
        let number = |flag: &str, env: &str, default: u64| -> u64 {
            lookup(flag, env).map_or(default, |text| {
                text.trim()
                    .replace('_', "")
                    .parse()
                    .unwrap_or_else(|_| panic!("{flag} / {env}: not a number: {text}"))
            })
        };
        let batch_sizes = lookup("--batch-sizes", "OUTBOX_BENCH_BATCH_SIZES")
            .unwrap_or_else(|| "500,2000".to_owned())
            .split(',')
            .map(|size| {
                size.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("bad batch size {size}"))
            })
            .collect();
        Settings {
            events: number("--events", "OUTBOX_BENCH_EVENTS", 100_000),
            aggregates: number("--aggregates", "OUTBOX_BENCH_AGGREGATES", 1000).max(1),
            payload_bytes: number("--payload-bytes", "OUTBOX_BENCH_PAYLOAD_BYTES", 300) as usize,
            batch_sizes,
            latency_rate: number("--latency-rate", "OUTBOX_BENCH_LATENCY_RATE", 1000).max(1),
            latency_secs: number("--latency-secs", "OUTBOX_BENCH_LATENCY_SECS", 10),
            kafka_partitions: number("--kafka-partitions", "OUTBOX_BENCH_KAFKA_PARTITIONS", 4)
                as i32,
            only: lookup("--only", "OUTBOX_BENCH_ONLY"),
            kafka_brokers: outbox_testkit::kafka::brokers(),
            amqp_url: outbox_testkit::rabbitmq::amqp_url(),
        }
    }

    fn runs(&self, broker: &str) -> bool {
        self.only.as_deref().is_none_or(|only| only == broker)
    }
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let settings = Settings::load();
    println!(
        "relay_throughput: {} events/run, ~{} byte payloads, {} aggregates, batch sizes {:?}, latency {}/s for {} s, {} Kafka partitions",
        settings.events,
        settings.payload_bytes,
        settings.aggregates,
        settings.batch_sizes,
        settings.latency_rate,
        settings.latency_secs,
        settings.kafka_partitions
    );
    let mut store_results = Vec::new();
    if settings.runs("store") {
        println!("== PostgreSQL store statements alone");
        for &batch_size in &settings.batch_sizes {
            let result = store_only(&settings, batch_size).await;
            print_store_only(&result);
            store_results.push(result);
        }
    }
    let mut figures = Vec::new();
    if settings.runs("kafka") {
        figures.push(kafka_scenarios(&settings).await);
    }
    if settings.runs("rabbitmq") {
        figures.push(rabbitmq_scenarios(&settings).await);
    }
    if settings.runs("logical") {
        logical::logical_scenarios(&settings).await;
    }
    print_summary(&settings, &mut figures);
    if !store_results.is_empty() {
        println!();
        println!(
            "| store alone (PostgreSQL) | fetch_pending, batch_size rows | fetch_pending, 2 × batch_size rows | serial fetch + mark_published loop |"
        );
        println!("|---|---|---|---|");
        for result in &store_results {
            println!(
                "| batch_size {} | {:.2} ms | {:.2} ms | {:.0} rows/s (fetch {:.2} s + mark {:.2} s) |",
                result.batch_size,
                result.fetch_ms,
                result.fetch_double_ms,
                result.serial_rate,
                result.serial_fetch.as_secs_f64(),
                result.serial_mark.as_secs_f64()
            );
        }
    }
}
