//! Repairing a dead event while the relay runs, end to end: an event the
//! broker keeps rejecting becomes dead through the real relay, which holds
//! its aggregate (the default `hold` policy) while other aggregates flow.
//! Then an operator either fixes the cause and runs `dead retry`, or runs
//! `dead discard`, and the running relay delivers what was held, in order.
//! What counts is what a real RabbitMQ consumer receives. Once per backend.

mod support;

use std::collections::HashSet;
use std::process::{Command, Output};
use std::time::Duration;

use outbox_testkit::{Collected, TestBackend, TestDatabase, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};

/// Events of the aggregate that gets stuck.
const STUCK: &str = "stuck";

fn operator(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(args)
        .env_remove("OUTBOX_DATABASE_URL")
        .env_remove("DATABASE_URL")
        .output()
        .expect("run outbox-relay");
    assert!(
        output.status.success(),
        "outbox-relay {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Enqueue, in one transaction: the stuck aggregate's first event to
/// `first_exchange`, 20 events of five other aggregates to `good_exchange`,
/// then two more stuck events to `later_exchange`. Returns (stuck ids in
/// order, other ids).
async fn enqueue<DB: outbox::Backend>(
    db: &TestDatabase<DB>,
    first_exchange: &str,
    later_exchange: &str,
    good_exchange: &str,
) -> (Vec<String>, Vec<String>) {
    let message = |aggregate_id: String, exchange: &str, sequence: usize| {
        outbox::OutboxMessage::new(
            "shipment.moved",
            "/shipments",
            "shipment",
            aggregate_id,
            exchange,
            serde_json::value::to_raw_value(&serde_json::json!({ "sequence": sequence }))
                .expect("payload"),
        )
    };
    let mut messages = vec![message(STUCK.to_owned(), first_exchange, 0)];
    messages.extend((1..=20).map(|n| message(format!("good-{}", n % 5), good_exchange, n)));
    messages.push(message(STUCK.to_owned(), later_exchange, 21));
    messages.push(message(STUCK.to_owned(), later_exchange, 22));
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let stuck = vec![ids[0].clone(), ids[21].clone(), ids[22].clone()];
    (stuck, ids[1..21].to_vec())
}

/// Start the relay and wait until the stuck aggregate's first event is dead
/// and every other aggregate's event arrived on `good`; check that the
/// stuck aggregate's later events are held, not attempted.
async fn run_until_dead<DB: TestBackend>(
    db: &TestDatabase<DB>,
    good: &Collected,
    stuck: &[String],
    others: &[String],
) -> RelayProcess {
    let relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), FAST_CONFIG);
    let label = DB::LABEL;
    assert!(
        wait_until(Duration::from_secs(60), || async {
            db.count(&format!(
                "SELECT COUNT(*) FROM outbox_events WHERE state = 'dead' AND attempts = 3 \
                     AND event_id = '{}'",
                stuck[0]
            ))
            .await
                == 1
        })
        .await,
        "{label}: the rejected event is dead after its 3 attempts"
    );
    assert!(
        wait_until(Duration::from_secs(60), || async {
            let arrived: HashSet<String> = good.first_arrivals().into_iter().collect();
            others.iter().all(|id| arrived.contains(id))
        })
        .await,
        "{label}: the other aggregates flow past the dead event"
    );
    // Give the relay the chance to (wrongly) send the held events.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for held in &stuck[1..] {
        assert_eq!(
            db.count(&format!(
                "SELECT COUNT(*) FROM outbox_events WHERE event_id = '{held}' \
                     AND state = 'pending' AND attempts = 0"
            ),)
                .await,
            1,
            "{label}: the later event {held} is held, never attempted"
        );
    }
    relay
}

async fn retry_after_fixing_the_cause<DB: TestBackend + outbox::Backend>(db: TestDatabase<DB>) {
    let label = DB::LABEL;
    let good_exchange = unique_name("repair-good");
    // An exchange without a queue: RabbitMQ returns every message as
    // unroutable until the operator binds one.
    let unbound_exchange = unique_name("repair-unbound");
    let good = rabbitmq::exchange_consumer(&good_exchange).await;
    rabbitmq::declare_unbound_exchange(&unbound_exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let (stuck, others) = enqueue(&db, &unbound_exchange, &unbound_exchange, &good_exchange).await;
    let mut relay = run_until_dead(&db, &good, &stuck, &others).await;

    // The fix: a queue bound to the exchange (with a consumer on it).
    let repaired = rabbitmq::exchange_consumer(&unbound_exchange).await;
    let output = operator(&[
        "dead",
        "retry",
        "--database-url",
        db.url(),
        "--event-id",
        &stuck[0],
    ]);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("1 dead event(s) made pending again"),
        "{label}: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        wait_until(Duration::from_secs(30), || async {
            repaired.first_arrivals().len() >= stuck.len()
        })
        .await,
        "{label}: the retried event and the held ones arrive; got {:?}",
        repaired.first_arrivals()
    );
    assert_eq!(
        repaired.first_arrivals(),
        stuck,
        "{label}: the retried event first, then the held ones, in order"
    );
    assert!(
        wait_until(Duration::from_secs(30), || async {
            db.count("SELECT COUNT(*) FROM outbox_events WHERE state <> 'published'")
                .await
                == 0
        })
        .await,
        "{label}: every event ends published"
    );
    assert!(relay.is_running(), "{label}: the relay kept running");
}

async fn discard_releases_the_held_events<DB: TestBackend + outbox::Backend>(db: TestDatabase<DB>) {
    let label = DB::LABEL;
    let good_exchange = unique_name("repair-good");
    let missing_exchange = unique_name("repair-never-declared");
    let good = rabbitmq::exchange_consumer(&good_exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let (stuck, others) = enqueue(&db, &missing_exchange, &good_exchange, &good_exchange).await;
    let mut relay = run_until_dead(&db, &good, &stuck, &others).await;
    assert!(
        !good.first_arrivals().iter().any(|id| stuck.contains(id)),
        "{label}: nothing of the stuck aggregate arrived while it was held"
    );

    let output = operator(&[
        "dead",
        "discard",
        "--database-url",
        db.url(),
        "--aggregate",
        &format!("shipment:{STUCK}"),
    ]);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("1 dead event(s) discarded"),
        "{label}: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM outbox_events WHERE event_id = '{}'",
            stuck[0]
        ))
        .await,
        0,
        "{label}: the dead event is deleted"
    );
    assert!(
        wait_until(Duration::from_secs(30), || async {
            let arrived: HashSet<String> = good.first_arrivals().into_iter().collect();
            stuck[1..].iter().all(|id| arrived.contains(id))
        })
        .await,
        "{label}: the held events arrive after the discard"
    );
    let stuck_arrivals: Vec<String> = good
        .first_arrivals()
        .into_iter()
        .filter(|id| stuck.contains(id))
        .collect();
    assert_eq!(
        stuck_arrivals,
        stuck[1..].to_vec(),
        "{label}: the held events in order, the discarded one never"
    );
    assert!(relay.is_running(), "{label}: the relay kept running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_retry_after_the_fix_delivers_the_held_aggregate_in_order_on_postgres() {
    retry_after_fixing_the_cause(outbox_testkit::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_retry_after_the_fix_delivers_the_held_aggregate_in_order_on_mariadb() {
    retry_after_fixing_the_cause(outbox_testkit::mysql().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_retry_after_the_fix_delivers_the_held_aggregate_in_order_on_sqlite() {
    retry_after_fixing_the_cause(outbox_testkit::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_discard_releases_the_held_aggregate_on_postgres() {
    discard_releases_the_held_events(outbox_testkit::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_discard_releases_the_held_aggregate_on_mariadb() {
    discard_releases_the_held_events(outbox_testkit::mysql().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_discard_releases_the_held_aggregate_on_sqlite() {
    discard_releases_the_held_events(outbox_testkit::sqlite().await).await;
}
