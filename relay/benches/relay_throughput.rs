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
//! topic, exchange and queue of its own and removes them at the end.
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
//! - `OUTBOX_BENCH_ONLY` / `--only`: `store`, `kafka` or `rabbitmq`.
//! - `OUTBOX_TEST_POSTGRES_URL`, `OUTBOX_TEST_KAFKA_BROKERS`,
//!   `OUTBOX_TEST_AMQP_URL`: the services, as for the tests.
//! - `RUST_LOG`: the relay's log (to stderr), `warn` by default.

#[path = "relay_throughput/cpu.rs"]
mod cpu;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use outbox_relay::commands::relay_settings;
use outbox_relay::publish::{
    KafkaPublisher, KafkaPublisherConfig, PublishFailure, Publisher, RabbitMqPublisher,
    RabbitMqPublisherConfig,
};
use outbox_relay::store::{
    ClaimedEvent, DeadEvent, DeadSelector, EventSource, FailedAttempt, Lease, LeaseStore,
    OperatorStore, OutboxBacklog, OutboxStatus, OutboxStore, PostgresStore, ReplayWindow,
};
use outbox_relay::{Error, OutboundEvent, Relay, RelayConfig, Wakeup};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const EVENT_TYPE: &str = "shipment.moved";
const SOURCE: &str = "/shipments";
const AGGREGATE_TYPE: &str = "shipment";
/// Events per enqueue transaction when filling the table before a drain.
const ENQUEUE_CHUNK: u64 = 1000;
/// Events per `publish` call when the relay's publisher is timed directly.
const PUBLISHER_CHUNK: usize = 10_000;
/// Publisher confirms in flight at most for raw lapin.
const AMQP_WINDOW: usize = 5_000;
/// Longest wait for a drain or for the last deliveries of a latency run.
/// Process names of the brokers, for the CPU figures.
const KAFKA_PROCESSES: &[&str] = &["tansu"];
const RABBITMQ_PROCESSES: &[&str] = &["beam.smp"];
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
    postgres_url: String,
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
            postgres_url: std::env::var("OUTBOX_TEST_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned()),
            kafka_brokers: std::env::var("OUTBOX_TEST_KAFKA_BROKERS")
                .unwrap_or_else(|_| "127.0.0.1:9092".to_owned()),
            amqp_url: std::env::var("OUTBOX_TEST_AMQP_URL")
                .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned()),
        }
    }

    fn runs(&self, broker: &str) -> bool {
        self.only.as_deref().is_none_or(|only| only == broker)
    }
}

fn unique_name(prefix: &str) -> String {
    format!("outbox-bench-{prefix}-{}", Uuid::now_v7().simple())
}

// ---------------------------------------------------------------------------
// Events

/// The JSON payload of event `sequence`, padded to `bytes`.
fn payload(sequence: u64, aggregates: u64, bytes: usize) -> String {
    let shipment = format!("s-{}", sequence % aggregates);
    let bare = serde_json::json!({ "shipment": shipment, "sequence": sequence, "note": "" });
    let pad = bytes.saturating_sub(bare.to_string().len());
    serde_json::json!({ "shipment": shipment, "sequence": sequence, "note": "x".repeat(pad) })
        .to_string()
}

fn aggregate_id(sequence: u64, aggregates: u64) -> String {
    format!("s-{}", sequence % aggregates)
}

fn message(settings: &Settings, topic: &str, sequence: u64) -> outbox::OutboxMessage {
    let raw = serde_json::value::RawValue::from_string(payload(
        sequence,
        settings.aggregates,
        settings.payload_bytes,
    ))
    .expect("payload is JSON");
    outbox::OutboxMessage::new(
        EVENT_TYPE,
        SOURCE,
        AGGREGATE_TYPE,
        aggregate_id(sequence, settings.aggregates),
        topic,
        raw,
    )
}

/// An event as the relay would have fetched it, for timing a publisher
/// directly.
fn outbound(settings: &Settings, topic: &str, sequence: u64) -> OutboundEvent {
    OutboundEvent {
        id: sequence as i64 + 1,
        event_id: Uuid::now_v7(),
        event_type: EVENT_TYPE.to_owned(),
        event_version: 1,
        source: SOURCE.to_owned(),
        aggregate_type: AGGREGATE_TYPE.to_owned(),
        aggregate_id: aggregate_id(sequence, settings.aggregates),
        topic: topic.to_owned(),
        payload: payload(sequence, settings.aggregates, settings.payload_bytes),
        headers: BTreeMap::new(),
        created_at: chrono::Utc::now(),
        attempts: 0,
        replay: false,
    }
}

/// The CloudEvents attributes the relay sends (binary mode), for the raw
/// clients, so that their records are as large as the relay's.
fn attributes(event_id: &Uuid, aggregate_id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("specversion", "1.0".to_owned()),
        ("id", event_id.to_string()),
        ("source", SOURCE.to_owned()),
        ("type", EVENT_TYPE.to_owned()),
        (
            "time",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        ),
        ("aggregatetype", AGGREGATE_TYPE.to_owned()),
        ("eventversion", "1".to_owned()),
        ("partitionkey", aggregate_id.to_owned()),
    ]
}

/// Fill a fresh database with `settings.events` pending events.
async fn enqueue_all(settings: &Settings, pool: &sqlx::PgPool, topic: &str) -> Duration {
    let started = Instant::now();
    let mut sequence = 0;
    while sequence < settings.events {
        let end = (sequence + ENQUEUE_CHUNK).min(settings.events);
        let messages: Vec<_> = (sequence..end)
            .map(|sequence| message(settings, topic, sequence))
            .collect();
        let mut tx = pool.begin().await.expect("begin");
        outbox::OutboxWriter::new()
            .enqueue_messages(&mut tx, messages)
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
        sequence = end;
    }
    sqlx::query("ANALYZE outbox_events")
        .execute(pool)
        .await
        .expect("analyze");
    started.elapsed()
}

// ---------------------------------------------------------------------------
// Instrumentation: a store and a publisher that time the relay's calls

#[derive(Default)]
struct Phases {
    fetch_calls: AtomicU64,
    fetch_rows: AtomicU64,
    fetch_nanos: AtomicU64,
    mark_calls: AtomicU64,
    mark_rows: AtomicU64,
    mark_nanos: AtomicU64,
    publish_calls: AtomicU64,
    publish_events: AtomicU64,
    publish_nanos: AtomicU64,
    /// Per fetch: (duration, rows returned), in call order.
    fetches: Mutex<Vec<(Duration, u64)>>,
    /// Per mark: duration, in call order.
    marks: Mutex<Vec<Duration>>,
    /// Marked total to wait for, and when it was reached.
    target: AtomicU64,
    reached: Mutex<Option<Instant>>,
    first_fetch: Mutex<Option<Instant>>,
}

impl Phases {
    fn new(target: u64) -> Arc<Phases> {
        let phases = Phases::default();
        phases.target.store(target, Ordering::Relaxed);
        Arc::new(phases)
    }

    fn reached(&self) -> Option<Instant> {
        *self.reached.lock().unwrap()
    }

    async fn wait_reached(&self, timeout: Duration) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(at) = self.reached() {
                return Some(at);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    fn secs(nanos: &AtomicU64) -> f64 {
        nanos.load(Ordering::Relaxed) as f64 / 1e9
    }

    fn report(&self, wall: Duration) -> String {
        let fetch_calls = self.fetch_calls.load(Ordering::Relaxed).max(1);
        let mark_calls = self.mark_calls.load(Ordering::Relaxed).max(1);
        let publish_calls = self.publish_calls.load(Ordering::Relaxed).max(1);
        let fetches = self.fetches.lock().unwrap();
        let marks = self.marks.lock().unwrap();
        let quarter = (fetches.len() / 4).max(1);
        let mean_ms = |items: &[(Duration, u64)]| {
            if items.is_empty() {
                return 0.0;
            }
            items.iter().map(|(d, _)| d.as_secs_f64()).sum::<f64>() * 1e3 / items.len() as f64
        };
        let first = mean_ms(&fetches[..quarter.min(fetches.len())]);
        let last = mean_ms(&fetches[fetches.len().saturating_sub(quarter)..]);
        let mark_quarter = (marks.len() / 4).max(1);
        let mark_mean = |items: &[Duration]| {
            if items.is_empty() {
                return 0.0;
            }
            items.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / items.len() as f64
        };
        let mark_first = mark_mean(&marks[..mark_quarter.min(marks.len())]);
        let mark_last = mark_mean(&marks[marks.len().saturating_sub(mark_quarter)..]);
        format!(
            "    phases over {:.2} s of wall time (fetch and publish run in the batch loop; mark runs in the background, overlapped with the next fetch+publish):\n\
             \x20     fetch_pending : {} calls, {:.2} s total, {:.2} ms/call (first quarter {:.2} ms, last quarter {:.2} ms), {:.0} rows returned/call\n\
             \x20     publish       : {} calls, {:.2} s total, {:.2} ms/call, {:.0} events/call\n\
             \x20     mark_published: {} calls, {:.2} s total, {:.2} ms/call (first quarter {:.2} ms, last quarter {:.2} ms), {:.0} rows/call\n\
             \x20     batch loop not in fetch or publish (waiting for the previous mark, pauses, bookkeeping): {:.2} s",
            wall.as_secs_f64(),
            self.fetch_calls.load(Ordering::Relaxed),
            Phases::secs(&self.fetch_nanos),
            Phases::secs(&self.fetch_nanos) * 1e3 / fetch_calls as f64,
            first,
            last,
            self.fetch_rows.load(Ordering::Relaxed) as f64 / fetch_calls as f64,
            self.publish_calls.load(Ordering::Relaxed),
            Phases::secs(&self.publish_nanos),
            Phases::secs(&self.publish_nanos) * 1e3 / publish_calls as f64,
            self.publish_events.load(Ordering::Relaxed) as f64 / publish_calls as f64,
            self.mark_calls.load(Ordering::Relaxed),
            Phases::secs(&self.mark_nanos),
            Phases::secs(&self.mark_nanos) * 1e3 / mark_calls as f64,
            mark_first,
            mark_last,
            self.mark_rows.load(Ordering::Relaxed) as f64 / mark_calls as f64,
            (wall.as_secs_f64()
                - Phases::secs(&self.fetch_nanos)
                - Phases::secs(&self.publish_nanos))
            .max(0.0),
        )
    }
}

fn add(counter: &AtomicU64, elapsed: Duration) {
    counter.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
}

/// Delegates to the relay's store, timing `fetch_pending` and
/// `mark_published`.
struct TimedStore {
    inner: Arc<dyn OutboxStore>,
    phases: Arc<Phases>,
}

impl LeaseStore for TimedStore {
    fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>> {
        self.inner.partition_count()
    }

    fn heartbeat<'a>(
        &'a self,
        relay_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<i64, Error>> {
        self.inner.heartbeat(relay_id, ttl)
    }

    fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        self.inner.deregister(relay_id)
    }

    fn renew_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<Lease>, Error>> {
        self.inner.renew_leases(relay_id, leases, ttl)
    }

    fn acquire_leases<'a>(
        &'a self,
        relay_id: &'a str,
        limit: i64,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<Lease>, Error>> {
        self.inner.acquire_leases(relay_id, limit, ttl)
    }

    fn release_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        self.inner.release_leases(relay_id, leases)
    }
}

impl EventSource for TimedStore {
    fn fetch_pending<'a>(
        &'a self,
        partition_count: i32,
        partitions: &'a [i32],
        exclude: &'a [i64],
        hold_dead: bool,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>> {
        Box::pin(async move {
            let started = Instant::now();
            let result = self
                .inner
                .fetch_pending(partition_count, partitions, exclude, hold_dead, limit)
                .await;
            let elapsed = started.elapsed();
            let rows = result.as_ref().map_or(0, |rows| rows.len() as u64);
            if rows > 0 {
                self.phases
                    .first_fetch
                    .lock()
                    .unwrap()
                    .get_or_insert(started);
                self.phases.fetch_calls.fetch_add(1, Ordering::Relaxed);
                self.phases.fetch_rows.fetch_add(rows, Ordering::Relaxed);
                add(&self.phases.fetch_nanos, elapsed);
                self.phases.fetches.lock().unwrap().push((elapsed, rows));
            }
            result
        })
    }

    fn mark_published<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            let started = Instant::now();
            let result = self
                .inner
                .mark_published(relay_id, partition_count, leases, ids)
                .await;
            let now = Instant::now();
            let elapsed = now - started;
            self.phases.mark_calls.fetch_add(1, Ordering::Relaxed);
            add(&self.phases.mark_nanos, elapsed);
            self.phases.marks.lock().unwrap().push(elapsed);
            if let Ok(marked) = &result {
                let total = self.phases.mark_rows.fetch_add(*marked, Ordering::Relaxed) + marked;
                if total >= self.phases.target.load(Ordering::Relaxed) {
                    self.phases.reached.lock().unwrap().get_or_insert(now);
                }
            }
            result
        })
    }

    fn record_failures<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        failures: &'a [FailedAttempt],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        self.inner
            .record_failures(relay_id, partition_count, leases, failures)
    }
}

impl OperatorStore for TimedStore {
    fn migrate(&self) -> BoxFuture<'_, Result<(), Error>> {
        self.inner.migrate()
    }

    fn delete_published(
        &self,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, Error>> {
        self.inner.delete_published(older_than, limit)
    }

    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>> {
        self.inner.status()
    }

    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>> {
        self.inner.backlog()
    }

    fn database_time(&self) -> BoxFuture<'_, Result<chrono::DateTime<chrono::Utc>, Error>> {
        self.inner.database_time()
    }

    fn topic_exists<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        self.inner.topic_exists(topic)
    }

    fn fetch_published<'a>(
        &'a self,
        window: &'a ReplayWindow,
        after_id: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>> {
        self.inner.fetch_published(window, after_id, limit)
    }

    fn list_dead<'a>(
        &'a self,
        selector: &'a DeadSelector,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<DeadEvent>, Error>> {
        self.inner.list_dead(selector, limit)
    }

    fn retry_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        self.inner.retry_dead(selector)
    }

    fn discard_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        self.inner.discard_dead(selector)
    }
}

/// When each event was acknowledged, by event id.
type Stamps = Arc<Mutex<HashMap<Uuid, Instant>>>;

/// Delegates to the relay's publisher, timing `publish` and stamping the
/// acknowledgement time of every event it published.
struct TimedPublisher {
    inner: Arc<dyn Publisher>,
    phases: Arc<Phases>,
    acks: Option<Stamps>,
    failures: AtomicU64,
}

impl Publisher for TimedPublisher {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(async move {
            let started = Instant::now();
            let results = self.inner.publish(events).await;
            let now = Instant::now();
            self.phases.publish_calls.fetch_add(1, Ordering::Relaxed);
            self.phases
                .publish_events
                .fetch_add(events.len() as u64, Ordering::Relaxed);
            add(&self.phases.publish_nanos, now - started);
            let failed = results.iter().filter(|result| result.is_err()).count() as u64;
            if failed > 0 {
                self.failures.fetch_add(failed, Ordering::Relaxed);
                if let Some(Err(failure)) = results.iter().find(|result| result.is_err()) {
                    eprintln!("    ! {failed} event(s) of a batch failed, e.g.: {failure}");
                }
            }
            if let Some(acks) = &self.acks {
                let mut acks = acks.lock().unwrap();
                for (event, result) in events.iter().zip(&results) {
                    if result.is_ok() {
                        acks.entry(event.event_id).or_insert(now);
                    }
                }
            }
            results
        })
    }

    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }
}

// ---------------------------------------------------------------------------
// Databases

struct BenchDatabase {
    admin_url: String,
    name: String,
    url: String,
    pool: sqlx::PgPool,
}

async fn create_database(settings: &Settings) -> BenchDatabase {
    use sqlx::Connection;
    let admin_url = settings.postgres_url.clone();
    let name = unique_name("db").replace('-', "_");
    let mut admin = sqlx::PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL at {admin_url}: {error}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut admin)
        .await
        .expect("create database");
    admin.close().await.ok();
    let url = match admin_url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => panic!("bad OUTBOX_TEST_POSTGRES_URL {admin_url}"),
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(LATENCY_PRODUCERS as u32 + 4)
        .connect(&url)
        .await
        .expect("connect to the bench database");
    outbox::migrate(&pool).await.expect("migrate");
    BenchDatabase {
        admin_url,
        name,
        url,
        pool,
    }
}

impl BenchDatabase {
    async fn published(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE state = 'published'")
            .fetch_one(&self.pool)
            .await
            .expect("count published")
    }

    async fn drop_database(self) {
        use sqlx::Connection;
        self.pool.close().await;
        let dropped = async {
            let mut admin = sqlx::PgConnection::connect(&self.admin_url).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            )))
            .execute(&mut admin)
            .await?;
            admin.close().await
        };
        if let Err(error) = dropped.await {
            eprintln!("could not drop database {}: {error}", self.name);
        }
    }
}

// ---------------------------------------------------------------------------
// Brokers

fn kafka_admin(settings: &Settings) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", &settings.kafka_brokers)
        .create()
        .expect("kafka admin client")
}

async fn create_topic(settings: &Settings, prefix: &str) -> String {
    let topic = unique_name(prefix);
    let results = kafka_admin(settings)
        .create_topics(
            [&NewTopic::new(
                &topic,
                settings.kafka_partitions,
                TopicReplication::Fixed(1),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create_topics request");
    for result in results {
        result.expect("topic created");
    }
    topic
}

async fn delete_topic(settings: &Settings, topic: &str) {
    let deleted = kafka_admin(settings)
        .delete_topics(
            &[topic],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await;
    match deleted {
        Ok(results) => {
            for result in results {
                if let Err((name, code)) = result {
                    eprintln!("could not delete topic {name}: {code}");
                }
            }
        }
        Err(error) => eprintln!("could not delete topic {topic}: {error}"),
    }
}

fn kafka_publisher(settings: &Settings) -> Arc<KafkaPublisher> {
    let mut config = KafkaPublisherConfig::new(vec![settings.kafka_brokers.clone()]);
    if let Ok(options) = std::env::var("OUTBOX_BENCH_KAFKA_OPTIONS") {
        for option in options
            .split(',')
            .filter(|option| !option.trim().is_empty())
        {
            let (key, value) = option.split_once('=').unwrap_or_else(|| {
                panic!("OUTBOX_BENCH_KAFKA_OPTIONS: `{option}` is not key=value")
            });
            config
                .client_options
                .insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    Arc::new(KafkaPublisher::new(config).expect("kafka publisher"))
}

/// Publish one event so that the producer id, the connections and the topic
/// lookup are in place before anything is timed.
async fn warm_up(publisher: &dyn Publisher, settings: &Settings, topic: &str) -> Uuid {
    let event = outbound(settings, topic, 0);
    let results = publisher.publish(std::slice::from_ref(&event)).await;
    if let Some(Err(failure)) = results.first() {
        panic!("warm-up publish to {topic} failed: {failure}");
    }
    event.event_id
}

/// An AMQP exchange with a durable queue bound to it (`#`), so that
/// mandatory messages are routed.
struct AmqpTarget {
    connection: Connection,
    exchange: String,
    queue: String,
}

async fn amqp_target(settings: &Settings, prefix: &str) -> AmqpTarget {
    let connection = Connection::connect(&settings.amqp_url, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    let exchange = unique_name(prefix);
    let queue = format!("{exchange}.all");
    channel
        .exchange_declare(
            exchange.as_str().into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare exchange");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare queue");
    channel
        .queue_bind(
            queue.as_str().into(),
            exchange.as_str().into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind queue");
    AmqpTarget {
        connection,
        exchange,
        queue,
    }
}

impl AmqpTarget {
    async fn remove(self) {
        let Ok(channel) = self.connection.create_channel().await else {
            eprintln!("could not remove exchange {}", self.exchange);
            return;
        };
        if let Err(error) = channel
            .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await
        {
            eprintln!("could not delete queue {}: {error}", self.queue);
        }
        if let Err(error) = channel
            .exchange_delete(
                self.exchange.as_str().into(),
                ExchangeDeleteOptions::default(),
            )
            .await
        {
            eprintln!("could not delete exchange {}: {error}", self.exchange);
        }
        let _ = self.connection.close(200, "bye".into()).await;
    }
}

fn rabbitmq_publisher(settings: &Settings) -> Arc<RabbitMqPublisher> {
    Arc::new(
        RabbitMqPublisher::new(RabbitMqPublisherConfig::new(settings.amqp_url.clone()))
            .expect("rabbitmq publisher"),
    )
}

// ---------------------------------------------------------------------------
// Raw producer rates

/// Plain rdkafka: a FutureProducer with the relay's producer settings,
/// every record sent (pipelined), then every delivery report awaited.
async fn raw_rdkafka(settings: &Settings, topic: &str) -> (f64, u64, cpu::CpuSpent) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &settings.kafka_brokers)
        .set("client.id", "outbox-bench-raw")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "30000")
        .set("partitioner", "murmur2_random")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("producer");
    let records: Vec<(String, String, Uuid)> = (0..settings.events)
        .map(|sequence| {
            (
                aggregate_id(sequence, settings.aggregates),
                payload(sequence, settings.aggregates, settings.payload_bytes),
                Uuid::now_v7(),
            )
        })
        .collect();
    let headers = |event_id: &Uuid, key: &str| {
        let mut headers = OwnedHeaders::new_with_capacity(10);
        for (name, value) in attributes(event_id, key) {
            let name = format!("ce_{name}");
            headers = headers.insert(Header {
                key: name.as_str(),
                value: Some(value.as_str()),
            });
        }
        headers.insert(Header {
            key: "content-type",
            value: Some("application/json"),
        })
    };
    // Warm-up: producer id, connection, topic metadata.
    let warm_id = Uuid::now_v7();
    producer
        .send(
            FutureRecord::to(topic)
                .key("warm-up")
                .payload("{}")
                .headers(headers(&warm_id, "warm-up")),
            Duration::from_secs(30),
        )
        .await
        .expect("warm-up record");

    let cpu_before = cpu::sample(KAFKA_PROCESSES);
    let started = Instant::now();
    let mut in_flight: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut delivered = 0u64;
    let mut failed = 0u64;
    let mut settle = |outcome: Result<Result<_, _>, _>| match outcome {
        Ok(Ok(_)) => delivered += 1,
        _ => failed += 1,
    };
    for (key, value, event_id) in &records {
        let mut record = FutureRecord::to(topic)
            .key(key.as_str())
            .payload(value.as_str())
            .headers(headers(event_id, key));
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    in_flight.push_back(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    match in_flight.pop_front() {
                        Some(delivery) => settle(delivery.await),
                        None => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
                Err((error, _)) => panic!("send failed: {error}"),
            }
        }
    }
    while let Some(delivery) = in_flight.pop_front() {
        settle(delivery.await);
    }
    let elapsed = started.elapsed();
    let spent = cpu_before.until(&cpu::sample(KAFKA_PROCESSES));
    assert_eq!(failed, 0, "raw rdkafka: {failed} records failed");
    (delivered as f64 / elapsed.as_secs_f64(), delivered, spent)
}

/// The relay's own publisher, called directly with big batches.
async fn raw_publisher(settings: &Settings, publisher: &dyn Publisher, topic: &str) -> (f64, u64) {
    warm_up(publisher, settings, topic).await;
    let events: Vec<OutboundEvent> = (0..settings.events)
        .map(|sequence| outbound(settings, topic, sequence))
        .collect();
    let started = Instant::now();
    let mut acknowledged = 0u64;
    for chunk in events.chunks(PUBLISHER_CHUNK) {
        let results = publisher.publish(chunk).await;
        for result in results {
            match result {
                Ok(()) => acknowledged += 1,
                Err(failure) => panic!("publisher: {failure}"),
            }
        }
    }
    let elapsed = started.elapsed();
    (acknowledged as f64 / elapsed.as_secs_f64(), acknowledged)
}

/// Plain lapin: publisher confirms, mandatory, persistent, the relay's
/// properties and headers; at most `AMQP_WINDOW` confirms outstanding.
async fn raw_lapin(settings: &Settings, exchange: &str) -> (f64, u64, cpu::CpuSpent) {
    let connection = Connection::connect(&settings.amqp_url, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    let records: Vec<(String, String, Uuid)> = (0..settings.events)
        .map(|sequence| {
            (
                aggregate_id(sequence, settings.aggregates),
                payload(sequence, settings.aggregates, settings.payload_bytes),
                Uuid::now_v7(),
            )
        })
        .collect();
    let options = BasicPublishOptions {
        mandatory: true,
        immediate: false,
    };
    let properties = |event_id: &Uuid, key: &str| {
        let mut headers = FieldTable::default();
        for (name, value) in attributes(event_id, key) {
            headers.insert(
                ShortString::from(format!("cloudEvents:{name}")),
                AMQPValue::LongString(LongString::from(value)),
            );
        }
        headers.insert(
            ShortString::from("cloudEvents:datacontenttype"),
            AMQPValue::LongString(LongString::from("application/json")),
        );
        BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(event_id.to_string()))
            .with_type(ShortString::from(EVENT_TYPE))
            .with_timestamp(chrono::Utc::now().timestamp() as u64)
            .with_headers(headers)
    };
    // Warm-up.
    let warm_id = Uuid::now_v7();
    channel
        .basic_publish(
            exchange.into(),
            EVENT_TYPE.into(),
            options,
            b"{}",
            properties(&warm_id, "warm-up"),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");

    let cpu_before = cpu::sample(RABBITMQ_PROCESSES);
    let started = Instant::now();
    let mut confirms = VecDeque::new();
    let mut acknowledged = 0u64;
    let mut check = |confirmation: lapin::Confirmation| {
        assert!(
            !confirmation.is_nack() && confirmation.take_message().is_none(),
            "raw lapin: message nacked or returned"
        );
        acknowledged += 1;
    };
    for (key, value, event_id) in &records {
        let confirm = channel
            .basic_publish(
                exchange.into(),
                EVENT_TYPE.into(),
                options,
                value.as_bytes(),
                properties(event_id, key),
            )
            .await
            .expect("publish");
        confirms.push_back(confirm);
        if confirms.len() > AMQP_WINDOW
            && let Some(confirm) = confirms.pop_front()
        {
            check(confirm.await.expect("confirm"));
        }
    }
    while let Some(confirm) = confirms.pop_front() {
        check(confirm.await.expect("confirm"));
    }
    let elapsed = started.elapsed();
    let spent = cpu_before.until(&cpu::sample(RABBITMQ_PROCESSES));
    let _ = connection.close(200, "bye".into()).await;
    (
        acknowledged as f64 / elapsed.as_secs_f64(),
        acknowledged,
        spent,
    )
}

// ---------------------------------------------------------------------------
// Relay drain

struct DrainResult {
    batch_size: u32,
    events: u64,
    rate: f64,
    elapsed: Duration,
    startup: Duration,
    enqueue: Duration,
    phases: String,
    cpu: cpu::CpuSpent,
}

/// Enqueue every event first, then start the relay in-process and time it
/// until the last event is marked published.
async fn relay_drain(
    settings: &Settings,
    publisher: Arc<dyn Publisher>,
    target: &str,
    batch_size: u32,
    broker_processes: &[&str],
) -> DrainResult {
    let database = create_database(settings).await;
    let enqueue = enqueue_all(settings, &database.pool, target).await;
    warm_up(publisher.as_ref(), settings, target).await;

    let opened = Arc::new(
        PostgresStore::connect(&database.url)
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
    let config = RelayConfig {
        batch_size,
        ..RelayConfig::default()
    };
    let stop = CancellationToken::new();
    let wakeup = Wakeup::new();
    opened.watch_commits(wakeup.clone(), stop.clone());
    let relay =
        Relay::new(store, timed, relay_settings(unique_name("relay"), &config)).with_wakeup(wakeup);

    let cpu_before = cpu::sample(broker_processes);
    let started = Instant::now();
    let task = tokio::spawn(relay.run(stop.clone()));
    let finished = phases.wait_reached(DRAIN_TIMEOUT).await.unwrap_or_else(|| {
        panic!(
            "drain timed out: {} of {} marked",
            phases.mark_rows.load(Ordering::Relaxed),
            settings.events
        )
    });
    let cpu = cpu_before.until(&cpu::sample(broker_processes));
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
async fn read_only_ceiling(
    settings: &Settings,
    publisher: Arc<dyn Publisher>,
    target: &str,
    page_size: u32,
    broker_processes: &[&str],
) -> DrainResult {
    let database = create_database(settings).await;
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
        PostgresStore::connect(&database.url)
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

    let cpu_before = cpu::sample(broker_processes);
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
    let cpu = cpu_before.until(&cpu::sample(broker_processes));
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
enum DrainRun {
    /// The relay, in-process: [`relay_drain`].
    Relay,
    /// Read once and publish, no writes: [`read_only_ceiling`].
    ReadOnlyCeiling,
}

impl DrainRun {
    /// Prefix of the topic or exchange the run uses.
    fn prefix(self) -> &'static str {
        match self {
            DrainRun::Relay => "relay",
            DrainRun::ReadOnlyCeiling => "ceiling",
        }
    }

    async fn run(
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
    fn report(
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

fn print_ceiling(ceiling: &DrainResult, raw: f64) {
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

// ---------------------------------------------------------------------------
// Latency at a steady rate

struct Latency {
    produced: u64,
    producer_rate: f64,
    to_ack: Vec<Duration>,
    to_consumer: Vec<Duration>,
    commit_round_trip: Vec<Duration>,
    phases: String,
}

fn percentiles(values: &mut [Duration]) -> String {
    if values.is_empty() {
        return "n/a".to_owned();
    }
    values.sort_unstable();
    let at = |fraction: f64| {
        let index = ((values.len() as f64 * fraction).ceil() as usize).clamp(1, values.len()) - 1;
        values[index].as_secs_f64() * 1e3
    };
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n = {})",
        at(0.50),
        at(0.99),
        values[values.len() - 1].as_secs_f64() * 1e3,
        values.len()
    )
}

/// Start a consumer that stamps the arrival time of every event id; returns
/// the stamps and the consuming task.
fn kafka_consumer(
    settings: &Settings,
    topic: &str,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &settings.kafka_brokers)
        .set("group.id", unique_name("group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("allow.auto.create.topics", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("kafka consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let stamps: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let sink = Arc::clone(&stamps);
    let task = tokio::spawn(async move {
        loop {
            match consumer.recv().await {
                Ok(message) => {
                    let now = Instant::now();
                    let id = message.headers().and_then(|headers| {
                        headers
                            .iter()
                            .find(|header| header.key == "ce_id")
                            .and_then(|header| header.value)
                            .map(|value| String::from_utf8_lossy(value).into_owned())
                    });
                    if let Some(id) = id {
                        sink.lock().unwrap().entry(id).or_insert(now);
                    }
                }
                Err(error) => {
                    eprintln!("kafka consumer error: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    (stamps, task)
}

async fn amqp_consumer(
    settings: &Settings,
    queue: &str,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    let connection = Connection::connect(&settings.amqp_url, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            unique_name("consumer").as_str().into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let stamps: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let sink = Arc::clone(&stamps);
    let task = tokio::spawn(async move {
        let _connection = connection;
        while let Some(delivery) = consumer.next().await {
            let now = Instant::now();
            let Ok(delivery) = delivery else { break };
            if let Some(id) = delivery.properties.message_id() {
                sink.lock().unwrap().entry(id.to_string()).or_insert(now);
            }
        }
    });
    (stamps, task)
}

/// Commit one event per transaction at `settings.latency_rate` for
/// `settings.latency_secs` while the relay runs, and measure commit-to-ack
/// (publisher acknowledgement) and commit-to-consumer latency per event.
async fn relay_latency(
    settings: &Settings,
    publisher: Arc<dyn Publisher>,
    target: &str,
    consumed: Arc<Mutex<HashMap<String, Instant>>>,
) -> Latency {
    let database = create_database(settings).await;
    let warm_id = warm_up(publisher.as_ref(), settings, target).await;
    // The consumer is live (group joined, partitions assigned) once it has
    // seen the warm-up event.
    let ready_deadline = Instant::now() + Duration::from_secs(60);
    while !consumed.lock().unwrap().contains_key(&warm_id.to_string()) {
        assert!(
            Instant::now() < ready_deadline,
            "the consumer did not receive the warm-up event"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let opened = Arc::new(
        PostgresStore::connect(&database.url)
            .await
            .expect("open store"),
    );
    let total = settings.latency_rate * settings.latency_secs;
    let phases = Phases::new(total);
    let acks: Stamps = Arc::default();
    let store: Arc<dyn OutboxStore> = Arc::new(TimedStore {
        inner: opened.clone() as Arc<dyn OutboxStore>,
        phases: Arc::clone(&phases),
    });
    let timed: Arc<dyn Publisher> = Arc::new(TimedPublisher {
        inner: publisher,
        phases: Arc::clone(&phases),
        acks: Some(Arc::clone(&acks)),
        failures: AtomicU64::new(0),
    });
    let stop = CancellationToken::new();
    let wakeup = Wakeup::new();
    opened.watch_commits(wakeup.clone(), stop.clone());
    let relay = Relay::new(
        store,
        timed,
        relay_settings(unique_name("relay"), &RelayConfig::default()),
    )
    .with_wakeup(wakeup);
    let relay_started = Instant::now();
    let task = tokio::spawn(relay.run(stop.clone()));
    // Let the relay take its leases and go idle first.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let commits: Stamps = Arc::default();
    let round_trips: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let period = Duration::from_secs_f64(1.0 / settings.latency_rate as f64);
    let produce_started = Instant::now();
    let producers: Vec<_> = (0..LATENCY_PRODUCERS)
        .map(|worker| {
            let pool = database.pool.clone();
            let commits = Arc::clone(&commits);
            let round_trips = Arc::clone(&round_trips);
            let settings = settings.clone();
            let target = target.to_owned();
            tokio::spawn(async move {
                let writer = outbox::OutboxWriter::new();
                let mut sequence = worker;
                while sequence < total {
                    let due = produce_started + period * sequence as u32;
                    tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
                    let message = message(&settings, &target, sequence);
                    let event_id = message.event_id();
                    let mut tx = pool.begin().await.expect("begin");
                    writer
                        .enqueue_messages(&mut tx, vec![message])
                        .await
                        .expect("enqueue");
                    let before_commit = Instant::now();
                    tx.commit().await.expect("commit");
                    let committed = Instant::now();
                    commits.lock().unwrap().insert(event_id, committed);
                    round_trips.lock().unwrap().push(committed - before_commit);
                    sequence += LATENCY_PRODUCERS;
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("producer task");
    }
    let produce_elapsed = produce_started.elapsed();

    // Wait until every committed event has been consumed.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let missing = {
            let consumed = consumed.lock().unwrap();
            commits
                .lock()
                .unwrap()
                .keys()
                .filter(|id| !consumed.contains_key(&id.to_string()))
                .count()
        };
        if missing == 0 {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("    ! {missing} committed events were never consumed");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wall = relay_started.elapsed();
    stop.cancel();
    task.await.expect("relay task").expect("relay run");

    let (to_ack, to_consumer) = {
        let commits = commits.lock().unwrap();
        let acks = acks.lock().unwrap();
        let consumed = consumed.lock().unwrap();
        let to_ack = commits
            .iter()
            .filter_map(|(id, committed)| {
                acks.get(id)
                    .map(|at| at.saturating_duration_since(*committed))
            })
            .collect::<Vec<_>>();
        let to_consumer = commits
            .iter()
            .filter_map(|(id, committed)| {
                consumed
                    .get(&id.to_string())
                    .map(|at| at.saturating_duration_since(*committed))
            })
            .collect::<Vec<_>>();
        (to_ack, to_consumer)
    };
    let produced = commits.lock().unwrap().len() as u64;
    let commit_round_trip = round_trips.lock().unwrap().clone();
    let report = phases.report(wall);
    opened.pool().close().await;
    drop(opened);
    database.drop_database().await;
    Latency {
        produced,
        producer_rate: produced as f64 / produce_elapsed.as_secs_f64(),
        to_ack,
        to_consumer,
        commit_round_trip,
        phases: report,
    }
}

// ---------------------------------------------------------------------------
// The store's statements alone, without a broker

struct StoreOnly {
    batch_size: u32,
    fetch_ms: f64,
    fetch_double_ms: f64,
    serial_rate: f64,
    serial_fetch: Duration,
    serial_mark: Duration,
}

/// On a table of `settings.events` pending events: the time of one
/// `fetch_pending` of `batch_size` rows and of twice as many (what the
/// dispatcher asks for while the previous batch's mark is in flight), then a
/// serial loop of fetch + `mark_published` over the whole table, as the
/// relay would run it with an infinitely fast broker and no overlap.
async fn store_only(settings: &Settings, batch_size: u32) -> StoreOnly {
    const REPEAT: u32 = 20;
    let database = create_database(settings).await;
    enqueue_all(settings, &database.pool, "store-only").await;
    let opened = Arc::new(
        PostgresStore::connect(&database.url)
            .await
            .expect("open store"),
    );
    let store = Arc::clone(&opened);
    let relay_id = unique_name("store");
    let partition_count = store.partition_count().await.expect("partition count");
    let leases = store
        .acquire_leases(
            &relay_id,
            i64::from(partition_count),
            Duration::from_secs(600),
        )
        .await
        .expect("acquire leases");
    let partitions: Vec<i32> = leases.iter().map(|lease| lease.partition_no).collect();
    let limit = i64::from(batch_size);
    let timed_fetch = async |limit: i64| {
        let started = Instant::now();
        for _ in 0..REPEAT {
            store
                .fetch_pending(partition_count, &partitions, &[], false, limit)
                .await
                .expect("fetch");
        }
        started.elapsed().as_secs_f64() * 1e3 / f64::from(REPEAT)
    };
    let fetch_ms = timed_fetch(limit).await;
    let fetch_double_ms = timed_fetch(2 * limit).await;

    let mut serial_fetch = Duration::ZERO;
    let mut serial_mark = Duration::ZERO;
    let mut marked = 0u64;
    let started = Instant::now();
    loop {
        let fetch_started = Instant::now();
        let batch = store
            .fetch_pending(partition_count, &partitions, &[], false, limit)
            .await
            .expect("fetch");
        serial_fetch += fetch_started.elapsed();
        if batch.is_empty() {
            break;
        }
        let ids: Vec<i64> = batch.iter().map(|claimed| claimed.event.id).collect();
        let mark_started = Instant::now();
        marked += store
            .mark_published(&relay_id, partition_count, &leases, &ids)
            .await
            .expect("mark");
        serial_mark += mark_started.elapsed();
    }
    let elapsed = started.elapsed();
    assert_eq!(marked, settings.events, "store-only: rows marked");
    store.release_leases(&relay_id, &leases).await.ok();
    opened.pool().close().await;
    drop(store);
    drop(opened);
    database.drop_database().await;
    StoreOnly {
        batch_size,
        fetch_ms,
        fetch_double_ms,
        serial_rate: marked as f64 / elapsed.as_secs_f64(),
        serial_fetch,
        serial_mark,
    }
}

fn print_store_only(result: &StoreOnly) {
    println!(
        "  store alone, batch_size {}: fetch_pending {:.2} ms for {} rows, {:.2} ms for {} rows; serial fetch+mark loop {:.0} rows/s (fetch {:.2} s, mark {:.2} s)",
        result.batch_size,
        result.fetch_ms,
        result.batch_size,
        result.fetch_double_ms,
        2 * result.batch_size,
        result.serial_rate,
        result.serial_fetch.as_secs_f64(),
        result.serial_mark.as_secs_f64(),
    );
}

// ---------------------------------------------------------------------------
// Scenarios

struct BrokerFigures {
    broker: &'static str,
    raw_label: &'static str,
    raw: f64,
    raw_publisher: f64,
    drains: Vec<DrainResult>,
    ceilings: Vec<DrainResult>,
    latency: Option<Latency>,
}

fn print_drain(drain: &DrainResult, raw: f64, raw_publisher: f64) {
    println!(
        "  relay drain, batch_size {}: {:.0} events/s ({} events in {:.2} s; startup to first fetch {:.0} ms; enqueue took {:.2} s)",
        drain.batch_size,
        drain.rate,
        drain.events,
        drain.elapsed.as_secs_f64(),
        drain.startup.as_secs_f64() * 1e3,
        drain.enqueue.as_secs_f64(),
    );
    println!(
        "    ratio relay/raw client = {:.2}, relay/relay-publisher-direct = {:.2}",
        drain.rate / raw,
        drain.rate / raw_publisher
    );
    println!("    {}", drain.cpu.per_event(drain.events));
    println!("{}", drain.phases);
}

fn print_latency(latency: &mut Latency) {
    println!(
        "  latency run: {} events committed one per transaction at {:.0}/s ({} producer tasks)",
        latency.produced, latency.producer_rate, LATENCY_PRODUCERS
    );
    println!(
        "    commit -> publisher ack (broker acknowledged, as seen by the relay): {}",
        percentiles(&mut latency.to_ack)
    );
    println!(
        "    commit -> consumer receives it: {}",
        percentiles(&mut latency.to_consumer)
    );
    println!(
        "    (COMMIT round trip of the producers: {})",
        percentiles(&mut latency.commit_round_trip)
    );
    println!("{}", latency.phases);
}

async fn kafka_scenarios(settings: &Settings) -> BrokerFigures {
    println!("== PostgreSQL -> Kafka ({})", settings.kafka_brokers);
    let topic = create_topic(settings, "raw").await;
    let (raw, count, raw_cpu) = raw_rdkafka(settings, &topic).await;
    println!("  raw rdkafka FutureProducer: {raw:.0} msg/s ({count} messages)");
    println!("    {}", raw_cpu.per_event(count));
    delete_topic(settings, &topic).await;

    let topic = create_topic(settings, "pub").await;
    let publisher = kafka_publisher(settings);
    let (raw_publisher_rate, count) = raw_publisher(settings, publisher.as_ref(), &topic).await;
    println!(
        "  KafkaPublisher called directly, {PUBLISHER_CHUNK} events per call: {raw_publisher_rate:.0} events/s ({count} events)"
    );
    drop(publisher);
    delete_topic(settings, &topic).await;

    let (mut drains, mut ceilings) = (Vec::new(), Vec::new());
    for &batch_size in &settings.batch_sizes {
        for run in [DrainRun::Relay, DrainRun::ReadOnlyCeiling] {
            let topic = create_topic(settings, run.prefix()).await;
            let publisher = kafka_publisher(settings);
            let result = run
                .run(settings, publisher, &topic, batch_size, KAFKA_PROCESSES)
                .await;
            run.report(result, raw, raw_publisher_rate, &mut drains, &mut ceilings);
            delete_topic(settings, &topic).await;
        }
    }

    let latency = if settings.latency_secs > 0 {
        let topic = create_topic(settings, "latency").await;
        let (consumed, consumer) = kafka_consumer(settings, &topic);
        let mut latency =
            relay_latency(settings, kafka_publisher(settings), &topic, consumed).await;
        consumer.abort();
        print_latency(&mut latency);
        delete_topic(settings, &topic).await;
        Some(latency)
    } else {
        None
    };
    BrokerFigures {
        broker: "PostgreSQL → Kafka (tansu)",
        raw_label: "rdkafka FutureProducer",
        raw,
        raw_publisher: raw_publisher_rate,
        drains,
        ceilings,
        latency,
    }
}

async fn rabbitmq_scenarios(settings: &Settings) -> BrokerFigures {
    println!("== PostgreSQL -> RabbitMQ");
    let target = amqp_target(settings, "raw").await;
    let (raw, count, raw_cpu) = raw_lapin(settings, &target.exchange).await;
    println!("  raw lapin (confirms, mandatory, persistent): {raw:.0} msg/s ({count} messages)");
    println!("    {}", raw_cpu.per_event(count));
    target.remove().await;

    let target = amqp_target(settings, "pub").await;
    let publisher = rabbitmq_publisher(settings);
    let (raw_publisher_rate, count) =
        raw_publisher(settings, publisher.as_ref(), &target.exchange).await;
    println!(
        "  RabbitMqPublisher called directly, {PUBLISHER_CHUNK} events per call: {raw_publisher_rate:.0} events/s ({count} events)"
    );
    drop(publisher);
    target.remove().await;

    let (mut drains, mut ceilings) = (Vec::new(), Vec::new());
    for &batch_size in &settings.batch_sizes {
        for run in [DrainRun::Relay, DrainRun::ReadOnlyCeiling] {
            let target = amqp_target(settings, run.prefix()).await;
            let publisher = rabbitmq_publisher(settings);
            let result = run
                .run(
                    settings,
                    publisher,
                    &target.exchange,
                    batch_size,
                    RABBITMQ_PROCESSES,
                )
                .await;
            run.report(result, raw, raw_publisher_rate, &mut drains, &mut ceilings);
            target.remove().await;
        }
    }

    let latency = if settings.latency_secs > 0 {
        let target = amqp_target(settings, "latency").await;
        let (consumed, consumer) = amqp_consumer(settings, &target.queue).await;
        let mut latency = relay_latency(
            settings,
            rabbitmq_publisher(settings),
            &target.exchange,
            consumed,
        )
        .await;
        consumer.abort();
        print_latency(&mut latency);
        target.remove().await;
        Some(latency)
    } else {
        None
    };
    BrokerFigures {
        broker: "PostgreSQL → RabbitMQ",
        raw_label: "lapin, confirms + mandatory + persistent",
        raw,
        raw_publisher: raw_publisher_rate,
        drains,
        ceilings,
        latency,
    }
}

fn print_summary(settings: &Settings, figures: &mut [BrokerFigures]) {
    if figures.is_empty() {
        return;
    }
    println!();
    println!(
        "## Summary ({} events of ~{} bytes over {} aggregates per drain run)",
        settings.events, settings.payload_bytes, settings.aggregates
    );
    println!();
    println!(
        "| path | raw client (msg/s) | relay publisher called directly (events/s) | relay batch_size | relay drain (events/s) | relay / raw client | relay / publisher direct |"
    );
    println!("|---|---|---|---|---|---|---|");
    for broker in figures.iter() {
        for drain in &broker.drains {
            println!(
                "| {} | {:.0} ({}) | {:.0} | {} | {:.0} | {:.2} | {:.2} |",
                broker.broker,
                broker.raw,
                broker.raw_label,
                broker.raw_publisher,
                drain.batch_size,
                drain.rate,
                drain.rate / broker.raw,
                drain.rate / broker.raw_publisher
            );
        }
    }
    println!();
    println!(
        "| path | page size | read-only ceiling (events/s) | ceiling / raw client | relay drain / ceiling |"
    );
    println!("|---|---|---|---|---|");
    for broker in figures.iter() {
        for ceiling in &broker.ceilings {
            let drain = broker
                .drains
                .iter()
                .find(|drain| drain.batch_size == ceiling.batch_size);
            println!(
                "| {} | {} | {:.0} | {:.2} | {} |",
                broker.broker,
                ceiling.batch_size,
                ceiling.rate,
                ceiling.rate / broker.raw,
                drain.map_or("–".to_owned(), |drain| format!(
                    "{:.2}",
                    drain.rate / ceiling.rate
                ))
            );
        }
    }
    println!();
    println!(
        "| path | events at {}/s | commit → publisher ack | commit → consumer |",
        settings.latency_rate
    );
    println!("|---|---|---|---|");
    for broker in figures.iter_mut() {
        if let Some(latency) = &mut broker.latency {
            println!(
                "| {} | {} | {} | {} |",
                broker.broker,
                latency.produced,
                percentiles(&mut latency.to_ack),
                percentiles(&mut latency.to_consumer)
            );
        }
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
