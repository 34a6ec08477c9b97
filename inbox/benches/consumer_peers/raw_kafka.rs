//! The Kafka reference: an rdkafka `StreamConsumer` that does the same
//! invoice writes without the inbox. It takes up to `BATCH_SIZE` messages
//! (waiting at most `BATCH_WAIT` after the first for more), reads each
//! payload's order, writes the batch's invoices in one plain transaction
//! with one `INSERT ... SELECT * FROM unnest(...) ON CONFLICT (order_id)
//! DO NOTHING` (the table's key is its only deduplication), commits it,
//! then commits the batch's offsets (asynchronously; synchronously after
//! the last batch).

use std::collections::BTreeMap;
use std::time::Duration;

use outbox_testkit::{TestDatabase, unique_name};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::Deserialize;
use sqlx::Postgres;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

use crate::database;
use crate::inbox_consumer::{BATCH_SIZE, BATCH_WAIT};
use crate::load::{KAFKA_GROUP_OPTIONS, KafkaTopic};
use crate::report::{Measured, Stopwatch};

/// Longest wait for the next message before the bench gives up.
const RECEIVE_LIMIT: Duration = Duration::from_secs(60);

/// A batch's invoices in one statement, as the batched inbox's handler
/// writes them; the table's key is the only deduplication.
const INSERT: &str = "INSERT INTO invoices (order_id, amount_cents) \
     SELECT * FROM unnest($1::uuid[], $2::bigint[]) ON CONFLICT (order_id) DO NOTHING";

/// The payload, as the handler reads it.
#[derive(Deserialize)]
struct Invoice {
    order_id: Uuid,
    amount_cents: i64,
}

/// Read `message`'s invoice into `invoices`, and its offset into `offsets`
/// (the next offset to commit, per partition).
fn take(
    message: &BorrowedMessage<'_>,
    invoices: &mut Vec<Invoice>,
    offsets: &mut BTreeMap<i32, i64>,
) {
    let payload = message.payload().unwrap_or_default();
    let invoice: Invoice = serde_json::from_slice(payload)
        .unwrap_or_else(|error| panic!("raw consumer: a payload that is not an order: {error}"));
    invoices.push(invoice);
    let next = offsets.entry(message.partition()).or_default();
    *next = (*next).max(message.offset() + 1);
}

/// Consume every delivery of `topic` into `database`.
pub(crate) async fn run(
    topic: &KafkaTopic,
    database: &TestDatabase<Postgres>,
    events: usize,
) -> Measured {
    let deliveries = 2 * events;
    let group = unique_name("peers-raw");
    let stopwatch = Stopwatch::start(database.pool());

    let pool = PgPoolOptions::new()
        .max_connections(10)
        .connect(database.url())
        .await
        .unwrap_or_else(|error| panic!("raw consumer: connect the pool: {error}"));
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &topic.brokers)
        .set("group.id", &group)
        .set("client.id", "outbox-bench-raw")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    for (key, value) in KAFKA_GROUP_OPTIONS {
        config.set(key, value);
    }
    let consumer: StreamConsumer = config
        .create()
        .unwrap_or_else(|error| panic!("raw consumer: create the Kafka consumer: {error}"));
    consumer
        .subscribe(&[topic.topic.as_str()])
        .unwrap_or_else(|error| panic!("raw consumer: subscribe to {}: {error}", topic.topic));

    let mut settled = 0;
    while settled < deliveries {
        let mut invoices = Vec::with_capacity(BATCH_SIZE);
        let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
        match tokio::time::timeout(RECEIVE_LIMIT, consumer.recv()).await {
            Ok(Ok(message)) => take(&message, &mut invoices, &mut offsets),
            Ok(Err(error)) => panic!("raw consumer: Kafka: {error}"),
            Err(_) => panic!(
                "raw consumer: no message for {RECEIVE_LIMIT:?} after {settled} of {deliveries}"
            ),
        }
        let deadline = tokio::time::Instant::now() + BATCH_WAIT;
        while invoices.len() < BATCH_SIZE {
            match tokio::time::timeout_at(deadline, consumer.recv()).await {
                Ok(Ok(message)) => take(&message, &mut invoices, &mut offsets),
                Ok(Err(error)) => panic!("raw consumer: Kafka: {error}"),
                Err(_) => break,
            }
        }
        let order_ids: Vec<Uuid> = invoices.iter().map(|invoice| invoice.order_id).collect();
        let amounts: Vec<i64> = invoices
            .iter()
            .map(|invoice| invoice.amount_cents)
            .collect();
        let mut transaction = pool.begin().await.expect("raw consumer: begin");
        sqlx::query(INSERT)
            .bind(&order_ids)
            .bind(&amounts)
            .execute(&mut *transaction)
            .await
            .expect("raw consumer: insert the batch's invoices");
        transaction.commit().await.expect("raw consumer: commit");
        settled += invoices.len();
        let mut list = TopicPartitionList::new();
        for (partition, next) in &offsets {
            list.add_partition_offset(&topic.topic, *partition, Offset::Offset(*next))
                .expect("raw consumer: an offset to commit");
        }
        let mode = if settled >= deliveries {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        consumer
            .commit(&list, mode)
            .unwrap_or_else(|error| panic!("raw consumer: commit offsets: {error}"));
    }
    let measured = stopwatch.stop().await;
    drop(consumer);
    pool.close().await;
    assert_eq!(
        settled, deliveries,
        "raw consumer: read more messages than were published"
    );
    database::verify(database.pool(), "raw Kafka consumer", events, false).await;
    topic.wait_until_committed(&group, deliveries as u64).await;
    measured
}
