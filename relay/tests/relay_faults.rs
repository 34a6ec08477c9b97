//! The relay binary under faults: SIGKILL mid-batch, three relays on one
//! database, SIGTERM (also with a batch waiting for its confirms), lease
//! rows locked by another session, and events the broker always rejects.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use outbox_testkit::{Collected, TcpProxy, TestDatabase, kafka, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, random_millis, wait_until};
use support::workload::{check_delivery, enqueue_events, unexplained_duplicates};

fn kafka_broker() -> String {
    format!("kafka://{}", kafka::brokers())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_at_random_moments_loses_nothing_and_keeps_order() {
    // Kills that find events still to publish; kills that find the table
    // drained (a fast machine) do not count, and the backlog is topped up.
    const KILLS_MID_RUN: usize = 5;
    const MAX_KILLS: usize = 4 * KILLS_MID_RUN;
    const BACKLOG: u64 = 5_000;
    // Small batches keep the drain slow enough for the kills to land
    // mid-run, and make each kill cut through batches in flight.
    const BATCH_SIZE: usize = 50;
    // At a kill: one batch publishing, one prefetched, up to three marking.
    const BATCHES_IN_FLIGHT: usize = 5;
    let config = FAST_CONFIG.replace("batch_size = 500", &format!("batch_size = {BATCH_SIZE}"));
    assert!(
        config.contains("batch_size = 50\n"),
        "the test config sets the batch size"
    );
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("sigkill");
    let collected = kafka::topic_consumer(&topic, 3).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let published = || db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'");
    let unpublished = || db.count("SELECT COUNT(*) FROM outbox_events WHERE state <> 'published'");

    let mut enqueued = Vec::new();
    let mut kills = 0;
    let mut kills_mid_run = 0;
    while kills_mid_run < KILLS_MID_RUN {
        assert!(
            kills < MAX_KILLS,
            "only {kills_mid_run} of {kills} kills found events still to publish"
        );
        if unpublished().await < BACKLOG as i64 / 2 {
            enqueued.extend(enqueue_events(db.pool(), &topic, BACKLOG, 200, 500).await);
        }
        let relay = RelayProcess::spawn(db.url(), &kafka_broker(), &config);
        // Let it take its leases over (the previous relay's expire after 2 s)
        // and publish for a random while, then kill it mid-batch.
        let before = published().await;
        let progressed = wait_until(Duration::from_secs(30), || async {
            published().await > before
        })
        .await;
        assert!(
            progressed,
            "relay {kills} never published:\n{}",
            relay.log()
        );
        tokio::time::sleep(random_millis(10, 150)).await;
        // Frozen, the relay cannot publish or mark: what the table holds now
        // is what the kill leaves behind.
        relay.signal("STOP");
        if unpublished().await > 0 {
            kills_mid_run += 1;
        }
        relay.kill9();
        kills += 1;
    }

    let mut relay = RelayProcess::spawn(db.url(), &kafka_broker(), &config);
    let drained = wait_until(Duration::from_secs(120), || async {
        collected.distinct_ids().len() >= enqueued.len()
    })
    .await;
    assert!(relay.is_running(), "the last relay exited");
    assert!(
        drained,
        "only {} of {} events arrived",
        collected.distinct_ids().len(),
        enqueued.len()
    );
    assert!(
        wait_until(Duration::from_secs(30), || async {
            unpublished().await == 0
        })
        .await,
        "every event ends published"
    );

    let duplicates = check_delivery(&enqueued, &collected.snapshot());
    assert!(
        duplicates <= kills * BATCHES_IN_FLIGHT * BATCH_SIZE,
        "{duplicates} duplicates: more than the batches in flight at {kills} kills"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_relays_share_the_work_without_double_publishing() {
    const EVENTS: u64 = 20_000;
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("three");
    let collected = kafka::topic_consumer(&topic, 3).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &topic, EVENTS, 200, 500).await;

    let mut relays: Vec<RelayProcess> = (0..3)
        .map(|_| RelayProcess::spawn(db.url(), &kafka_broker(), FAST_CONFIG))
        .collect();
    let drained = wait_until(Duration::from_secs(120), || async {
        collected.distinct_ids().len() >= enqueued.len()
    })
    .await;
    for relay in &mut relays {
        assert!(relay.is_running(), "a relay exited");
    }
    assert!(
        drained,
        "only {} of {EVENTS} events arrived",
        collected.distinct_ids().len()
    );

    let received = collected.snapshot();
    check_delivery(&enqueued, &received);
    let logs: Vec<String> = relays.iter().map(RelayProcess::log).collect();
    assert_eq!(
        unexplained_duplicates(&received, &logs),
        Vec::<String>::new(),
        "no event is published by two relays, nor twice but what one counted as not sent"
    );
    let owners = db.count("SELECT COUNT(DISTINCT lease_owner) FROM outbox_partitions WHERE lease_expires_at > now()",
    )
    .await;
    assert_eq!(owners, 3, "the partitions are spread over the three relays");
    for relay in &relays {
        assert!(
            relay.log().contains("acquired partitions"),
            "every relay held partitions"
        );
    }
}

/// After a graceful stop: no lease is held and no relay is registered.
async fn assert_leases_released(db: &TestDatabase<sqlx::Postgres>) {
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_partitions WHERE lease_owner IS NOT NULL")
            .await,
        0,
        "no lease is left held"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_relays").await,
        0,
        "the relay deregistered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_exits_zero_and_releases_every_lease() {
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("sigterm");
    let collected = kafka::topic_consumer(&topic, 1).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &topic, 2_000, 20, 100).await;

    let mut relay = RelayProcess::spawn(db.url(), &kafka_broker(), FAST_CONFIG);
    assert!(
        wait_until(Duration::from_secs(60), || async {
            collected.distinct_ids().len() >= enqueued.len()
        })
        .await,
        "events arrived"
    );
    assert!(
        db.count("SELECT COUNT(*) FROM outbox_partitions WHERE lease_owner IS NOT NULL")
            .await
            > 0
    );

    relay.signal("TERM");
    let status = relay
        .wait_exit(Duration::from_secs(30))
        .expect("the relay stops after SIGTERM");
    assert!(
        status.success(),
        "exit status after SIGTERM: {status:?}\n{}",
        relay.log()
    );
    assert_leases_released(&db).await;
    check_delivery(&enqueued, &collected.snapshot());
}

/// Ids of `events` (as text) the consumer has received.
fn received_of(collected: &Collected, events: &[uuid::Uuid]) -> usize {
    let received = collected.distinct_ids();
    events
        .iter()
        .filter(|id| received.contains(&id.to_string()))
        .count()
}

/// A SIGTERM that arrives while the relay still connects (here to a
/// database that accepts the connection and never answers) stops it with
/// exit 0, as in service, not by the signal's default action.
/// A session that locks every lease row keeps the relay from renewing:
/// each lease statement gives up after a lease duration and says why, so
/// the batch loop is never stuck behind it silently; once the lock is
/// gone, every event is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_statement_stuck_on_a_lock_is_logged_and_the_relay_goes_on_once_it_is_free() {
    const EVENTS: u64 = 200;
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut relay = RelayProcess::spawn(db.url(), "stdout", FAST_CONFIG);
    let leased = wait_until(Duration::from_secs(60), || async {
        db.count("SELECT COUNT(*) FROM outbox_partitions WHERE lease_expires_at > now()")
            .await
            > 0
    })
    .await;
    assert!(leased, "the relay never took a lease:\n{}", relay.log());

    let mut locker = db.pool().begin().await.expect("begin");
    sqlx::query("SELECT partition_no FROM outbox_partitions FOR UPDATE")
        .fetch_all(&mut *locker)
        .await
        .expect("lock every lease row");
    let offset = relay.log().len();
    let said = wait_until(Duration::from_secs(60), || async {
        relay
            .log()
            .get(offset..)
            .is_some_and(|log| log.contains("did not finish within lease_duration"))
    })
    .await;
    assert!(
        said,
        "no lease statement gave up while the rows were locked:\n{}",
        relay.log()
    );
    let enqueued = enqueue_events(db.pool(), "stuck_lease", EVENTS, 10, 20).await;
    locker.rollback().await.expect("release the lock");

    let published = wait_until(Duration::from_secs(120), || async {
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'")
            .await
            == enqueued.len() as i64
    })
    .await;
    assert!(
        published,
        "the relay did not publish everything once the lock was gone:\n{}",
        relay.log()
    );
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|status| status.success()),
        "the relay did not exit 0 on SIGTERM: {status:?}\n{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_while_starting_exits_zero() {
    let silent_database = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a silent database");
    let url = format!(
        "postgres://postgres@{}/never_answers?sslmode=disable",
        silent_database.local_addr().expect("its address")
    );
    let mut relay = RelayProcess::spawn(&url, "stdout", FAST_CONFIG);
    // The relay connects only after it has started catching signals.
    let (held_connection, _) =
        tokio::time::timeout(Duration::from_secs(60), silent_database.accept())
            .await
            .unwrap_or_else(|_| panic!("the relay never connected:\n{}", relay.log()))
            .expect("accept the relay's connection");
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(30));
    drop(held_connection);
    assert!(
        status.is_some_and(|status| status.success()),
        "a relay stopped while starting exits 0, not {status:?}:\n{}",
        relay.log()
    );
    assert!(
        relay.log().contains("stopped while starting"),
        "the relay says it stopped while starting:\n{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_mid_batch_waits_for_the_broker_marks_the_batch_and_exits_zero() {
    // One event per aggregate: the batch goes out in one wave, all of it
    // in flight when the stop comes.
    const IN_FLIGHT: u64 = 200;
    let db = outbox_testkit::postgres().await;
    let exchange = unique_name("stop-mid-batch");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    // The relay reaches RabbitMQ through a proxy, which holds the broker's
    // confirms back; the confirm wait outlasts the hold.
    let broker = TcpProxy::in_front_of(&rabbitmq::amqp_url()).await;
    let config = FAST_CONFIG
        .replace("lease_duration = \"2s\"", "lease_duration = \"40s\"")
        .replace("publish_timeout = \"800ms\"", "publish_timeout = \"15s\"")
        .replace("confirm_timeout = \"500ms\"", "confirm_timeout = \"10s\"");
    let mut relay = RelayProcess::spawn(db.url(), &broker.route(&rabbitmq::amqp_url()), &config);
    let published = || db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'");

    // A first round connects the relay to the broker and leaves it idle.
    let mut enqueued = enqueue_events(db.pool(), &exchange, 100, 10, 100).await;
    assert!(
        wait_until(Duration::from_secs(60), || async {
            published().await == 100
        })
        .await,
        "the first round was never published:\n{}",
        relay.log()
    );

    // Every confirm from now on is held: once the consumer sees an event of
    // the next batch, that batch waits for its confirms.
    broker.hold_to_client();
    let in_flight = enqueue_events(db.pool(), &exchange, IN_FLIGHT, IN_FLIGHT, IN_FLIGHT).await;
    assert!(
        wait_until(Duration::from_secs(60), || async {
            received_of(&collected, &in_flight) > 0
        })
        .await,
        "the batch never reached the broker:\n{}",
        relay.log()
    );
    relay.signal("TERM");
    assert!(
        wait_until(Duration::from_secs(30), || async {
            relay.log().contains("stop requested")
        })
        .await,
        "the relay never noticed SIGTERM:\n{}",
        relay.log()
    );
    assert!(
        relay.is_running(),
        "the relay exited with its batch in flight"
    );
    assert_eq!(
        published().await,
        100,
        "nothing of the batch is marked before the broker confirms it"
    );

    broker.release_held();
    let status = relay
        .wait_exit(Duration::from_secs(30))
        .expect("the relay stops once the broker confirms");
    assert!(
        status.success(),
        "exit status after SIGTERM: {status:?}\n{}",
        relay.log()
    );
    assert_eq!(
        published().await,
        100 + IN_FLIGHT as i64,
        "the batch in flight is marked published:\n{}",
        relay.log()
    );
    assert_leases_released(&db).await;
    enqueued.extend(in_flight);
    assert!(
        wait_until(Duration::from_secs(30), || async {
            collected.distinct_ids().len() >= enqueued.len()
        })
        .await,
        "every event arrives"
    );
    let received = collected.snapshot();
    check_delivery(&enqueued, &received);
    assert_eq!(
        unexplained_duplicates(&received, &[relay.log()]),
        Vec::<String>::new(),
        "a graceful stop publishes nothing twice but what the relay counted as not sent"
    );
}

/// Enqueue, in this order: one `bad` aggregate event to `bad_exchange`,
/// 15 events over good aggregates, one more `bad` aggregate event, then 185
/// more good ones, all but the first to `good_exchange`. With batches of
/// 10, the later `bad` event lands in the batch fetched while the first one
/// fails. Returns the good event ids and the later `bad` one.
async fn enqueue_with_a_rejected_event(
    db: &TestDatabase<sqlx::Postgres>,
    bad_exchange: &str,
    good_exchange: &str,
) -> (Vec<uuid::Uuid>, uuid::Uuid) {
    let payload =
        || serde_json::value::to_raw_value(&serde_json::json!({"n": 1})).expect("payload");
    let message = |aggregate_id: String, exchange: &str| {
        outbox::OutboxMessage::new(
            "shipment.moved",
            "/shipments",
            "shipment",
            aggregate_id,
            exchange,
            payload(),
        )
    };
    let mut messages = vec![message("bad".to_owned(), bad_exchange)];
    messages.extend((0..15).map(|n| message(format!("good-{}", n % 20), good_exchange)));
    messages.push(message("bad".to_owned(), good_exchange));
    messages.extend((15..200).map(|n| message(format!("good-{}", n % 20), good_exchange)));
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    let later_bad = ids[16];
    let good = ids[1..16].iter().chain(&ids[17..]).copied().collect();
    (good, later_bad)
}

async fn rejected_event_is_dead_lettered(
    policy: &str,
) -> (
    TestDatabase<sqlx::Postgres>,
    Collected,
    uuid::Uuid,
    RelayProcess,
) {
    let db = outbox_testkit::postgres().await;
    let good_exchange = unique_name("good");
    let missing_exchange = unique_name("never-declared");
    let collected = rabbitmq::exchange_consumer(&good_exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let (good, later_bad) =
        enqueue_with_a_rejected_event(&db, &missing_exchange, &good_exchange).await;

    // Small batches: the events after the rejected one come in later,
    // prefetched batches, which must hold its aggregate back too.
    let config = format!(
        "{}\n[dead_letter]\npolicy = \"{policy}\"\n",
        FAST_CONFIG.replace("batch_size = 500", "batch_size = 10")
    );
    let relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), &config);
    assert!(
        wait_until(Duration::from_secs(60), || async {
            db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'dead'")
                .await
                == 1
        })
        .await,
        "the rejected event is dead-lettered after its attempts"
    );
    assert!(
        wait_until(Duration::from_secs(60), || async {
            let received: HashSet<String> = collected
                .snapshot()
                .into_iter()
                .map(|message| message.ce_id)
                .collect();
            good.iter().all(|id| received.contains(&id.to_string()))
        })
        .await,
        "other aggregates are unaffected"
    );
    assert_eq!(
        db.count(&format!(
                "SELECT COUNT(*) FROM outbox_events WHERE state = 'dead' AND attempts = 3 \
                 AND aggregate_id = 'bad' AND topic = '{missing_exchange}' AND last_error LIKE '%{missing_exchange}%'"
            )
        )
        .await,
        1,
        "the dead event keeps its attempts and its last error"
    );
    (db, collected, later_bad, relay)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_always_rejected_event_is_dead_lettered_and_holds_its_aggregate() {
    // The relay keeps running through the checks below.
    let (db, collected, later_bad, _relay) = rejected_event_is_dead_lettered("hold").await;
    // Give the relay time to (wrongly) publish the held event.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received: HashSet<String> = collected
        .snapshot()
        .into_iter()
        .map(|message| message.ce_id)
        .collect();
    assert!(
        !received.contains(&later_bad.to_string()),
        "the dead event holds its aggregate"
    );
    assert_eq!(
        db.count(&format!("SELECT COUNT(*) FROM outbox_events WHERE event_id = '{later_bad}' AND state = 'pending'")).await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_the_skip_policy_a_dead_event_lets_its_aggregate_continue() {
    let (_db, collected, later_bad, _relay) = rejected_event_is_dead_lettered("skip").await;
    assert!(
        wait_until(Duration::from_secs(30), || async {
            collected
                .snapshot()
                .iter()
                .any(|message| message.ce_id == later_bad.to_string())
        })
        .await,
        "the aggregate continues past its dead event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_cannot_start_exits_with_the_reason() {
    let db = outbox_testkit::postgres().await;
    // No migration and --skip-migrate: the partition table is missing.
    let mut relay =
        RelayProcess::spawn_with_args(db.url(), "stdout", FAST_CONFIG, &[], &["--skip-migrate"]);
    let status = relay.wait_exit(Duration::from_secs(60)).unwrap_or_else(|| {
        panic!(
            "the relay kept running without its tables:\n{}",
            relay.log()
        )
    });
    assert!(!status.success(), "{}", relay.log());
    let log = relay.log();
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("outbox-relay: ") && last.contains("outbox_partitions"),
        "the last line names the missing table: {last}"
    );
}
