//! `outbox-relay recover-slot` after a slot is lost, end to end on Kafka:
//! the loss is simulated by dropping the slot while the relay is stopped
//! (the recovery does not depend on how the slot went; the real
//! invalidation is in `service_restarts/logical.rs`). Events published
//! before, committed while no slot existed, and committed after the
//! recovery all reach the broker, each aggregate in order, with no
//! hand-written SQL; and the recovery refuses to run while a relay streams.

use outbox_relay::operator::recover_slot;
use outbox_relay::source::logical::HANDED_OVER_NOTE;
use outbox_testkit::{Collected, kafka, unique_name};

use crate::harness::{DELIVERY_WAIT, LogicalDatabase, WAIT, all_arrive, stop};
use crate::support::process::{RelayProcess, wait_until};
use crate::support::workload::enqueue_events;

/// A relay streaming to `broker`, and the 20 events it published.
async fn streaming_relay(
    database: &LogicalDatabase,
    broker: &str,
    topic: &str,
    collected: &Collected,
) -> (RelayProcess, Vec<uuid::Uuid>) {
    let relay = database.spawn_relay(broker);
    let before = enqueue_events(database.db.pool(), topic, 20, 4, 5).await;
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() >= before.len()
        })
        .await,
        "the relay streams:\n{}",
        relay.log()
    );
    (relay, before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recover_slot_recreates_the_slot_and_every_event_reaches_the_broker() {
    let database = LogicalDatabase::new().await;
    let topic = unique_name("logical_recover");
    let collected = kafka::topic_consumer(&topic, 3).await;
    let broker = format!("kafka://{}", kafka::brokers());
    let pool = database.db.pool();
    let (mut relay, before) = streaming_relay(&database, &broker, &topic, &collected).await;

    // While a relay holds the stream's lease the recovery is refused,
    // naming the holder, and changes nothing.
    let refused = database.recover_slot("1h");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "not refused: {stderr}");
    let last_line = stderr.lines().last().unwrap_or_default();
    assert!(
        last_line.starts_with("outbox-relay: the stream's lease is held by"),
        "{stderr}"
    );
    stop(&mut relay);

    // The loss: what is committed from here on never reaches the old slot.
    let since = database.database_now().await;
    let during = enqueue_events(pool, &topic, 30, 4, 5).await;
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(database.slot.as_str())
        .execute(pool)
        .await
        .expect("drop the slot: the simulated loss");

    let recovered = database.recover_slot(&since);
    let stdout = String::from_utf8_lossy(&recovered.stdout);
    assert!(
        recovered.status.success(),
        "recover-slot failed: {}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    assert!(
        stdout.contains(&format!("{} event(s) created from", during.len())),
        "the events committed since --since are handed over, none before: {stdout}"
    );
    let slots: i64 = database
        .db
        .count(&format!(
            "SELECT COUNT(*) FROM pg_replication_slots WHERE slot_name = '{}'",
            database.slot.as_str()
        ))
        .await;
    assert_eq!(slots, 1, "the slot exists again");
    let status = database.status_json_with(&["--source", "logical"]);
    assert_eq!(
        status["pending"],
        during.len(),
        "the handed-over events wait for the relays: {status}"
    );

    let after = enqueue_events(pool, &topic, 20, 4, 5).await;
    let mut relay = database.spawn_relay(&broker);
    let enqueued: Vec<uuid::Uuid> = before
        .iter()
        .chain(&during)
        .chain(&after)
        .copied()
        .collect();
    let duplicates = all_arrive(&enqueued, &collected, &relay, DELIVERY_WAIT).await;
    eprintln!("{} events, {duplicates} published twice", enqueued.len());
    assert!(
        wait_until(WAIT, || async {
            database.status_json_with(&["--source", "logical"])["pending"] == 0
        })
        .await,
        "the handed-over events are marked published once acknowledged"
    );
    stop(&mut relay);
}

/// On a slot that is not lost, `recover-slot` keeps the slot and hands the
/// window over; run again, it hands over nothing more (the events are the
/// table path's already), so an interrupted recovery can simply be rerun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_slot_keeps_a_healthy_slot_and_can_run_again() {
    let database = LogicalDatabase::new().await;
    let pool = database.db.pool();
    let since = chrono::Utc::now() - chrono::Duration::hours(1);
    let written = enqueue_events(pool, "recover_again", 6, 2, 3).await;

    let first = recover_slot(pool, &database.slot, since, "recovery-test")
        .await
        .expect("recover");
    assert!(!first.dropped_lost_slot && !first.created_slot, "{first:?}");
    assert_eq!(first.handed_over, written.len() as u64, "{first:?}");
    let held = database
        .db
        .count(&format!(
            "SELECT COUNT(*) FROM outbox_events WHERE state = 'pending' AND attempts = 0 \
             AND last_error = '{HANDED_OVER_NOTE}'"
        ))
        .await;
    assert_eq!(
        held,
        written.len() as i64,
        "marked as held, no attempt used"
    );

    let again = recover_slot(pool, &database.slot, since, "recovery-test")
        .await
        .expect("recover again");
    assert_eq!(again.handed_over, 0, "{again:?}");
    let lease_free = database
        .db
        .count("SELECT COUNT(*) FROM outbox_partitions WHERE partition_no = -1 AND lease_owner IS NULL")
        .await;
    assert_eq!(lease_free, 1, "the stream's lease is released");
}

/// A change to the publication made while a relay streams (`change`, with
/// `{publication}` for its name), after which the slot skips or cannot
/// decode what commits: the relay stops with `stopped_by` in its log,
/// `migrate --source logical` refuses on one line that says so and names
/// `recover-slot`; after `recover-slot --since <before the change>` the
/// events committed meanwhile and after reach the broker, each aggregate in
/// order.
async fn a_publication_change_stops_the_relay_until_recover_slot(
    name: &str,
    change: &[&str],
    stopped_by: &str,
) {
    let database = LogicalDatabase::new().await;
    let topic = unique_name(name);
    let collected = kafka::topic_consumer(&topic, 3).await;
    let broker = format!("kafka://{}", kafka::brokers());
    let pool = database.db.pool();
    let (mut relay, before) = streaming_relay(&database, &broker, &topic, &collected).await;
    let since = database.database_now().await;
    for statement in change {
        let statement = statement.replace("{publication}", database.slot.publication());
        sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
            .execute(pool)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {error}"));
    }
    let skipped = enqueue_events(pool, &topic, 30, 4, 5).await;
    let status = relay.wait_exit(WAIT);
    assert!(
        status.is_some_and(|status| !status.success()),
        "the relay stops: {status:?}\n{}",
        relay.log()
    );
    assert!(relay.log().contains(stopped_by), "{}", relay.log());
    let refused = database.command(&["migrate", "--source", "logical"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    let last_line = stderr.lines().last().unwrap_or_default();
    let recovery = format!(
        "run `outbox-relay recover-slot --slot {} --since <a time before",
        database.slot.as_str()
    );
    assert!(
        last_line.contains(stopped_by) && last_line.contains(&recovery),
        "{stderr}"
    );

    let recovered = database.recover_slot(&since);
    assert!(
        recovered.status.success(),
        "recover-slot failed: {}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    let after = enqueue_events(pool, &topic, 20, 4, 5).await;
    let mut relay = database.spawn_relay(&broker);
    let enqueued: Vec<uuid::Uuid> = before
        .iter()
        .chain(&skipped)
        .chain(&after)
        .copied()
        .collect();
    all_arrive(&enqueued, &collected, &relay, DELIVERY_WAIT).await;
    stop(&mut relay);
}

/// The table taken out of the publication: the slot skips what commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_altered_publication_stops_the_relay_and_recover_slot_publishes_what_it_skipped() {
    a_publication_change_stops_the_relay_until_recover_slot(
        "logical_altered_publication",
        &["ALTER PUBLICATION \"{publication}\" DROP TABLE outbox_events"],
        "no longer publishes the inserts into outbox_events",
    )
    .await;
}

/// The publication dropped: the slot cannot decode what commits since, so
/// the recovery drops the slot and creates both again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_publication_stops_the_relay_and_recover_slot_publishes_what_it_missed() {
    a_publication_change_stops_the_relay_until_recover_slot(
        "logical_dropped_publication",
        &["DROP PUBLICATION \"{publication}\""],
        "is missing: it was dropped",
    )
    .await;
}

/// `outbox_events` renamed and a new one made in its place (an archive):
/// the publication follows the old table, so the new table's events are in
/// no publication; the recovery points the publication at the new table
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_renamed_under_the_publication_stops_the_relay_and_recover_slot_publishes_the_new_tables_events()
 {
    a_publication_change_stops_the_relay_until_recover_slot(
        "logical_renamed_table",
        &[
            "ALTER TABLE outbox_events RENAME TO outbox_events_archive",
            "CREATE TABLE outbox_events (LIKE outbox_events_archive INCLUDING ALL)",
        ],
        "no longer publishes the inserts into outbox_events",
    )
    .await;
}

/// An operator drops the slot under a streaming relay (its connection
/// ended first, as `pg_drop_replication_slot` requires): the relay stops
/// with one line naming `recover-slot` instead of streaming from a new
/// slot that would skip what committed meanwhile; `recover-slot` then
/// publishes those events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_dropped_under_a_running_relay_stops_it_and_recover_slot_loses_nothing() {
    let database = LogicalDatabase::new().await;
    let topic = unique_name("logical_dropped_running");
    let collected = kafka::topic_consumer(&topic, 3).await;
    let broker = format!("kafka://{}", kafka::brokers());
    let pool = database.db.pool();
    let (mut relay, before) = streaming_relay(&database, &broker, &topic, &collected).await;

    let since = database.database_now().await;
    let dropped = wait_until(WAIT, || async {
        sqlx::query(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
             WHERE slot_name = $1 AND active_pid IS NOT NULL",
        )
        .bind(database.slot.as_str())
        .execute(pool)
        .await
        .expect("end the relay's walsender");
        sqlx::query("SELECT pg_drop_replication_slot($1)")
            .bind(database.slot.as_str())
            .execute(pool)
            .await
            .is_ok()
    })
    .await;
    assert!(dropped, "the slot could not be dropped");
    let during = enqueue_events(pool, &topic, 30, 4, 5).await;
    let status = relay.wait_exit(WAIT);
    assert!(
        status.is_some_and(|status| !status.success()),
        "the relay stops once its slot is dropped: {status:?}\n{}",
        relay.log()
    );
    assert!(
        relay.log().contains("recover-slot"),
        "the stop names the recovery:\n{}",
        relay.log()
    );

    let recovered = database.recover_slot(&since);
    assert!(
        recovered.status.success(),
        "recover-slot failed: {}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    let mut relay = database.spawn_relay(&broker);
    let enqueued: Vec<uuid::Uuid> = before.iter().chain(&during).copied().collect();
    all_arrive(&enqueued, &collected, &relay, DELIVERY_WAIT).await;
    stop(&mut relay);
}
