//! A slot's backlog: the events committed before the slot existed are
//! published (each aggregate's before its streamed events), however the
//! slot comes to exist, with the writers started first as in production,
//! and through SIGKILLs, a frozen relay and three relays racing to create
//! the slot. Every slot is dropped by the database's guard.

use std::time::Duration;

use outbox_relay::operator::RetentionSettings;
use outbox_relay::operator::run_logical_retention_pass;
use outbox_testkit::{Collected, kafka, rabbitmq, unique_name};
use tokio_util::sync::CancellationToken;

use crate::harness::{DELIVERY_WAIT, LogicalDatabase, WAIT, all_arrive, insert_event, stop};
use crate::support::http::{endpoint_address, get, sample};
use crate::support::process::{RelayProcess, random_millis, wait_until};
use crate::support::service_control::freeze;
use crate::support::workload::{WriterPlan, events_without_failures, join_writers, spawn_writers};

/// The writers' aggregates: writer `w` writes `w{w}-0` to `w{w}-9`.
const AGGREGATES_PER_WRITER: u64 = 10;

/// Insert `count` events by plain SQL in one statement (no `ANALYZE`),
/// spread over the aggregates of writer 0, in transactions of
/// `per_transaction`; returns their event ids in id order.
async fn plain_sql_backlog(
    pool: &sqlx::PgPool,
    topic: &str,
    count: i64,
    per_transaction: i64,
) -> Vec<uuid::Uuid> {
    let mut first = 0;
    while first < count {
        let last = (first + per_transaction).min(count);
        sqlx::query(
            "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
             SELECT gen_random_uuid(), 'shipment.moved', '/shipments', 'shipment', \
                    'w0-' || (n % $4), $1, jsonb_build_object('backlog', n) \
             FROM generate_series($2::bigint, $3::bigint - 1) AS n ORDER BY n",
        )
        .bind(topic)
        .bind(first)
        .bind(last)
        .bind(AGGREGATES_PER_WRITER as i64)
        .execute(pool)
        .await
        .expect("insert the backlog");
        first = last;
    }
    let ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT event_id FROM outbox_events WHERE topic = $1 ORDER BY id")
            .bind(topic)
            .fetch_all(pool)
            .await
            .expect("backlog ids");
    assert_eq!(ids.len() as i64, count);
    ids
}

fn writer_plan(at_least: u64) -> WriterPlan {
    WriterPlan {
        writer: 0,
        aggregates: AGGREGATES_PER_WRITER,
        at_least,
        pause: Duration::from_millis(20),
    }
}

/// A writer commits before the first relay starts; the relay creates the
/// slot and is SIGKILLed again and again while the writer goes on:
/// nothing committed before the slot existed, or between the kills, is
/// lost, and each aggregate keeps its order.
async fn writer_before_relay_through_kills(broker: &str, collected: Collected, target: &str) {
    let database = LogicalDatabase::without_slot().await;
    let pool = database.db.pool();
    let stop_writing = CancellationToken::new();
    let writers = spawn_writers(pool, target, 2, writer_plan(300), &stop_writing);
    database.until_committed(100).await;
    for _ in 0..4 {
        let relay = database.spawn_relay(broker);
        let before = collected.distinct_ids().len();
        let progressed = wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() > before
        })
        .await;
        assert!(progressed, "the relay never published:\n{}", relay.log());
        tokio::time::sleep(random_millis(100, 1_200)).await;
        relay.kill9();
    }
    stop_writing.cancel();
    let enqueued = events_without_failures(join_writers(writers).await);
    let mut relay = database.spawn_relay(broker);
    let duplicates = all_arrive(&enqueued, &collected, &relay, DELIVERY_WAIT).await;
    eprintln!("{} events, {duplicates} published twice", enqueued.len());
    stop(&mut relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_started_after_the_writers_loses_nothing_through_kills_on_rabbitmq() {
    let exchange = unique_name("logical_backlog_kills");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    writer_before_relay_through_kills(&rabbitmq::amqp_url(), collected, &exchange).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_started_after_the_writers_loses_nothing_through_kills_on_kafka() {
    let topic = unique_name("logical_backlog_kills");
    let collected = kafka::topic_consumer(&topic, 3).await;
    let broker = format!("kafka://{}", kafka::brokers());
    writer_before_relay_through_kills(&broker, collected, &topic).await;
}

/// A backlog written by plain SQL, a writer on the same aggregates, then
/// three relays started at once, racing to create the slot; one is frozen
/// past its lease while it may hold the stream, and one is SIGKILLed.
/// Every event arrives, each aggregate's backlog before its streamed
/// events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_relays_racing_to_create_the_slot_publish_the_whole_backlog() {
    let database = LogicalDatabase::without_slot().await;
    let pool = database.db.pool();
    let exchange = unique_name("logical_backlog_race");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let backlog = plain_sql_backlog(pool, &exchange, 3000, 10).await;
    let stop_writing = CancellationToken::new();
    let writers = spawn_writers(pool, &exchange, 1, writer_plan(200), &stop_writing);

    let relays: Vec<RelayProcess> = (0..3).map(|_| database.spawn_relay(&broker)).collect();
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() > 100
        })
        .await,
        "the relays publish:\n{}",
        relays[0].log()
    );
    let slots = database
        .db
        .count(&format!(
            "SELECT COUNT(*) FROM pg_replication_slots WHERE slot_name = '{}'",
            database.slot.as_str()
        ))
        .await;
    assert_eq!(slots, 1, "the racing relays made one slot");
    let mut relays = relays;
    for relay in &mut relays {
        assert!(
            relay.is_running(),
            "every racing relay started:\n{}",
            relay.log()
        );
    }
    let mut relays = relays.into_iter();
    let frozen = relays.next().expect("relay");
    let killed = relays.next().expect("relay");
    let mut last = relays.next().expect("relay");
    {
        let _thawed_on_drop = freeze(frozen.pid());
        tokio::time::sleep(Duration::from_secs(3)).await;
        killed.kill9();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    stop_writing.cancel();
    let written = events_without_failures(join_writers(writers).await);
    let enqueued: Vec<uuid::Uuid> = backlog.iter().chain(&written).copied().collect();
    let duplicates = all_arrive(&enqueued, &collected, &last, DELIVERY_WAIT).await;
    eprintln!("{} events, {duplicates} published twice", enqueued.len());
    frozen.kill9();
    stop(&mut last);
}

/// Three relays started while a writer's transaction is open: each waits
/// to create the source's indexes (CREATE INDEX waits for the writer), and
/// once the writer commits they must not race on the catalog. All three
/// start, and the writer's event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_started_during_an_open_write_all_start() {
    let database = LogicalDatabase::without_slot().await;
    let exchange = unique_name("logical_backlog_open_write");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let mut open = database.db.pool().begin().await.expect("begin");
    insert_event(&mut open, &exchange, "open-write", 0).await;

    let mut relays: Vec<RelayProcess> = (0..3).map(|_| database.spawn_relay(&broker)).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    open.commit().await.expect("commit the open write");
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() == 1
        })
        .await,
        "the writer's event arrives:\n{}",
        relays[0].log()
    );
    for relay in &mut relays {
        assert!(relay.is_running(), "every relay started:\n{}", relay.log());
    }
    for relay in &mut relays {
        stop(relay);
    }
}

/// `migrate --source logical` over a database that already holds pending
/// events: they are the slot's backlog, counted by `status` as pending
/// (not stream-owned), then published by the relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_over_pending_events_counts_them_as_the_slots_backlog() {
    let database = LogicalDatabase::without_slot().await;
    let pool = database.db.pool();
    let exchange = unique_name("logical_backlog_migrate");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let backlog = plain_sql_backlog(pool, &exchange, 100, 10).await;

    let migrated = database.command(&["migrate", "--source", "logical"]);
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let status = database.status_json_with(&["--source", "logical"]);
    assert_eq!(status["pending"], 100, "{status}");
    assert_eq!(status["stream_owned"], 0, "{status}");
    let slot_backlog = &status["slot_backlogs"][0];
    assert_eq!(slot_backlog["slot"], database.slot.as_str(), "{status}");
    assert_eq!(slot_backlog["remaining"], 100, "{status}");
    assert_eq!(slot_backlog["not_handed_over"], 100, "{status}");
    assert!(slot_backlog["oldest_at"].is_string(), "{status}");

    let mut relay = database.spawn_relay(&rabbitmq::amqp_url());
    all_arrive(&backlog, &collected, &relay, DELIVERY_WAIT).await;
    assert!(
        wait_until(WAIT, || async {
            let status = database.status_json_with(&["--source", "logical"]);
            status["pending"] == 0 && status["slot_backlogs"] == serde_json::json!([])
        })
        .await,
        "the backlog is marked published once acknowledged: {}",
        database.status_json_with(&["--source", "logical"])
    );
    stop(&mut relay);
}

/// A backlog not yet handed over looks stream-owned (pending, untouched)
/// once the slot has confirmed past a retention checkpoint, but no slot
/// ever streamed it: retention and `replay` leave it alone, while an event
/// the slot did stream, beside it, is deleted by the same passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_and_replay_leave_a_backlog_not_yet_handed_over_alone() {
    let database = LogicalDatabase::without_slot().await;
    let pool = database.db.pool();
    let topic = unique_name("logical_backlog_guards");
    let backlog = plain_sql_backlog(pool, &topic, 50, 10).await;
    let migrated = database.command(&["migrate", "--source", "logical"]);
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let mut streamed = pool.begin().await.expect("begin");
    let streamed_id = insert_event(&mut streamed, &topic, "streamed", 0).await;
    streamed.commit().await.expect("commit");

    let mut settings = RetentionSettings::default();
    settings.keep_published = Duration::ZERO;
    settings.interval = Duration::ZERO;
    settings.batch_size = 10;
    // Each pass takes a checkpoint; the slot is then moved past it, as a
    // relay that streamed and confirmed everything would.
    let streamed_deleted = wait_until(WAIT, || async {
        run_logical_retention_pass(pool, database.store.as_ref(), &database.slot, &settings)
            .await
            .expect("retention pass");
        sqlx::query("SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())")
            .bind(database.slot.as_str())
            .execute(pool)
            .await
            .expect("advance the slot");
        database
            .db
            .count(&format!(
                "SELECT COUNT(*) FROM outbox_events WHERE id = {streamed_id}"
            ))
            .await
            == 0
    })
    .await;
    assert!(streamed_deleted, "retention deletes the streamed event");
    let kept = database
        .db
        .count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending' AND attempts = 0")
        .await;
    assert_eq!(kept, backlog.len() as i64, "retention keeps the backlog");

    let replay = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["replay", "--database-url", database.db.url()])
        .args(["--broker", "stdout", "--topic", &topic, "--since", "1h"])
        .args(["--source", "logical", "--slot", database.slot.as_str()])
        .output()
        .expect("run replay");
    let stdout = String::from_utf8_lossy(&replay.stdout);
    let stderr = String::from_utf8_lossy(&replay.stderr);
    assert!(replay.status.success(), "{stderr}");
    assert!(
        !backlog
            .iter()
            .any(|event_id| stdout.contains(&event_id.to_string())),
        "replay leaves the backlog out: {stdout}"
    );
    // With `--broker stdout` the events go to stdout, the summary to stderr.
    let summary = format!("0 event(s) of topic `{topic}` replayed");
    assert!(
        stdout
            .lines()
            .chain(stderr.lines())
            .any(|line| line.starts_with(&summary)),
        "{stdout}\n{stderr}"
    );
    let status = database.status_json_with(&["--source", "logical"]);
    assert_eq!(
        status["slot_backlogs"][0]["not_handed_over"],
        backlog.len(),
        "{status}"
    );
}

/// 100,000 events written by plain SQL without `ANALYZE`, then the relay,
/// SIGKILLed while it publishes the backlog, with a writer on the same
/// aggregates meanwhile: every event arrives, each aggregate's backlog
/// before the writer's events; `/readyz`, `/metrics` and `status` show the backlog
/// while it lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_of_100000_events_is_published_before_the_writers_events() {
    let database = LogicalDatabase::without_slot().await;
    let pool = database.db.pool();
    let exchange = unique_name("logical_backlog_large");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let backlog = plain_sql_backlog(pool, &exchange, 100_000, 1_000).await;
    let stop_writing = CancellationToken::new();
    let writers = spawn_writers(pool, &exchange, 1, writer_plan(300), &stop_writing);

    let relay = database.spawn_relay(&broker);
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() > 5_000
        })
        .await,
        "the relay publishes the backlog:\n{}",
        relay.log()
    );
    let status = database.status_json_with(&["--source", "logical"]);
    let remaining = status["slot_backlogs"][0]["remaining"]
        .as_i64()
        .unwrap_or(0);
    assert!(
        remaining > 0,
        "the backlog is still being published: {status}"
    );
    let address = endpoint_address(&relay).await;
    // A loaded machine can see the broker connection being reopened for a
    // moment ("not ready: broker not connected"): ask again meanwhile.
    let says_backlog = wait_until(WAIT, || async {
        get(&address, "/readyz")
            .await
            .body
            .starts_with("ready: publishing the backlog of slot")
    })
    .await;
    assert!(
        says_backlog,
        "/readyz says the backlog is being published: {}",
        get(&address, "/readyz").await.body
    );
    let metrics = get(&address, "/metrics").await;
    assert!(
        sample(&metrics.body, "outbox_relay_slot_backlog_events")
            .is_some_and(|events| events > 0.0),
        "{}",
        metrics.body
    );
    relay.kill9();

    let mut relay = database.spawn_relay(&broker);
    stop_writing.cancel();
    let written = events_without_failures(join_writers(writers).await);
    let enqueued: Vec<uuid::Uuid> = backlog.iter().chain(&written).copied().collect();
    let duplicates = all_arrive(&enqueued, &collected, &relay, Duration::from_secs(600)).await;
    eprintln!("{} events, {duplicates} published twice", enqueued.len());
    stop(&mut relay);
}
