//! `outbox-relay leave-logical`, end to end on RabbitMQ: refused while a
//! relay streams; afterwards the events the slot confirmed are marked
//! published and never published again, while the ones it had not
//! confirmed (one inserted after a savepoint among them) and one committed
//! while the command ran are published by polling; the slot and its
//! publication are gone. Run on the logical source again, the new slot
//! publishes what was left pending as its backlog.

use std::process::Output;

use outbox::OutboxWriter;
use outbox_testkit::{Collected, rabbitmq, unique_name};
use sqlx::Acquire;

use crate::harness::{DELIVERY_WAIT, LogicalDatabase, all_arrive, stop};
use crate::support::process::{FAST_CONFIG, RelayProcess, wait_until};
use crate::support::workload::{check_delivery, enqueue_events, shipment_messages};

/// `outbox-relay leave-logical --slot <the database's slot>`.
fn leave_logical(database: &LogicalDatabase) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["leave-logical", "--database-url", database.db.url()])
        .args(["--slot", database.slot.as_str()])
        .output()
        .expect("run leave-logical")
}

/// A relay streaming to `broker`, and the `count` events it published,
/// once the slot has confirmed them.
async fn streamed_and_confirmed(
    database: &LogicalDatabase,
    broker: &str,
    exchange: &str,
    collected: &Collected,
    count: u64,
) -> (RelayProcess, Vec<uuid::Uuid>) {
    let relay = database.spawn_relay(broker);
    let streamed = enqueue_events(database.db.pool(), exchange, count, 4, 5).await;
    let written_up_to = database.current_wal_position().await;
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() >= streamed.len()
                && database.confirmed_flush().await >= written_up_to
        })
        .await,
        "the streamed events were delivered and confirmed:\n{}",
        relay.log()
    );
    (relay, streamed)
}

async fn count(database: &LogicalDatabase, query: &str) -> i64 {
    database.db.count(query).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leave_logical_marks_what_the_slot_confirmed_and_polling_publishes_the_rest() {
    let database = LogicalDatabase::new().await;
    let exchange = unique_name("logical_leave");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let pool = database.db.pool();

    let (mut relay, streamed) =
        streamed_and_confirmed(&database, &broker, &exchange, &collected, 40).await;

    // While a relay holds the stream's lease it is refused, naming the
    // holder, and changes nothing.
    let refused = leave_logical(&database);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "not refused: {stderr}");
    assert!(
        stderr
            .lines()
            .last()
            .unwrap_or_default()
            .starts_with("outbox-relay: the stream's lease is held by"),
        "{stderr}"
    );
    stop(&mut relay);

    // Committed while no relay streams: in the slot, not confirmed. One of
    // them is inserted after a savepoint, so its row carries the
    // subtransaction's id, not the one the slot reports.
    let mut unconfirmed = enqueue_events(pool, &exchange, 30, 3, 5).await;
    let mut transaction = pool.begin().await.expect("begin");
    let mut savepoint = transaction.begin().await.expect("savepoint");
    let after_savepoint = OutboxWriter::new()
        .enqueue_messages(&mut savepoint, shipment_messages(&exchange, 100, 1, 1))
        .await
        .expect("enqueue after a savepoint");
    savepoint.commit().await.expect("release the savepoint");
    transaction.commit().await.expect("commit");
    unconfirmed.extend(after_savepoint);
    // Still open while the command runs, committed after it: a producer
    // that goes on writing.
    let mut open = pool.begin().await.expect("begin");
    let committed_after = OutboxWriter::new()
        .enqueue_messages(&mut open, shipment_messages(&exchange, 200, 1, 1))
        .await
        .expect("enqueue in an open transaction");

    let left = leave_logical(&database);
    open.commit().await.expect("commit after the command");
    let stdout = String::from_utf8_lossy(&left.stdout);
    assert!(
        left.status.success(),
        "leave-logical failed: {}",
        String::from_utf8_lossy(&left.stderr)
    );
    assert!(
        stdout.starts_with(&format!(
            "{} streamed event(s) the slot had confirmed were marked published; {} event(s)",
            streamed.len(),
            unconfirmed.len()
        )),
        "{stdout}"
    );
    let slot = database.slot.as_str();
    assert_eq!(
        count(
            &database,
            &format!("SELECT COUNT(*) FROM pg_replication_slots WHERE slot_name = '{slot}'")
        )
        .await,
        0,
        "the slot is dropped"
    );
    assert_eq!(
        count(
            &database,
            &format!("SELECT COUNT(*) FROM pg_publication WHERE pubname = '{slot}'")
        )
        .await,
        0,
        "the publication is dropped"
    );
    let published = count(
        &database,
        "SELECT COUNT(*) FROM outbox_events WHERE state = 'published'",
    )
    .await;
    assert_eq!(published, streamed.len() as i64);

    // Polling publishes the rest, and none of the confirmed events again.
    let mut polling = RelayProcess::spawn(database.db.url(), &broker, FAST_CONFIG);
    let enqueued: Vec<uuid::Uuid> = streamed
        .iter()
        .chain(&unconfirmed)
        .chain(&committed_after)
        .copied()
        .collect();
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() >= enqueued.len()
                && count(
                    &database,
                    "SELECT COUNT(*) FROM outbox_events WHERE state <> 'published'",
                )
                .await
                    == 0
        })
        .await,
        "{} of {} events arrived after leaving the logical source:\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        polling.log()
    );
    let received = collected.snapshot();
    check_delivery(&enqueued, &received);
    for event_id in &streamed {
        let copies = received
            .iter()
            .filter(|message| message.ce_id == event_id.to_string())
            .count();
        assert_eq!(
            copies, 1,
            "event {event_id} was confirmed, then published again"
        );
    }
    stop(&mut polling);

    // Run again, there is no slot left to leave: a one-line error.
    let again = leave_logical(&database);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("there is no replication slot `{slot}`")),
        "{stderr}"
    );
}

/// `leave-logical`, then `run --source logical` again with no polling
/// relay in between: the new slot's backlog is what `leave-logical` left
/// pending, published from the table; the events the old slot confirmed
/// are not published again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logical_again_after_leave_logical_publishes_what_it_left_pending() {
    let database = LogicalDatabase::new().await;
    let exchange = unique_name("logical_leave_again");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let pool = database.db.pool();

    let (mut relay, streamed) =
        streamed_and_confirmed(&database, &broker, &exchange, &collected, 20).await;
    stop(&mut relay);
    let left_pending = enqueue_events(pool, &exchange, 15, 3, 5).await;
    let left = leave_logical(&database);
    assert!(
        left.status.success(),
        "leave-logical failed: {}",
        String::from_utf8_lossy(&left.stderr)
    );

    let mut relay = database.spawn_relay(&broker);
    let enqueued: Vec<uuid::Uuid> = streamed.iter().chain(&left_pending).copied().collect();
    let duplicates = all_arrive(&enqueued, &collected, &relay, DELIVERY_WAIT).await;
    assert_eq!(
        duplicates, 0,
        "the confirmed events are not published again"
    );
    stop(&mut relay);
}
