//! What a broker client that loses events in flight does to the order of
//! each aggregate (`docs/guarantees.md`, "A loss in flight").
//!
//! The relay keeps several batches in flight on one RabbitMQ connection.
//! Here the connection stops carrying the relay's messages part-way through
//! the first batch, as a broker that stops reading a publisher's socket
//! does: the first messages are routed and confirmed, the rest of that batch
//! and the batches behind it never reach the broker, and their confirms time
//! out. A new connection works. Every event sent after the first
//! unconfirmed one must count as not sent, and nothing fetched later may
//! reach the broker before those events went out again, in order.
//!
//! The behaviour is the batch loop's and the publisher's, the same on every
//! store: SQLite, whose single partition fetches strictly in id order, so
//! the batches are known in advance.

mod support;

use std::time::Duration;

use outbox_testkit::{TcpProxy, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::workload::{ShipmentMoved, check_delivery};

/// `count` events of aggregate `aggregate`, numbered from `first`.
fn messages_of(topic: &str, aggregate: &str, first: u64, count: u64) -> Vec<outbox::OutboxMessage> {
    (first..first + count)
        .map(|sequence| {
            let event = ShipmentMoved {
                shipment: aggregate.to_owned(),
                sequence,
            };
            outbox::OutboxMessage::new(
                "shipment.moved",
                "/shipments",
                "shipment",
                aggregate,
                topic,
                serde_json::value::to_raw_value(&event).expect("payload"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connection_that_loses_part_of_a_batch_in_flight_keeps_every_aggregate_in_order() {
    const BATCH: u64 = 500;
    let db = outbox_testkit::sqlite().await;
    let exchange = unique_name("loss-in-flight");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let broker = TcpProxy::in_front_of(&rabbitmq::amqp_url()).await;
    // Batches of 500, up to 1,000 events in flight; the confirm wait is
    // short against the lease, so a timed-out batch lands long before the
    // lease is in question.
    let config = FAST_CONFIG
        .replace("lease_duration = \"2s\"", "lease_duration = \"30s\"")
        .replace("publish_timeout = \"800ms\"", "publish_timeout = \"5s\"")
        .replace("confirm_timeout = \"500ms\"", "confirm_timeout = \"2s\"");
    let mut relay = RelayProcess::spawn(db.url(), &broker.route(&rabbitmq::amqp_url()), &config);

    // A first event connects the relay to the broker and leaves it idle.
    let mut tx = db.pool().begin().await.expect("begin");
    let mut enqueued = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages_of(&exchange, "warm-up", 0, 1))
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    assert!(
        wait_until(Duration::from_secs(60), || async {
            collected.distinct_ids().len() == 1
        })
        .await,
        "the first event was never published:\n{}",
        relay.log()
    );

    // From here the relay's open connection carries a few kilobytes (the
    // first messages of the next batch), then nothing more toward the
    // broker; the broker's confirms still come back.
    broker.hold_open_connections_to_server_after(4096);

    // One transaction, so the relay sees it whole: the first batch is
    // aggregate x only; the three batches after it are aggregate y. The
    // first batch loses most of its messages, the second and third all of
    // theirs; the fourth must not reach the broker before them.
    let mut messages = messages_of(&exchange, "x", 0, BATCH);
    messages.extend(messages_of(&exchange, "y", 0, 3 * BATCH));
    let mut tx = db.pool().begin().await.expect("begin");
    enqueued.extend(
        outbox::OutboxWriter::new()
            .enqueue_messages(&mut tx, messages)
            .await
            .expect("enqueue"),
    );
    tx.commit().await.expect("commit");

    let arrived = wait_until(Duration::from_secs(120), || async {
        collected.distinct_ids().len() >= enqueued.len()
    })
    .await;
    assert!(relay.is_running(), "the relay exited:\n{}", relay.log());
    assert!(
        arrived,
        "only {} of {} events arrived:\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        relay.log()
    );
    assert!(
        relay
            .log()
            .contains("dropping the rabbitmq connection; the next publish opens a new one"),
        "the stalled connection was never dropped, so nothing was lost in flight:\n{}",
        relay.log()
    );
    check_delivery(&enqueued, &collected.snapshot());
}
