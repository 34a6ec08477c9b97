//! The inbox consumers, in the bench's process: `RabbitMqInboxConsumer`,
//! `KafkaInboxConsumer`, `RedisInboxConsumer` and `NatsInboxConsumer` with
//! a handler that writes one invoice per
//! order in the inbox transaction, per delivery (today's behaviour) or
//! batched.

use std::future::Future;
use std::time::{Duration, Instant};

use outbox::Event;
use outbox_inbox::kafka::{KafkaConsumerConfig, KafkaInboxConsumer};
use outbox_inbox::nats::{NatsConsumerConfig, NatsInboxConsumer};
use outbox_inbox::rabbitmq::{RabbitMqConsumerConfig, RabbitMqInboxConsumer};
use outbox_inbox::redis::{RedisConsumerConfig, RedisInboxConsumer};
use outbox_inbox::{BatchItem, BoxError, ConsumerStats, Delivery, Handler, Inbox};
use outbox_testkit::{TestDatabase, unique_name};
use serde::Deserialize;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgConnection, PgPool, Postgres};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::cpu::{MachineSample, own_seconds};
use crate::database;
use crate::finished;
use crate::load::{KAFKA_GROUP_OPTIONS, KafkaTopic, NatsStream, RabbitQueue, RedisStream};
use crate::report::Measured;

/// The inbox's consumer name.
const CONSUMER: &str = "billing";
/// Connections of the consumer's pool.
const POOL_SIZE: u32 = 10;
/// Longest run before the bench gives up on a consumer.
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// Deliveries per inbox transaction in the batched cases.
pub(crate) const BATCH_SIZE: usize = 512;
/// How long a batched consumer waits to fill a batch (the inbox's
/// default).
pub(crate) const BATCH_WAIT: Duration = Duration::from_millis(20);
/// The RabbitMQ prefetch of the batched case.
const BATCHED_PREFETCH: u16 = 1_000;
/// The Kafka `max_in_flight` of the batched case: two batches, so that
/// the next fills while one commits (as the setting's documentation
/// advises).
const BATCHED_MAX_IN_FLIGHT: usize = 2 * BATCH_SIZE;

/// The `order.created` event as billing reads it.
#[derive(Debug, Deserialize, Event)]
#[event(type = "order.created", version = 1)]
pub(crate) struct OrderCreated {
    order_id: Uuid,
    amount_cents: i64,
}

/// Writes the order's invoice in the inbox transaction; a batch's
/// invoices with one statement.
pub(crate) struct Invoicing;

impl Handler<Postgres> for Invoicing {
    type Event = OrderCreated;

    async fn handle(
        &self,
        tx: &mut PgConnection,
        order: &OrderCreated,
        _delivery: &Delivery<'_>,
    ) -> Result<(), BoxError> {
        sqlx::query("INSERT INTO invoices (order_id, amount_cents) VALUES ($1, $2)")
            .bind(order.order_id)
            .bind(order.amount_cents)
            .execute(&mut *tx)
            .await?;
        Ok(())
    }

    /// A batch's invoices in one statement, as mq-bridge's `sqlx` output
    /// writes its batch in one multi-row `INSERT`.
    async fn handle_batch(
        &self,
        tx: &mut PgConnection,
        batch: &[BatchItem<'_, OrderCreated>],
    ) -> Result<(), BoxError> {
        let order_ids: Vec<Uuid> = batch.iter().map(|item| item.event.order_id).collect();
        let amounts: Vec<i64> = batch.iter().map(|item| item.event.amount_cents).collect();
        sqlx::query(
            "INSERT INTO invoices (order_id, amount_cents) \
             SELECT * FROM unnest($1::uuid[], $2::bigint[])",
        )
        .bind(&order_ids)
        .bind(&amounts)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

/// One inbox transaction per delivery, or batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    PerDelivery,
    Batched,
}

/// The RabbitMQ inbox consumer on `queue` until every delivery is settled.
pub(crate) async fn rabbitmq(
    mode: Mode,
    queue: &RabbitQueue,
    database: &TestDatabase<Postgres>,
    events: usize,
) -> Measured {
    let mut config =
        RabbitMqConsumerConfig::new(outbox_testkit::rabbitmq::amqp_url(), queue.queue.clone());
    match mode {
        Mode::PerDelivery => config.prefetch = 32,
        Mode::Batched => batched_rabbitmq(&mut config),
    }
    let label = format!("RabbitMQ inbox consumer ({mode:?})");
    let pool = consumer_pool(database).await;
    let measured = measure(&label, database, events, |stop| async move {
        let inbox = Inbox::new(pool, CONSUMER)?;
        RabbitMqInboxConsumer::new(inbox, Invoicing, config)?
            .run(stop)
            .await
    })
    .await;
    let ready = queue.ready().await;
    assert_eq!(ready, 0, "{label}: {ready} messages requeued after the run");
    measured
}

/// The Kafka inbox consumer on `topic` until every delivery is settled.
pub(crate) async fn kafka(
    mode: Mode,
    topic: &KafkaTopic,
    database: &TestDatabase<Postgres>,
    events: usize,
) -> Measured {
    let group = unique_name("peers-billing");
    let brokers = topic.brokers.split(',').map(str::to_owned).collect();
    let mut config = KafkaConsumerConfig::new(brokers, group.clone(), vec![topic.topic.clone()]);
    for (key, value) in KAFKA_GROUP_OPTIONS {
        config
            .client_options
            .insert(key.to_owned(), value.to_owned());
    }
    if mode == Mode::Batched {
        batched_kafka(&mut config);
    }
    topic.has_dead_letter_topic();
    let label = format!("Kafka inbox consumer ({mode:?})");
    let pool = consumer_pool(database).await;
    let measured = measure(&label, database, events, |stop| async move {
        let inbox = Inbox::new(pool, CONSUMER)?;
        KafkaInboxConsumer::new(inbox, Invoicing, config)?
            .run(stop)
            .await
    })
    .await;
    topic.wait_until_committed(&group, 2 * events as u64).await;
    measured
}

/// The Redis inbox consumer on `stream` until every entry is settled.
pub(crate) async fn redis(
    mode: Mode,
    stream: &RedisStream,
    database: &TestDatabase<Postgres>,
    events: usize,
) -> Measured {
    let group = unique_name("peers-billing");
    let mut config = RedisConsumerConfig::new(
        outbox_testkit::redis::redis_url(),
        group.clone(),
        [stream.stream.clone()],
    );
    match mode {
        Mode::PerDelivery => config.max_in_flight = 32,
        Mode::Batched => {
            config.max_in_flight = BATCHED_MAX_IN_FLIGHT;
            config.read_count = BATCH_SIZE;
            config.batch_size = BATCH_SIZE;
            config.batch_wait = BATCH_WAIT;
        }
    }
    let label = format!("Redis inbox consumer ({mode:?})");
    let pool = consumer_pool(database).await;
    let measured = measure(&label, database, events, |stop| async move {
        let inbox = Inbox::new(pool, CONSUMER)?;
        RedisInboxConsumer::new(inbox, Invoicing, config)?
            .run(stop)
            .await
    })
    .await;
    let pending = stream.pending(&group).await;
    assert_eq!(
        pending, 0,
        "{label}: {pending} entries left pending after the run"
    );
    measured
}

/// The NATS inbox consumer on a durable consumer of its own on `stream`
/// until every message is settled.
pub(crate) async fn nats(
    mode: Mode,
    stream: &NatsStream,
    database: &TestDatabase<Postgres>,
    events: usize,
) -> Measured {
    let durable = unique_name("peers-billing");
    let mut config = NatsConsumerConfig::new(
        &outbox_testkit::nats::nats_url(),
        stream.stream.clone(),
        durable.clone(),
    );
    match mode {
        Mode::PerDelivery => {
            config.max_in_flight = 32;
            config.fetch_size = 32;
        }
        Mode::Batched => {
            config.max_in_flight = BATCHED_MAX_IN_FLIGHT;
            config.fetch_size = BATCH_SIZE;
            config.batch_size = BATCH_SIZE;
            config.batch_wait = BATCH_WAIT;
        }
    }
    let label = format!("NATS inbox consumer ({mode:?})");
    let pool = consumer_pool(database).await;
    let measured = measure(&label, database, events, |stop| async move {
        let inbox = Inbox::new(pool, CONSUMER)?;
        NatsInboxConsumer::new(inbox, Invoicing, config)?
            .run(stop)
            .await
    })
    .await;
    let unsettled = stream.unsettled(&durable).await;
    assert_eq!(
        unsettled, 0,
        "{label}: {unsettled} messages unsettled after the run"
    );
    measured
}

/// The batched RabbitMQ settings: `BATCH_SIZE`, `BATCH_WAIT`, prefetch
/// `BATCHED_PREFETCH`.
fn batched_rabbitmq(config: &mut RabbitMqConsumerConfig) {
    config.prefetch = BATCHED_PREFETCH;
    config.batch_size = BATCH_SIZE;
    config.batch_wait = BATCH_WAIT;
}

/// The batched Kafka settings: `BATCH_SIZE`, `BATCH_WAIT`,
/// `BATCHED_MAX_IN_FLIGHT`.
fn batched_kafka(config: &mut KafkaConsumerConfig) {
    config.max_in_flight = BATCHED_MAX_IN_FLIGHT;
    config.batch_size = BATCH_SIZE;
    config.batch_wait = BATCH_WAIT;
}

async fn consumer_pool(database: &TestDatabase<Postgres>) -> PgPool {
    PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .acquire_timeout(Duration::from_secs(30))
        .connect(database.url())
        .await
        .unwrap_or_else(|error| panic!("connect the consumer's pool: {error}"))
}

/// Run the consumer `run` makes until the bench counted every delivery
/// settled (`finished`), then stop it and check its stats and the rows.
async fn measure<F, R>(
    label: &str,
    database: &TestDatabase<Postgres>,
    events: usize,
    run: F,
) -> Measured
where
    F: FnOnce(CancellationToken) -> R,
    R: Future<Output = Result<ConsumerStats, outbox_inbox::Error>> + Send + 'static,
{
    let deliveries = 2 * events as u64;
    finished::reset(deliveries);
    let first = tokio::spawn(database::first_invoice(database.pool().clone()));
    let machine = MachineSample::now();
    let cpu_before = own_seconds();
    let started = Instant::now();
    let stop = CancellationToken::new();
    let mut consumer = tokio::spawn(run(stop.clone()));
    let ended = tokio::select! {
        ended = finished::wait(RUN_LIMIT) => ended,
        joined = &mut consumer => panic!("{label} stopped before it settled every delivery: {joined:?}"),
    };
    let consumer_cpu = own_seconds() - cpu_before;
    let machine_busy = machine.busy_percent_since();
    stop.cancel();
    let stats = consumer
        .await
        .unwrap_or_else(|error| panic!("{label} panicked: {error}"))
        .unwrap_or_else(|error| panic!("{label} failed: {error}"));
    let Some(ended) = ended else {
        panic!(
            "{label}: {} of {deliveries} deliveries settled (within {RUN_LIMIT:?}, or the count \
             stalled); stats {stats:?}",
            finished::settled()
        );
    };
    first.abort();
    let first = first.await.ok();
    assert!(
        stats.finished() == deliveries
            && stats.processed == events as u64
            && stats.duplicates == events as u64
            && finished::settled() == deliveries,
        "{label}: expected {events} processed and {events} duplicates, counted {} settled; \
         stats {stats:?}",
        finished::settled()
    );
    database::verify(database.pool(), label, events, true).await;
    Measured {
        elapsed: ended - started,
        from_first_invoice: first.map(|first| ended.saturating_duration_since(first)),
        consumer_cpu,
        machine_busy,
    }
}
