//! Consumer throughput as a user sees it: the inbox consumers, one
//! transaction per delivery and batched, beside mq-bridge's inbox on
//! RabbitMQ, beside a raw rdkafka consumer on Kafka, beside a raw
//! `XREADGROUP` + `XACK` consumer on Redis Streams, and beside a raw
//! async-nats pull consumer on NATS JetStream.
//!
//! ```sh
//! cargo bench -p outbox-inbox --bench consumer_peers -- --brokers rabbitmq --rounds 2
//! cargo bench -p outbox-inbox --bench consumer_peers -- --brokers kafka --rounds 3
//! cargo bench -p outbox-inbox --bench consumer_peers -- --brokers rabbitmq --cases inbox,mq-bridge
//! cargo bench -p outbox-inbox --bench consumer_peers -- --brokers redis --rounds 3
//! cargo bench -p outbox-inbox --bench consumer_peers -- --brokers nats --rounds 3
//! ```
//!
//! Flags: `--brokers rabbitmq,kafka,redis,nats` (RabbitMQ and Kafka by
//! default), `--rounds N` (2), `--cases` out of `inbox`, `batched`,
//! `mq-bridge` (RabbitMQ) and `raw` (Kafka, Redis, NATS) (all by default),
//! `--events N` (10,000).
//!
//! **The workload.** 10,000 unique `order.created` events, each published
//! twice, in a shuffled order: 20,000 persistent deliveries loaded before
//! the consumer starts, by the relay's own publishers
//! (`outbox_relay::publish::{RabbitMqPublisher, KafkaPublisher}`), so they
//! are CloudEvents in binary mode exactly as `outbox-relay` sends them. A
//! RabbitMQ run has a durable topic exchange and a durable queue bound to
//! it of its own; a Kafka run a topic of its own with 4 partitions (key:
//! the order id). Every consumer writes one invoice per order into
//! `invoices (order_id uuid PRIMARY KEY, amount_cents bigint)` in a fresh
//! PostgreSQL database (from `outbox-testkit`, migrated with
//! `outbox::migrate`); after each run the bench checks that exactly 10,000
//! invoices, one per order, are there, and fails loudly otherwise. The
//! database, the queue, topic or stream and the dead-letter objects the consumers
//! declare are deleted after each run.
//!
//! **The cases.**
//! - RabbitMQ, `RabbitMqInboxConsumer` per delivery (today's default):
//!   prefetch 32, a pool of 10 connections, a `Handler<Postgres>` that
//!   inserts the invoice in the inbox transaction.
//! - RabbitMQ, the same consumer batched: `batch_size` 512, prefetch 1000;
//!   the handler's `handle_batch` writes a batch's invoices with one
//!   `INSERT ... SELECT * FROM unnest(...)`, as mq-bridge's output writes
//!   one multi-row `INSERT` per batch
//!   (`batch_wait` 20 ms, the default, in both batched cases and the raw
//!   consumer).
//! - RabbitMQ, mq-bridge 1.2.0's inbox (`mq_bridge_inbox.py`, a process of
//!   its own, see `mq_bridge.rs`): AMQP input with `prefetch_count` 1000,
//!   the `deduplication` middleware with its store in the same PostgreSQL
//!   database (table `mqb_dedup`) keyed on the payload's `order_id`, and
//!   the `sqlx` output into `invoices` (`columns: auto`), `batch_size` 512.
//!   The reference of the RabbitMQ ratios.
//! - Kafka, `KafkaInboxConsumer` per delivery (`max_in_flight` 32) and
//!   batched (`batch_size` 512, `max_in_flight` 1024).
//! - Kafka, a raw rdkafka consumer (`raw_kafka.rs`): the same invoice
//!   writes without the inbox, one plain transaction per batch of up to
//!   512, `ON CONFLICT DO NOTHING` on the order id, offsets committed after
//!   each batch. The reference of the Kafka ratios (target ≥ 0.8 for the
//!   batched inbox).
//! - Redis Streams: one stream of the run's own, loaded with `XADD`s of
//!   the relay's wire format (`outbox_testkit::redis::RelayEntry`), not
//!   through the relay. `RedisInboxConsumer` per entry (`max_in_flight`
//!   32) and batched (`batch_size` and `read_count` 512, `max_in_flight`
//!   1024), beside a raw consumer (`raw_redis.rs`): `XREADGROUP` of up to
//!   512 entries, the same unnest `INSERT ... ON CONFLICT DO NOTHING` in
//!   one plain transaction, then `XACK` of the batch. The reference of the
//!   Redis ratios (target ≥ 0.8 for the batched inbox).
//! - NATS JetStream: a stream of the run's own (file storage) taking one
//!   subject, loaded with messages of the relay's wire format (`ce-`
//!   headers, `Content-Type`) published by the bench, without
//!   `Nats-Msg-Id` (the duplicate window would drop the second copies);
//!   a dead-letter stream takes `<subject>.dlq`. `NatsInboxConsumer` per
//!   message (`max_in_flight` and `fetch_size` 32) and batched
//!   (`batch_size` and `fetch_size` 512, `max_in_flight` 1024), each on a
//!   durable consumer of its own, beside a raw consumer (`raw_nats.rs`): a
//!   durable pull consumer fetching up to 512 messages, the same unnest
//!   `INSERT ... ON CONFLICT DO NOTHING` in one plain transaction, then
//!   every message acknowledged (each confirmed by the server, as the
//!   inbox's are). The reference of the NATS ratios (target ≥ 0.8 for the
//!   batched inbox).
//!
//! **What is timed.** From the consumer's start (its `run` called; for
//! mq-bridge, its process spawned) to its last delivery settled: for the
//! inbox consumers, the 20,000th `event processed` / `duplicate event
//! skipped` of the delivery policy (`finished.rs`); for the raw consumer,
//! its last batch committed; for mq-bridge, the moment the bench saw the
//! queue with nothing ready and every invoice written (polled every 10
//! ms): a lower bound of its end, since up to its prefetch of duplicates
//! may still be unacknowledged then, so the RabbitMQ ratios favour
//! mq-bridge (the bench prints when `rabbitmqctl` saw every delivery
//! acknowledged, an upper bound). The cases alternate within each round (their
//! order reversed every other round), at least 2 rounds; the report gives
//! each round, the medians, and each round's ratio to the reference of
//! the same round. Also: the rate from the first invoice committed, the
//! consumer's CPU per delivery (`/proc/self/stat` for the in-process
//! consumers, so the bench's own polling is in it; `/proc/<pid>/stat` of
//! the Python process for mq-bridge, its start-up included) and the busy
//! share of the machine's cores over the timed span.
//!
//! **What it needs.** The test services (`scripts/test.sh
//! --services-only`): PostgreSQL (`OUTBOX_TEST_POSTGRES_URL`), RabbitMQ
//! (`OUTBOX_TEST_AMQP_URL`, and `rabbitmqctl` for the final queue check)
//! and the Kafka API broker (`OUTBOX_TEST_KAFKA_BROKERS`), and Redis
//! (`OUTBOX_TEST_REDIS_URL`) for `--brokers redis`, and NATS with
//! JetStream (`OUTBOX_TEST_NATS_URL`) for `--brokers nats`. A service that
//! does not answer fails the bench naming it. mq-bridge needs `python3`
//! with `venv`, and PyPI the first time (see `mq_bridge.rs`).

mod cpu;
mod database;
mod finished;
mod inbox_consumer;
mod load;
mod mq_bridge;
mod raw_kafka;
mod raw_nats;
mod raw_redis;
mod report;
mod settings;

use inbox_consumer::Mode;
use load::{KafkaTopic, NatsStream, RabbitQueue, RedisStream};
use report::{Measured, Report};
use settings::{Broker, Case, Settings};

#[tokio::main]
async fn main() {
    finished::install();
    let settings = Settings::load();
    let mut report = Report::new(settings.deliveries(), settings.rounds);
    let python = (settings.brokers.contains(&Broker::RabbitMq) && settings.runs(Case::MqBridge))
        .then(mq_bridge::python);
    println!(
        "consumer_peers: {} events, each delivered twice; {} round(s)",
        settings.events, settings.rounds
    );
    for &broker in &settings.brokers {
        let cases: Vec<Case> = Case::of(broker)
            .iter()
            .copied()
            .filter(|case| settings.runs(*case))
            .collect();
        for round in 1..=settings.rounds {
            let mut order = cases.clone();
            if round % 2 == 0 {
                order.reverse();
            }
            for case in order {
                let measured = run(case, &settings, python.as_deref()).await;
                println!(
                    "  {broker} round {round}: {}: {:.0} deliveries/s ({:.2} s, consumer CPU {:.2} s, machine {:.0}% busy)",
                    case.label(),
                    settings.deliveries() as f64 / measured.elapsed.as_secs_f64(),
                    measured.elapsed.as_secs_f64(),
                    measured.consumer_cpu,
                    measured.machine_busy,
                );
                report.add(broker, case, round, measured);
            }
        }
    }
    println!();
    for &broker in &settings.brokers {
        if let Some(table) = report.table(broker) {
            println!("{table}");
        }
    }
}

/// One run of `case` on a fresh database and a fresh queue or topic.
async fn run(case: Case, settings: &Settings, python: Option<&std::path::Path>) -> Measured {
    let events = settings.events;
    let database = database::fresh().await;
    match case {
        Case::RabbitInbox | Case::RabbitInboxBatched | Case::MqBridge => {
            let queue = RabbitQueue::load(events).await;
            match case {
                Case::RabbitInbox => {
                    inbox_consumer::rabbitmq(Mode::PerDelivery, &queue, &database, events).await
                }
                Case::RabbitInboxBatched => {
                    inbox_consumer::rabbitmq(Mode::Batched, &queue, &database, events).await
                }
                _ => {
                    let python = python.expect("mq-bridge's Python was set up");
                    mq_bridge::consume(python, &queue, &database, events).await
                }
            }
        }
        Case::KafkaInbox | Case::KafkaInboxBatched | Case::RawKafka => {
            let topic = KafkaTopic::load(events).await;
            match case {
                Case::KafkaInbox => {
                    inbox_consumer::kafka(Mode::PerDelivery, &topic, &database, events).await
                }
                Case::KafkaInboxBatched => {
                    inbox_consumer::kafka(Mode::Batched, &topic, &database, events).await
                }
                _ => raw_kafka::run(&topic, &database, events).await,
            }
        }
        Case::RedisInbox | Case::RedisInboxBatched | Case::RawRedis => {
            let stream = RedisStream::load(events).await;
            match case {
                Case::RedisInbox => {
                    inbox_consumer::redis(Mode::PerDelivery, &stream, &database, events).await
                }
                Case::RedisInboxBatched => {
                    inbox_consumer::redis(Mode::Batched, &stream, &database, events).await
                }
                _ => raw_redis::run(&stream, &database, events).await,
            }
        }
        Case::NatsInbox | Case::NatsInboxBatched | Case::RawNats => {
            let stream = NatsStream::load(events).await;
            match case {
                Case::NatsInbox => {
                    inbox_consumer::nats(Mode::PerDelivery, &stream, &database, events).await
                }
                Case::NatsInboxBatched => {
                    inbox_consumer::nats(Mode::Batched, &stream, &database, events).await
                }
                _ => raw_nats::run(&stream, &database, events).await,
            }
        }
    }
}
