//! An event larger than the broker accepts, on each broker, through the
//! relay binary on PostgreSQL: it fails with a `last_error` naming its
//! payload's size and the broker's limit, is dead-lettered after
//! `retry.max_attempts`, holds back its own aggregate's later event under
//! the default `hold` policy, and never blocks the other aggregates.
//!
//! Kafka runs on the shared broker with the producer's `message.max.bytes`
//! lowered in the relay's config. RabbitMQ's limit is the broker's own
//! `max_message_size`, which the shared broker keeps at its default
//! (128 MiB): that case runs on a node of the test's own
//! ([`PrivateRabbitMq`]) with a small one.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use outbox_testkit::{Collected, PrivateRabbitMq, TestDatabase, kafka, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};

/// `retry.max_attempts` of [`FAST_CONFIG`]: the attempts a dead event has.
const MAX_ATTEMPTS: i32 = 3;

/// The producer's `message.max.bytes` in the Kafka case.
const KAFKA_MESSAGE_MAX_BYTES: usize = 10_000;

/// The private RabbitMQ node's `max_message_size`.
const RABBITMQ_MAX_MESSAGE_SIZE: usize = 65_536;

/// The events of one case, by role.
struct Enqueued {
    /// The oversized event, first of aggregate `big`.
    big: uuid::Uuid,
    /// A small event of aggregate `big`, after the oversized one.
    held: uuid::Uuid,
    /// The events of aggregate `other`, in id order.
    others: Vec<uuid::Uuid>,
}

/// Enqueue to `topic`, in one transaction and in this order: the
/// oversized event (a payload of `big_bytes` and a little more) of
/// aggregate `big`, three events of aggregate `other`, a small event of
/// `big`, and three more of `other`.
async fn enqueue_an_oversized_event(
    db: &TestDatabase<sqlx::Postgres>,
    topic: &str,
    big_bytes: usize,
) -> Enqueued {
    let message = |aggregate_id: &str, payload: serde_json::Value| {
        outbox::OutboxMessage::new(
            "blob.stored",
            "/blobs",
            "blob",
            aggregate_id,
            topic,
            serde_json::value::to_raw_value(&payload).expect("payload"),
        )
    };
    let small = |n: usize| serde_json::json!({ "n": n });
    let mut messages = vec![message(
        "big",
        serde_json::json!({ "blob": "x".repeat(big_bytes) }),
    )];
    messages.extend((0..3).map(|n| message("other", small(n))));
    messages.push(message("big", small(0)));
    messages.extend((3..6).map(|n| message("other", small(n))));
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    Enqueued {
        big: ids[0],
        held: ids[4],
        others: ids[1..4].iter().chain(&ids[5..]).copied().collect(),
    }
}

/// What the table holds for one event: its state, attempts, last error
/// and the size of its payload as the relay reads it (the JSON text
/// PostgreSQL gives back, in bytes).
async fn event_row(
    db: &TestDatabase<sqlx::Postgres>,
    event_id: uuid::Uuid,
) -> (String, i32, Option<String>, i32) {
    sqlx::query_as(
        "SELECT state, attempts, last_error, octet_length(payload::text) \
         FROM outbox_events WHERE event_id = $1",
    )
    .bind(event_id)
    .fetch_one(db.pool())
    .await
    .expect("read the event's row")
}

/// The checks every broker shares, while the relay runs: the oversized
/// event ends `dead` after [`MAX_ATTEMPTS`] with a `last_error` holding
/// each of `expected_error` (made from its payload's byte count), the
/// other aggregate arrives whole and in order, and the later event of
/// aggregate `big` stays pending and unsent.
async fn check_the_oversized_event(
    db: &TestDatabase<sqlx::Postgres>,
    enqueued: &Enqueued,
    collected: &Collected,
    expected_error: impl Fn(i32) -> Vec<String>,
) {
    assert!(
        FAST_CONFIG.contains(&format!("max_attempts = {MAX_ATTEMPTS}")),
        "MAX_ATTEMPTS is the config's retry.max_attempts"
    );
    let dead = wait_until(Duration::from_secs(60), || async {
        event_row(db, enqueued.big).await.0 == "dead"
    })
    .await;
    let (state, attempts, last_error, payload_bytes) = event_row(db, enqueued.big).await;
    assert!(
        dead,
        "the oversized event is dead-lettered; it is {state} after {attempts} attempts, \
         last error {last_error:?}"
    );
    assert_eq!(
        attempts, MAX_ATTEMPTS,
        "the dead event has retry.max_attempts attempts"
    );
    let last_error = last_error.expect("a dead event has its last error");
    for expected in expected_error(payload_bytes) {
        assert!(
            last_error.contains(&expected),
            "the last error names the payload's size and the broker's limit ({expected:?}): \
             {last_error}"
        );
    }

    let others: Vec<String> = enqueued.others.iter().map(|id| id.to_string()).collect();
    assert!(
        wait_until(Duration::from_secs(60), || async {
            let received: HashSet<String> = collected.first_arrivals().into_iter().collect();
            others.iter().all(|id| received.contains(id))
        })
        .await,
        "the other aggregate is published while the oversized event fails"
    );
    let in_arrival_order: Vec<String> = collected
        .first_arrivals()
        .into_iter()
        .filter(|id| others.contains(id))
        .collect();
    assert_eq!(
        in_arrival_order, others,
        "the other aggregate arrives in order"
    );

    // Marked a moment after the consumer may have them.
    assert!(
        wait_until(Duration::from_secs(30), || async {
            db.count(
                "SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = 'other' \
                 AND state <> 'published'",
            )
            .await
                == 0
        })
        .await,
        "the other aggregate's events are marked published"
    );
    assert_eq!(
        db.count(
            "SELECT COUNT(*) FROM outbox_events WHERE aggregate_id = 'other' AND attempts > 0"
        )
        .await,
        0,
        "the other aggregate's events cost no attempt"
    );

    // Give the relay time to (wrongly) publish the held event.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = collected.first_arrivals();
    assert!(
        !received.contains(&enqueued.big.to_string()),
        "the oversized event never arrives"
    );
    assert!(
        !received.contains(&enqueued.held.to_string()),
        "under the hold policy the dead event holds its aggregate's later event back"
    );
    let (state, attempts, _, _) = event_row(db, enqueued.held).await;
    assert_eq!(
        (state.as_str(), attempts),
        ("pending", 0),
        "the held event waits untried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_over_the_kafka_size_limit_is_dead_lettered_and_holds_only_its_aggregate() {
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("oversized");
    let collected = kafka::topic_consumer(&topic, 1).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_an_oversized_event(&db, &topic, 2 * KAFKA_MESSAGE_MAX_BYTES).await;

    let config = format!(
        "{FAST_CONFIG}\n[kafka.options]\n\"message.max.bytes\" = \"{KAFKA_MESSAGE_MAX_BYTES}\"\n"
    );
    let broker = format!("kafka://{}", kafka::brokers());
    let _relay = RelayProcess::spawn(db.url(), &broker, &config);
    check_the_oversized_event(&db, &enqueued, &collected, |bytes| {
        vec![
            format!("{bytes} payload bytes"),
            format!("message.max.bytes of {KAFKA_MESSAGE_MAX_BYTES}"),
        ]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_over_the_rabbitmq_max_message_size_is_dead_lettered_and_holds_only_its_aggregate()
{
    let broker =
        PrivateRabbitMq::start(&format!("max_message_size = {RABBITMQ_MAX_MESSAGE_SIZE}")).await;
    let db = outbox_testkit::postgres().await;
    let exchange = unique_name("oversized");
    let collected = rabbitmq::exchange_consumer_at(&broker.amqp_url(), &exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_an_oversized_event(&db, &exchange, 2 * RABBITMQ_MAX_MESSAGE_SIZE).await;

    let _relay = RelayProcess::spawn(db.url(), &broker.amqp_url(), FAST_CONFIG);
    check_the_oversized_event(&db, &enqueued, &collected, |bytes| {
        vec![format!(
            "({bytes} payload bytes, max {RABBITMQ_MAX_MESSAGE_SIZE})"
        )]
    })
    .await;
}
