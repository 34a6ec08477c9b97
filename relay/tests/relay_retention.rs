//! Retention inside the running relay: with `retention.published = "0s"`
//! the mark deletes the acknowledged rows while writers commit and the
//! relay publishes, pending and dead rows stay, and every event reaches the
//! consumer once.

mod support;

use std::time::Duration;

use outbox_testkit::{TestBackend, TestDatabase, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::workload::{
    WriterPlan, check_delivery, events_without_failures, join_writers, spawn_writers,
    unexplained_duplicates,
};
use tokio_util::sync::CancellationToken;

const WRITERS: u64 = 3;
const EVENTS_PER_WRITER: u64 = 150;
const COMMIT_PAUSE: Duration = Duration::from_millis(10);

/// The test settings, with acknowledged events deleted by the mark and a
/// retention pass every 100 ms.
fn config() -> String {
    format!("{FAST_CONFIG}\n[retention]\npublished = \"0s\"\ninterval = \"100ms\"\n")
}

/// Enqueue an event of aggregate `kept` to `missing_exchange`, which the
/// broker rejects until it is dead, and one more of the same aggregate to
/// `exchange`, which its dead predecessor holds pending. Returns the ids.
async fn enqueue_a_dead_and_a_held_event<DB: outbox::Backend>(
    pool: &sqlx::Pool<DB>,
    missing_exchange: &str,
    exchange: &str,
) -> Vec<uuid::Uuid> {
    let message = |exchange: &str| {
        outbox::OutboxMessage::new(
            "shipment.moved",
            "/shipments",
            "shipment",
            "kept",
            exchange,
            serde_json::value::to_raw_value(&serde_json::json!({"n": 1})).expect("payload"),
        )
    };
    let mut tx = pool.begin().await.expect("begin");
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, vec![message(missing_exchange), message(exchange)])
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    ids
}

async fn retention_under_writers<DB: outbox::Backend + TestBackend>(db: TestDatabase<DB>) {
    let exchange = unique_name("retention");
    let missing_exchange = unique_name("never-declared");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let kept = enqueue_a_dead_and_a_held_event(db.pool(), &missing_exchange, &exchange).await;

    let relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), &config());
    let stop_writing = CancellationToken::new();
    let plan = WriterPlan {
        writer: 0,
        aggregates: 10,
        at_least: EVENTS_PER_WRITER,
        pause: COMMIT_PAUSE,
    };
    let writers = spawn_writers(db.pool(), &exchange, WRITERS, plan, &stop_writing);
    // The writers go on until published rows are deleted beside them: more
    // events have arrived than rows are left. With `published = "0s"` the
    // mark itself deletes them.
    assert!(
        wait_until(Duration::from_secs(60), || async {
            let delivered = collected.distinct_ids().len() as i64;
            delivered > 50 && delivered > db.count("SELECT COUNT(*) FROM outbox_events").await
        })
        .await,
        "no published row was deleted:\n{}",
        relay.log()
    );
    stop_writing.cancel();
    let enqueued = events_without_failures(join_writers(writers).await);

    assert!(
        wait_until(Duration::from_secs(60), || async {
            collected.distinct_ids().len() >= enqueued.len()
        })
        .await,
        "{} of {} events arrived:\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        relay.log()
    );
    // An event reaches the consumer before the relay marks it published:
    // wait for every row but the dead and the held one to be marked and
    // then deleted.
    let (dead, held) = (kept[0], kept[1]);
    assert!(
        wait_until(Duration::from_secs(60), || async {
            db.count(&format!(
                "SELECT COUNT(*) FROM outbox_events WHERE event_id NOT IN ('{dead}', '{held}')"
            ))
            .await
                == 0
        })
        .await,
        "rows besides the dead and the held one are left: {} published, {} pending\n{}",
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'")
            .await,
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending'")
            .await,
        relay.log()
    );
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM outbox_events WHERE event_id = '{dead}' AND state = 'dead' \
             AND attempts = 3"
        ))
        .await,
        1,
        "the dead row stays"
    );
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM outbox_events WHERE event_id = '{held}' AND state = 'pending'"
        ))
        .await,
        1,
        "the pending row stays"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events").await,
        2,
        "only the dead and the pending rows are left"
    );
    assert!(
        !relay.log().contains("retention deleted published events"),
        "the mark deletes acknowledged rows: no published row is left for a retention pass\n{}",
        relay.log()
    );
    assert!(!collected.distinct_ids().contains(&held.to_string()));
    let received = collected.snapshot();
    check_delivery(&enqueued, &received);
    assert_eq!(
        unexplained_duplicates(&received, &[relay.log()]),
        Vec::<String>::new(),
        "every event arrives once, but those the relay counted as not sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_retention_deletes_published_rows_only() {
    retention_under_writers(outbox_testkit::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_retention_deletes_published_rows_only() {
    retention_under_writers(outbox_testkit::mysql().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_retention_deletes_published_rows_only() {
    retention_under_writers(outbox_testkit::sqlite().await).await;
}
