//! `outbox-relay run --source logical` end to end on Kafka (tansu) and
//! RabbitMQ: events reach the broker in commit order, each aggregate in
//! order under concurrent writers, with no row written and the slot's
//! confirmed position following.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use outbox_testkit::{Collected, Received, kafka, rabbitmq, unique_name};
use sqlx::{Acquire, PgPool};

use crate::harness::{LogicalDatabase, insert_event};
use crate::support::process::{RelayProcess, wait_until};

/// Bounds the waits for deliveries; no test asserts a duration.
const DELIVERY_WAIT: Duration = Duration::from_secs(120);

/// Transactions whose events were inserted in one order and committed in
/// the reverse order.
const REVERSED_TRANSACTIONS: usize = 5;

fn spawn_relay(database: &LogicalDatabase, broker: &str) -> RelayProcess {
    database.spawn_relay(broker)
}

/// Open `REVERSED_TRANSACTIONS` transactions, insert one event (of its own
/// aggregate) in each in turn, and commit them last to first. Returns the
/// aggregates in commit order.
async fn commit_in_reverse_id_order(pool: &PgPool, topic: &str) -> Vec<String> {
    let mut transactions = Vec::new();
    let mut ids = Vec::new();
    for index in 0..REVERSED_TRANSACTIONS {
        let mut transaction = pool.begin().await.expect("begin");
        let aggregate = format!("reversed-{index}");
        let connection = transaction.acquire().await.expect("connection");
        ids.push(insert_event(connection, topic, &aggregate, index as u64).await);
        transactions.push((aggregate, transaction));
    }
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "ids ascend");
    let mut commit_order = Vec::new();
    while let Some((aggregate, transaction)) = transactions.pop() {
        transaction.commit().await.expect("commit");
        commit_order.push(aggregate);
    }
    commit_order
}

async fn wait_for_unique(collected: &Collected, expected: usize, relay: &mut RelayProcess) {
    let arrived = wait_until(DELIVERY_WAIT, || async {
        let ids: HashSet<String> = collected
            .snapshot()
            .into_iter()
            .map(|message| message.ce_id)
            .collect();
        ids.len() >= expected
    })
    .await;
    assert!(
        relay.is_running(),
        "the relay exited early:\n{}",
        relay.log()
    );
    assert!(arrived, "only {} messages arrived", collected.len());
}

/// The first arrival of each message, in arrival order.
fn first_arrivals(received: &[Received]) -> Vec<Received> {
    let mut seen = HashSet::new();
    received
        .iter()
        .filter(|message| seen.insert(message.ce_id.clone()))
        .cloned()
        .collect()
}

/// Events committed before the relay starts come in commit order, not in
/// id order; no row is written and the slot moves past them.
async fn delivers_in_commit_order(broker: &str, topic: &str, collected: Collected) {
    let database = LogicalDatabase::new().await;
    let commit_order = commit_in_reverse_id_order(database.db.pool(), topic).await;
    let written_up_to = database.current_wal_position().await;

    let mut relay = spawn_relay(&database, broker);
    wait_for_unique(&collected, REVERSED_TRANSACTIONS, &mut relay).await;
    let arrived: Vec<String> = first_arrivals(&collected.snapshot())
        .into_iter()
        .map(|message| message.aggregate_id)
        .collect();
    assert_eq!(arrived, commit_order, "commit order, not id order");
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            database.confirmed_flush().await >= written_up_to
        })
        .await,
        "the slot's confirmed position passes the published transactions"
    );
    assert_eq!(rows_written(&database).await, 0, "no row is written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_receives_events_in_commit_order() {
    let topic = unique_name("logical_order");
    let collected = kafka::topic_consumer(&topic, 1).await;
    let broker = format!("kafka://{}", kafka::brokers());
    delivers_in_commit_order(&broker, &topic, collected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rabbitmq_receives_events_in_commit_order() {
    let exchange = unique_name("logical_order");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    delivers_in_commit_order(&rabbitmq::amqp_url(), &exchange, collected).await;
}

/// Writers in parallel, the relay streaming meanwhile.
const WRITERS: usize = 8;
const TRANSACTIONS_PER_WRITER: usize = 60;
const SHARED_AGGREGATES: usize = 12;

/// Eight writers commit events of shared aggregates concurrently, each
/// aggregate's writes serialized by a lock as producers must: every
/// aggregate's events arrive in the order they were numbered under it.
async fn keeps_each_aggregate_in_order(broker: &str, topic: &str, collected: Collected) {
    let database = LogicalDatabase::new().await;
    sqlx::query(
        "CREATE TABLE aggregate_sequences (aggregate TEXT PRIMARY KEY, next BIGINT NOT NULL)",
    )
    .execute(database.db.pool())
    .await
    .expect("sequence table");
    let mut relay = spawn_relay(&database, broker);
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let pool = database.db.pool().clone();
        let topic = topic.to_owned();
        writers.push(tokio::spawn(async move {
            for transaction_index in 0..TRANSACTIONS_PER_WRITER {
                write_serialized(&pool, &topic, writer, transaction_index).await;
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    let expected = database
        .db
        .count("SELECT COUNT(*) FROM outbox_events")
        .await;
    wait_for_unique(
        &collected,
        usize::try_from(expected).unwrap_or(0),
        &mut relay,
    )
    .await;

    let mut last: HashMap<String, u64> = HashMap::new();
    for message in first_arrivals(&collected.snapshot()) {
        let sequence = message.payload["sequence"].as_u64().expect("sequence");
        let previous = last.insert(message.aggregate_id.clone(), sequence);
        assert!(
            previous.is_none_or(|previous| previous + 1 == sequence),
            "aggregate {} went from {previous:?} to {sequence}",
            message.aggregate_id
        );
    }
    assert_eq!(last.len(), SHARED_AGGREGATES);
    assert_eq!(rows_written(&database).await, 0, "no row is written");
}

/// One producer transaction: one to three events of shared aggregates,
/// each numbered under the aggregate's row lock (taken in name order).
async fn write_serialized(pool: &PgPool, topic: &str, writer: usize, transaction_index: usize) {
    let first = (writer * 7 + transaction_index * 5) % SHARED_AGGREGATES;
    let count = 1 + (writer + transaction_index) % 3;
    let mut aggregates: Vec<String> = (0..count)
        .map(|offset| format!("shared-{:02}", (first + offset * 4) % SHARED_AGGREGATES))
        .collect();
    aggregates.sort();
    aggregates.dedup();
    let mut transaction = pool.begin().await.expect("begin");
    for aggregate in aggregates {
        let sequence: i64 = sqlx::query_scalar(
            "INSERT INTO aggregate_sequences (aggregate, next) VALUES ($1, 1) \
             ON CONFLICT (aggregate) DO UPDATE SET next = aggregate_sequences.next + 1 \
             RETURNING next - 1",
        )
        .bind(&aggregate)
        .fetch_one(&mut *transaction)
        .await
        .expect("number the event");
        let connection = transaction.acquire().await.expect("connection");
        insert_event(connection, topic, &aggregate, sequence as u64).await;
    }
    transaction.commit().await.expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_keeps_each_aggregate_in_order_under_concurrent_writers() {
    let topic = unique_name("logical_writers");
    let collected = kafka::topic_consumer(&topic, 3).await;
    let broker = format!("kafka://{}", kafka::brokers());
    keeps_each_aggregate_in_order(&broker, &topic, collected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rabbitmq_keeps_each_aggregate_in_order_under_concurrent_writers() {
    let exchange = unique_name("logical_writers");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    keeps_each_aggregate_in_order(&rabbitmq::amqp_url(), &exchange, collected).await;
}

/// Rows the relay changed: any not pending, or carrying an error.
async fn rows_written(database: &LogicalDatabase) -> i64 {
    database
        .db
        .count("SELECT COUNT(*) FROM outbox_events WHERE state <> 'pending' OR last_error IS NOT NULL OR attempts > 0")
        .await
}
