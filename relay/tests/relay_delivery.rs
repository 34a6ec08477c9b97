//! The relay binary end to end: every committed event reaches the real
//! broker with the attributes of `docs/wire-format.md`, in order per
//! aggregate.

mod support;

use std::time::Duration;

use outbox_testkit::{Collected, Received, kafka, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::workload::{check_delivery, enqueue_events};

const EVENTS: u64 = 10_000;
const AGGREGATES: u64 = 100;

async fn wait_for_unique(collected: &Collected, expected: usize, relay: &mut RelayProcess) {
    let arrived = wait_until(Duration::from_secs(180), || async {
        let ids: std::collections::HashSet<String> = collected
            .snapshot()
            .into_iter()
            .map(|message| message.ce_id)
            .collect();
        ids.len() >= expected
    })
    .await;
    assert!(relay.is_running(), "the relay exited early");
    assert!(arrived, "only {} messages arrived", collected.len());
}

fn check_kafka_attributes(message: &Received) {
    let headers = &message.headers;
    assert_eq!(
        headers.get("ce_specversion").map(String::as_str),
        Some("1.0")
    );
    assert_eq!(
        headers.get("ce_type").map(String::as_str),
        Some("shipment.moved")
    );
    assert_eq!(
        headers.get("ce_source").map(String::as_str),
        Some("/shipments")
    );
    assert_eq!(
        headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert_eq!(
        headers.get("ce_aggregatetype").map(String::as_str),
        Some("shipment")
    );
    assert!(headers.contains_key("ce_time"), "ce_time is set");
    assert_eq!(
        message.key, message.aggregate_id,
        "the Kafka key is the aggregate id"
    );
    assert_eq!(
        message.payload["shipment"].as_str(),
        Some(message.aggregate_id.as_str()),
        "the value is the payload"
    );
}

fn check_amqp_attributes(message: &Received) {
    let headers = &message.headers;
    assert_eq!(
        message.key, message.ce_id,
        "message_id = cloudEvents:id = event_id"
    );
    assert_eq!(
        headers.get("cloudEvents:specversion").map(String::as_str),
        Some("1.0")
    );
    assert_eq!(
        headers.get("cloudEvents:type").map(String::as_str),
        Some("shipment.moved")
    );
    assert_eq!(
        headers.get("cloudEvents:source").map(String::as_str),
        Some("/shipments")
    );
    assert_eq!(
        headers.get("cloudEvents:aggregatetype").map(String::as_str),
        Some("shipment")
    );
    assert!(
        headers.contains_key("cloudEvents:time"),
        "cloudEvents:time is set"
    );
    assert_eq!(
        message.payload["shipment"].as_str(),
        Some(message.aggregate_id.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_kafka_delivers_every_event_with_its_attributes() {
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("delivery");
    let collected = kafka::topic_consumer(&topic, 3).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &topic, EVENTS, AGGREGATES, 100).await;

    let mut relay = RelayProcess::spawn(
        db.url(),
        &format!("kafka://{}", kafka::brokers()),
        FAST_CONFIG,
    );
    wait_for_unique(&collected, enqueued.len(), &mut relay).await;
    let received = collected.snapshot();
    check_delivery(&enqueued, &received);
    for message in &received {
        check_kafka_attributes(message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_to_rabbitmq_delivers_every_event_with_its_attributes() {
    let db = outbox_testkit::postgres().await;
    let exchange = unique_name("delivery");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &exchange, EVENTS, AGGREGATES, 100).await;

    let mut relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), FAST_CONFIG);
    wait_for_unique(&collected, enqueued.len(), &mut relay).await;
    let received = collected.snapshot();
    check_delivery(&enqueued, &received);
    for message in &received {
        check_amqp_attributes(message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_to_kafka_delivers_every_event_in_order() {
    let db = outbox_testkit::mysql().await;
    let topic = unique_name("mariadb");
    let collected = kafka::topic_consumer(&topic, 3).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &topic, EVENTS, AGGREGATES, 100).await;

    let mut relay = RelayProcess::spawn(
        db.url(),
        &format!("kafka://{}", kafka::brokers()),
        FAST_CONFIG,
    );
    wait_for_unique(&collected, enqueued.len(), &mut relay).await;
    check_delivery(&enqueued, &collected.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_to_rabbitmq_delivers_every_event_in_order() {
    let db = outbox_testkit::sqlite().await;
    let exchange = unique_name("sqlite");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &exchange, EVENTS, AGGREGATES, 100).await;

    let mut relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), FAST_CONFIG);
    wait_for_unique(&collected, enqueued.len(), &mut relay).await;
    check_delivery(&enqueued, &collected.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_committed_out_of_id_order_is_published_and_logged() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let payload =
        || serde_json::value::to_raw_value(&serde_json::json!({"n": 1})).expect("payload");
    let message = || {
        outbox::OutboxMessage::new(
            "order.paid",
            "/orders",
            "order",
            "race",
            "orders",
            payload(),
        )
    };

    // The first transaction takes the lower id but commits last.
    let mut slow = db.pool().begin().await.expect("begin");
    let slow_id = outbox::OutboxWriter::new()
        .enqueue_messages(&mut slow, vec![message()])
        .await
        .expect("enqueue")[0];
    let mut fast = db.pool().begin().await.expect("begin");
    outbox::OutboxWriter::new()
        .enqueue_messages(&mut fast, vec![message()])
        .await
        .expect("enqueue");
    fast.commit().await.expect("commit");

    let relay = RelayProcess::spawn(db.url(), "stdout", FAST_CONFIG);
    let published = |state: &'static str| {
        let pool = db.pool().clone();
        async move {
            let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM outbox_events WHERE state = '{state}'"
            )))
            .fetch_one(&pool)
            .await
            .expect("count");
            count
        }
    };
    assert!(
        wait_until(Duration::from_secs(30), || async {
            published("published").await == 1
        })
        .await,
        "the committed event is published while the other transaction is open"
    );
    slow.commit().await.expect("commit");
    assert!(
        wait_until(Duration::from_secs(30), || async {
            published("published").await == 2
        })
        .await,
        "the late-committed event is published too"
    );
    assert!(
        wait_until(Duration::from_secs(10), || async {
            relay.log().contains("committed after a later event")
        })
        .await,
        "the relay logs the out-of-order commit of {slow_id}:\n{}",
        relay.log()
    );
}
