//! What a broker-side rejection does to the events of its aggregate that
//! were in flight with it (`docs/guarantees.md`, "A rejection in flight").
//!
//! A publisher that keeps order within one call (Kafka, RabbitMQ) gets an
//! aggregate's consecutive events to one topic in one send. Here RabbitMQ
//! returns the messages whose routing key no queue is bound to, and routes
//! the others, all on one exchange:
//! - the first event is rejected: it is retried, then dead;
//! - a later event the broker also refused waits for it, unattempted;
//! - a later event the broker took stays published, ahead of the failed
//!   one: logged and counted in `events_published_out_of_order_total`.
//!
//! The relay also sends the next batch before the broker has answered for
//! the one in flight, so a rejection can meet its aggregate's events in the
//! next batch too: taken ones are counted the same way, and events fetched
//! after the rejection was recorded stay held, never sent.
//!
//! The behaviour is the batch loop's, the same on every store: PostgreSQL.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use outbox_testkit::{TestDatabase, rabbitmq, unique_name};
use support::http::{endpoint_address, get, sample};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};

const ROUTED: &str = "shipment.moved";
const RETURNED: &str = "shipment.lost";

async fn state_of(db: &TestDatabase<sqlx::Postgres>, event_id: &str) -> (String, i32) {
    sqlx::query_as("SELECT state, attempts FROM outbox_events WHERE event_id = $1::uuid")
        .bind(event_id)
        .fetch_one(db.pool())
        .await
        .expect("read the event's state")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_in_flight_holds_refused_followers_and_counts_taken_ones() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let exchange = unique_name("reject-in-flight");
    let consumed = rabbitmq::exchange_consumer_bound_with(&exchange, ROUTED).await;
    // The aggregate `mixed`: returned, routed, returned, routed; then ten
    // routed events of other aggregates.
    let others: Vec<String> = (4..14).map(|n| format!("other-{n}")).collect();
    let mut events = vec![
        ("mixed", true),
        ("mixed", false),
        ("mixed", true),
        ("mixed", false),
    ];
    events.extend(others.iter().map(|other| (other.as_str(), false)));
    let ids = enqueue_events(&db, &exchange, &events).await;

    let relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), FAST_CONFIG);
    let address = endpoint_address(&relay).await;
    let routed: HashSet<&String> = ids.iter().skip(4).chain([&ids[1], &ids[3]]).collect();
    assert!(
        wait_until(Duration::from_secs(60), || async {
            state_of(&db, &ids[0]).await == ("dead".to_owned(), 3)
                && consumed
                    .snapshot()
                    .iter()
                    .map(|message| &message.ce_id)
                    .collect::<HashSet<_>>()
                    .is_superset(&routed)
        })
        .await,
        "the refused head is dead after 3 attempts and every routed event arrived\n{}",
        relay.log()
    );

    assert_eq!(
        state_of(&db, &ids[2]).await,
        ("pending".to_owned(), 0),
        "a refused follower waits for its head, unattempted"
    );
    for taken in [&ids[1], &ids[3]] {
        assert_eq!(state_of(&db, taken).await.0, "published", "{taken}");
    }
    let metrics = get(&address, "/metrics").await.body;
    let counted = sample(
        &metrics,
        &format!("outbox_relay_events_published_out_of_order_total{{topic=\"{exchange}\"}}"),
    );
    assert_eq!(
        counted,
        Some(2.0),
        "both followers the broker took are counted\n{metrics}"
    );
    assert!(
        relay
            .log()
            .contains("event acknowledged after an earlier event of its aggregate"),
        "the reordering is logged\n{}",
        relay.log()
    );
    relay.kill9();
    let connection = rabbitmq::require_rabbitmq().await;
    rabbitmq::delete_topology(&connection, &[&format!("{exchange}.all")], &[&exchange]).await;
}

/// Enqueue, in one transaction, the events `(aggregate, refused)` in
/// order. Returns their event ids.
async fn enqueue_events(
    db: &TestDatabase<sqlx::Postgres>,
    exchange: &str,
    events: &[(&str, bool)],
) -> Vec<String> {
    let messages: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(sequence, (aggregate_id, refused))| {
            outbox::OutboxMessage::new(
                if *refused { RETURNED } else { ROUTED },
                "/shipments",
                "shipment",
                *aggregate_id,
                exchange,
                serde_json::value::to_raw_value(&serde_json::json!({ "sequence": sequence }))
                    .expect("payload"),
            )
        })
        .collect();
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    ids.iter().map(ToString::to_string).collect()
}

/// Two events per batch: `[mixed refused, other-1]`, `[mixed routed,
/// other-3]`, then events of other aggregates. The refused head's retry is
/// an hour away, so a follower of its aggregate reaches the broker only if
/// it was sent while the head was in flight. The follower in the second
/// batch is, when that batch was fetched and sent before the broker's
/// answer for the first came back; when the answer came first, it is not.
/// Either way it is counted exactly when it went out. A follower committed
/// once the rejection is recorded is never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_meets_the_next_batch_in_flight_and_holds_what_was_not_sent() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let exchange = unique_name("reject-next-batch");
    let consumed = rabbitmq::exchange_consumer_bound_with(&exchange, ROUTED).await;
    let ids = enqueue_events(
        &db,
        &exchange,
        &[
            ("mixed", true),
            ("other-1", false),
            ("mixed", false),
            ("other-3", false),
            ("other-4", false),
            ("other-5", false),
            ("other-6", false),
        ],
    )
    .await;

    let config = FAST_CONFIG
        .replace("batch_size = 500", "batch_size = 2")
        .replace("base_delay = \"50ms\"", "base_delay = \"1h\"")
        .replace("max_delay = \"200ms\"", "max_delay = \"1h\"");
    assert_eq!(
        config.matches("1h").count() + config.matches("batch_size = 2\n").count(),
        3,
        "the test sets two events per batch and an hour between attempts"
    );
    let relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), &config);
    let address = endpoint_address(&relay).await;
    assert!(
        wait_until(Duration::from_secs(60), || async {
            state_of(&db, &ids[0]).await == ("pending".to_owned(), 1)
        })
        .await,
        "the refused head's first attempt is recorded\n{}",
        relay.log()
    );
    let later = enqueue_events(&db, &exchange, &[("mixed", false), ("other-7", false)]).await;
    let others: HashSet<&String> = [&ids[1], &ids[3], &ids[4], &ids[5], &ids[6], &later[1]]
        .into_iter()
        .collect();
    let received = || {
        consumed
            .snapshot()
            .iter()
            .map(|message| message.ce_id.clone())
            .collect::<HashSet<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(60), || async {
            state_of(&db, &ids[0]).await == ("pending".to_owned(), 1)
                && others.iter().all(|id| received().contains(*id))
        })
        .await,
        "the refused head waits for its retry and every other aggregate's event arrived\n{}",
        relay.log()
    );

    let follower_went_out = received().contains(&ids[2]);
    if follower_went_out {
        assert_eq!(
            state_of(&db, &ids[2]).await.0,
            "published",
            "the follower taken in the batch behind stays published"
        );
    } else {
        assert_eq!(
            state_of(&db, &ids[2]).await,
            ("pending".to_owned(), 0),
            "a follower not sent before the rejection was known is held, unattempted"
        );
    }
    assert_eq!(
        state_of(&db, &later[0]).await,
        ("pending".to_owned(), 0),
        "the follower committed after the rejection was recorded is held, unattempted"
    );
    assert!(
        !received().contains(&later[0]),
        "the held follower was never sent"
    );
    let metrics = get(&address, "/metrics").await.body;
    let counted = sample(
        &metrics,
        &format!("outbox_relay_events_published_out_of_order_total{{topic=\"{exchange}\"}}"),
    );
    assert_eq!(
        counted.unwrap_or(0.0),
        if follower_went_out { 1.0 } else { 0.0 },
        "the follower is counted exactly when it went out ahead of the head\n{metrics}"
    );
    assert_eq!(
        relay
            .log()
            .contains("event acknowledged after an earlier event of its aggregate"),
        follower_went_out,
        "the reordering is logged exactly when it happened\n{}",
        relay.log()
    );
    relay.kill9();
    let connection = rabbitmq::require_rabbitmq().await;
    rabbitmq::delete_topology(&connection, &[&format!("{exchange}.all")], &[&exchange]).await;
}
