//! Writers keep committing while the relay is SIGKILLed at random moments
//! and started again: on every backend, to Kafka and to RabbitMQ (and from
//! PostgreSQL to Redis Streams, on one server and on a cluster with
//! partitioned streams, and to NATS JetStream through a subject template),
//! with the
//! mark that updates the rows and the one that deletes them
//! (`retention.published = "0s"`), nothing is lost and each aggregate's
//! events arrive in order. On NATS the stream holds each event once: the
//! relays' republications fall inside its duplicate window.

mod support;

use std::time::Duration;

use outbox_testkit::{
    Collected, TestBackend, TestDatabase, kafka, nats as nats_kit, rabbitmq, redis as redis_kit,
    unique_name,
};
use support::http::endpoint_address;
use support::process::{FAST_CONFIG, RelayProcess, random_millis, wait_until};
use support::workload::{
    WriterPlan, check_delivery, events_without_failures, join_writers, spawn_writers,
};
use tokio_util::sync::CancellationToken;

/// Writers, each with its own aggregates, committing one event per
/// transaction until the relay has been killed `KILLS` times (and at least
/// `EVENTS_PER_WRITER` each): every kill lands while they write, however
/// fast the machine.
const WRITERS: u64 = 3;
const EVENTS_PER_WRITER: u64 = 200;
const AGGREGATES_PER_WRITER: u64 = 10;
const COMMIT_PAUSE: Duration = Duration::from_millis(35);
const KILLS: usize = 5;
/// The NATS stream's duplicate window: a message whose `Nats-Msg-Id` it
/// stored within this long before is dropped. Longer than the whole test
/// can run (each of the 5 kills waits at most 60 s for progress and 1.5 s
/// more, the drain 120 s and the arrival 60 s: under 8 minutes), so every
/// republication by a restarted relay falls inside it, and the stream
/// must hold each event exactly once.
const NATS_DUPLICATE_WINDOW: Duration = Duration::from_secs(10 * 60);

enum Broker {
    Kafka,
    RabbitMq,
    /// One Redis server, a stream per topic.
    Redis,
    /// The Redis Cluster, each topic spread over partitioned streams
    /// (`<topic>:p:0` ... `<topic>:p:3`), which hash to different slots.
    RedisCluster,
    /// A JetStream stream of the test's own taking `<topic>.>`, each event
    /// published to `<topic>.<aggregate_type>`.
    Nats,
}

/// Streams per topic on the cluster.
const REDIS_PARTITIONS: u32 = 4;

impl Broker {
    async fn consume(&self, target: &str) -> Collected {
        match self {
            Broker::Kafka => kafka::topic_consumer(target, 3).await,
            Broker::RabbitMq => rabbitmq::exchange_consumer(target).await,
            Broker::Redis => {
                redis_kit::require_redis().await;
                redis_kit::stream_consumer(target)
            }
            Broker::RedisCluster => {
                redis_kit::require_redis_cluster().await;
                redis_kit::cluster_stream_consumer(
                    (0..REDIS_PARTITIONS)
                        .map(|partition| format!("{target}:p:{partition}"))
                        .collect(),
                )
            }
            Broker::Nats => {
                let jetstream = nats_kit::require_nats().await;
                // Deleted by `clean_up`, by name.
                drop(
                    nats_kit::TestStream::create_with(
                        &jetstream,
                        async_nats::jetstream::stream::Config {
                            name: target.to_owned(),
                            subjects: vec![format!("{target}.>")],
                            duplicate_window: NATS_DUPLICATE_WINDOW,
                            ..Default::default()
                        },
                    )
                    .await,
                );
                nats_kit::stream_consumer(jetstream, target.to_owned())
            }
        }
    }

    /// What the broker stored of `events` events published during kills:
    /// on NATS, the stream holds each event once, its duplicates dropped
    /// within [`NATS_DUPLICATE_WINDOW`]. The other brokers keep what a
    /// killed relay published again.
    async fn check_stored_once(&self, target: &str, events: usize) {
        if let Broker::Nats = self {
            let jetstream = nats_kit::require_nats().await;
            let stored = nats_kit::TestStream::existing(&jetstream, target)
                .message_count()
                .await;
            assert_eq!(
                stored, events as u64,
                "the stream holds {stored} messages for {events} events: a republication \
                 inside the duplicate window was stored again"
            );
        }
    }

    /// Remove what `consume` made on the broker.
    async fn clean_up(&self, target: &str) {
        if let Broker::Nats = self {
            let jetstream = nats_kit::require_nats().await;
            let _ = jetstream.delete_stream(target).await;
        }
    }

    fn url(&self) -> String {
        match self {
            Broker::Kafka => format!("kafka://{}", kafka::brokers()),
            Broker::RabbitMq => rabbitmq::amqp_url(),
            Broker::Redis => redis_kit::redis_url(),
            Broker::RedisCluster => redis_kit::cluster_broker_url(),
            Broker::Nats => nats_kit::nats_url(),
        }
    }

    /// The broker's own part of the config.
    fn config(&self, target: &str) -> String {
        match self {
            Broker::RedisCluster => format!(
                "[redis.streams.\"{target}\"]\nkey = \"{{topic}}:p:{{partition}}\"\npartitions = {REDIS_PARTITIONS}\n"
            ),
            Broker::Nats => format!(
                "[nats.subjects.\"{target}\"]\nsubject = \"{{topic}}.{{aggregate_type}}\"\n"
            ),
            _ => String::new(),
        }
    }
}

/// How the relay settles acknowledged events.
#[derive(Clone, Copy)]
enum Mark {
    /// `state = 'published'` (the default).
    Update,
    /// Deleted in the mark's statement: `retention.published = "0s"`.
    Delete,
}

impl Mark {
    fn config(self) -> String {
        match self {
            Mark::Update => FAST_CONFIG.to_owned(),
            Mark::Delete => format!("{FAST_CONFIG}\n[retention]\npublished = \"0s\"\n"),
        }
    }
}

async fn writers_during_kills<DB: outbox::Backend + TestBackend>(
    db: TestDatabase<DB>,
    broker: Broker,
    mark: Mark,
) {
    let target = unique_name("writers-kills");
    let config = format!("{}\n{}", mark.config(), broker.config(&target));
    let collected = broker.consume(&target).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let stop_writing = CancellationToken::new();
    let plan = WriterPlan {
        writer: 0,
        aggregates: AGGREGATES_PER_WRITER,
        at_least: EVENTS_PER_WRITER,
        pause: COMMIT_PAUSE,
    };
    let writers = spawn_writers(db.pool(), &target, WRITERS, plan, &stop_writing);

    let delivered = || collected.distinct_ids().len();
    for kill in 0..KILLS {
        let relay = RelayProcess::spawn(db.url(), &broker.url(), &config);
        let before = delivered();
        let progressed =
            wait_until(Duration::from_secs(60), || async { delivered() > before }).await;
        assert!(progressed, "relay {kill} never published:\n{}", relay.log());
        tokio::time::sleep(random_millis(100, 1_500)).await;
        relay.kill9();
    }
    stop_writing.cancel();
    let enqueued = events_without_failures(join_writers(writers).await);
    assert!(enqueued.len() as u64 >= WRITERS * EVENTS_PER_WRITER);

    let mut relay = RelayProcess::spawn(db.url(), &broker.url(), &config);
    // The relays killed before may have published everything already: wait
    // until this one has started (it logs its endpoint once it catches
    // signals), so the SIGTERM below reaches a relay, not a process still
    // loading.
    endpoint_address(&relay).await;
    // Every event settled: marked published, or deleted.
    let settled = || async {
        match mark {
            Mark::Update => {
                db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'")
                    .await
            }
            Mark::Delete => {
                enqueued.len() as i64 - db.count("SELECT COUNT(*) FROM outbox_events").await
            }
        }
    };
    let drained = wait_until(Duration::from_secs(120), || async {
        settled().await == enqueued.len() as i64
    })
    .await;
    assert!(
        drained,
        "only {} of {} events were settled:\n{}",
        settled().await,
        enqueued.len(),
        relay.log()
    );
    let arrived = wait_until(Duration::from_secs(60), || async {
        collected.distinct_ids().len() >= enqueued.len()
    })
    .await;
    assert!(arrived, "not every published event reached the consumer");
    check_delivery(&enqueued, &collected.snapshot());
    broker.check_stored_once(&target, enqueued.len()).await;
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|status| status.success()),
        "the last relay did not exit 0: {status:?}\n{}",
        relay.log()
    );
    broker.clean_up(&target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_redis() {
    writers_during_kills(
        outbox_testkit::postgres().await,
        Broker::Redis,
        Mark::Update,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_nats() {
    writers_during_kills(outbox_testkit::postgres().await, Broker::Nats, Mark::Update).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_redis_cluster_partitioned_streams() {
    writers_during_kills(
        outbox_testkit::postgres().await,
        Broker::RedisCluster,
        Mark::Update,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_to_redis_deleting_on_publish() {
    writers_during_kills(outbox_testkit::sqlite().await, Broker::Redis, Mark::Delete).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_kafka() {
    writers_during_kills(
        outbox_testkit::postgres().await,
        Broker::Kafka,
        Mark::Update,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_rabbitmq() {
    writers_during_kills(
        outbox_testkit::postgres().await,
        Broker::RabbitMq,
        Mark::Update,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_to_kafka() {
    writers_during_kills(outbox_testkit::mysql().await, Broker::Kafka, Mark::Update).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_to_rabbitmq() {
    writers_during_kills(
        outbox_testkit::mysql().await,
        Broker::RabbitMq,
        Mark::Update,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_to_kafka() {
    writers_during_kills(outbox_testkit::sqlite().await, Broker::Kafka, Mark::Update).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_to_rabbitmq() {
    writers_during_kills(
        outbox_testkit::sqlite().await,
        Broker::RabbitMq,
        Mark::Update,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_rabbitmq_deleting_on_publish() {
    writers_during_kills(
        outbox_testkit::postgres().await,
        Broker::RabbitMq,
        Mark::Delete,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_to_kafka_deleting_on_publish() {
    writers_during_kills(outbox_testkit::mysql().await, Broker::Kafka, Mark::Delete).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_to_kafka_deleting_on_publish() {
    writers_during_kills(outbox_testkit::sqlite().await, Broker::Kafka, Mark::Delete).await;
}
