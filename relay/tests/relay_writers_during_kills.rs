//! Writers keep committing while the relay is SIGKILLed at random moments
//! and started again: on every backend, to Kafka and to RabbitMQ, nothing
//! is lost and each aggregate's events arrive in order.

mod support;

use std::time::{Duration, SystemTime};

use outbox_testkit::{Collected, TestBackend, TestDatabase, kafka, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::workload::{ShipmentMoved, check_delivery};

/// Writers, each with its own aggregates (a producer serializes the writes
/// of one aggregate), committing one event per transaction.
const WRITERS: u64 = 3;
const EVENTS_PER_WRITER: u64 = 400;
const AGGREGATES_PER_WRITER: u64 = 10;
/// Pause between two commits of one writer: the writers run for about
/// 15 s, through the kills.
const COMMIT_PAUSE: Duration = Duration::from_millis(35);
const MAX_KILLS: usize = 5;
const MIN_KILLS: usize = 2;

enum Broker {
    Kafka,
    RabbitMq,
}

impl Broker {
    async fn consume(&self, target: &str) -> Collected {
        match self {
            Broker::Kafka => kafka::topic_consumer(target, 3).await,
            Broker::RabbitMq => rabbitmq::exchange_consumer(target).await,
        }
    }

    fn url(&self) -> String {
        match self {
            Broker::Kafka => format!("kafka://{}", kafka::brokers()),
            Broker::RabbitMq => rabbitmq::amqp_url(),
        }
    }
}

/// A pseudo-random delay between `low` and `high` milliseconds.
fn random_millis(low: u64, high: u64) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    Duration::from_millis(low + u64::from(nanos) % (high - low))
}

/// One writer: `EVENTS_PER_WRITER` events, one per transaction, with a
/// short pause between commits. Returns the event ids in commit order.
async fn write<DB: outbox::Backend>(
    pool: sqlx::Pool<DB>,
    target: String,
    writer: u64,
) -> Vec<uuid::Uuid> {
    let mut ids = Vec::with_capacity(EVENTS_PER_WRITER as usize);
    for sequence in 0..EVENTS_PER_WRITER {
        let event = ShipmentMoved {
            shipment: format!("w{writer}-{}", sequence % AGGREGATES_PER_WRITER),
            sequence,
        };
        let message = outbox::OutboxMessage::new(
            "shipment.moved",
            "/shipments",
            "shipment",
            event.shipment.clone(),
            target.as_str(),
            serde_json::value::to_raw_value(&event).expect("payload"),
        );
        let mut tx = pool.begin().await.expect("begin");
        let written = outbox::OutboxWriter::new()
            .enqueue_messages(&mut tx, vec![message])
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
        ids.extend(written);
        tokio::time::sleep(COMMIT_PAUSE).await;
    }
    ids
}

async fn writers_during_kills<DB: outbox::Backend + TestBackend>(
    db: TestDatabase<DB>,
    broker: Broker,
) {
    let target = unique_name("writers-kills");
    let collected = broker.consume(&target).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| tokio::spawn(write(db.pool().clone(), target.clone(), writer)))
        .collect();

    let published = || db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'");
    let mut kills = 0;
    while kills < MAX_KILLS && writers.iter().any(|writer| !writer.is_finished()) {
        let kill = kills;
        let relay = RelayProcess::spawn(db.url(), &broker.url(), FAST_CONFIG);
        let before = published().await;
        let progressed = wait_until(Duration::from_secs(60), || async {
            published().await > before
        })
        .await;
        assert!(progressed, "relay {kill} never published:\n{}", relay.log());
        tokio::time::sleep(random_millis(100, 1_500)).await;
        relay.kill9();
        kills += 1;
    }
    assert!(
        kills >= MIN_KILLS,
        "only {kills} kills landed while the writers ran: the run is too short"
    );
    let mut enqueued = Vec::new();
    for writer in writers {
        enqueued.extend(writer.await.expect("writer"));
    }
    assert_eq!(enqueued.len() as u64, WRITERS * EVENTS_PER_WRITER);

    let mut relay = RelayProcess::spawn(db.url(), &broker.url(), FAST_CONFIG);
    let drained = wait_until(Duration::from_secs(120), || async {
        published().await == enqueued.len() as i64
    })
    .await;
    assert!(
        drained,
        "only {} of {} events were published:\n{}",
        published().await,
        enqueued.len(),
        relay.log()
    );
    let arrived = wait_until(Duration::from_secs(60), || async {
        let ids: std::collections::HashSet<String> = collected
            .snapshot()
            .into_iter()
            .map(|message| message.ce_id)
            .collect();
        ids.len() >= enqueued.len()
    })
    .await;
    assert!(arrived, "not every published event reached the consumer");
    check_delivery(&enqueued, &collected.snapshot());
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|status| status.success()),
        "the last relay did not exit 0: {status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_kafka() {
    writers_during_kills(outbox_testkit::postgres().await, Broker::Kafka).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_rabbitmq() {
    writers_during_kills(outbox_testkit::postgres().await, Broker::RabbitMq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_to_kafka() {
    writers_during_kills(outbox_testkit::mysql().await, Broker::Kafka).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_to_rabbitmq() {
    writers_during_kills(outbox_testkit::mysql().await, Broker::RabbitMq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_to_kafka() {
    writers_during_kills(outbox_testkit::sqlite().await, Broker::Kafka).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_to_rabbitmq() {
    writers_during_kills(outbox_testkit::sqlite().await, Broker::RabbitMq).await;
}
