//! A relay whose broker client breaks: a relay frozen past its lease is
//! fenced out of marking and recovers, a fenced or fatally failed Kafka
//! producer is replaced, and a relay that cannot publish hands its
//! partitions to the healthy relays instead of holding them hostage (on
//! RabbitMQ, Redis and NATS).

mod support;

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::publish::{KafkaPublisher, KafkaPublisherConfig, Publisher};
use outbox_relay::{DatabaseUrl, RelayConfig, RelayService};
use outbox_testkit::{
    Collected, TcpProxy, TestDatabase, kafka, nats as nats_kit, rabbitmq, redis as redis_kit,
    unique_name,
};
use support::http::{endpoint_address, get, sample};
use support::process::{RelayProcess, wait_until};
use support::workload::{check_delivery, enqueue_events};
use tokio_util::sync::CancellationToken;

fn kafka_broker() -> String {
    format!("kafka://{}", kafka::brokers())
}

/// Short leases, and a handover after two of them.
fn config(instance_id: &str, extra: &str) -> String {
    format!(
        r#"
batch_size = 200
lease_duration = "2s"
publish_timeout = "800ms"
poll_interval_min = "5ms"
poll_interval_max = "100ms"
shutdown_timeout = "20s"
handover_after = "4s"
instance_id = "{instance_id}"
{extra}
[http]
listen = "127.0.0.1:0"

[kafka]
message_timeout = "500ms"

[amqp]
confirm_timeout = "500ms"
connect_timeout = "500ms"

[redis]
response_timeout = "500ms"
connect_timeout = "500ms"

[nats]
ack_timeout = "500ms"
connect_timeout = "500ms"
"#
    )
}

/// Partitions `owner` holds a live lease on.
async fn leases_of(db: &TestDatabase<sqlx::Postgres>, owner: &str) -> i64 {
    db.count(&format!(
        "SELECT COUNT(*) FROM outbox_partitions \
         WHERE lease_owner = '{owner}' AND lease_expires_at > now()"
    ))
    .await
}

async fn published(db: &TestDatabase<sqlx::Postgres>) -> i64 {
    db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'")
        .await
}

/// Wait until every one of `expected` events is marked published and has
/// reached `collected` at least once.
async fn wait_for_delivery(
    db: &TestDatabase<sqlx::Postgres>,
    collected: &Collected,
    expected: usize,
    limit: Duration,
) {
    // Count distinct events: a relay taken over republishes what it had in
    // flight, so the consumer sees duplicates before it sees every event.
    let distinct = || collected.distinct_ids().len();
    let delivered = wait_until(limit, || async {
        published(db).await == expected as i64 && distinct() >= expected
    })
    .await;
    assert!(
        delivered,
        "not delivered: {} of {expected} marked published, {} distinct received",
        published(db).await,
        distinct()
    );
}

/// SIGTERM, then the exit status must be 0.
fn stop_cleanly(mut relay: RelayProcess, name: &str) {
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|status| status.success()),
        "relay {name} did not exit 0 on SIGTERM: {status:?}\n{}",
        relay.log()
    );
}

/// A port on loopback where nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("address").port()
}

/// Whether `log` shows, past `offset`, a batch the broker acknowledged at
/// least one event of.
fn acknowledged_batch_since(log: &str, offset: usize) -> bool {
    log.get(offset..).unwrap_or_default().lines().any(|line| {
        line.split_once("batch published")
            .is_some_and(|(_, fields)| {
                fields
                    .split_whitespace()
                    .filter_map(|field| field.strip_prefix("published="))
                    .any(|count| count.parse::<u64>().is_ok_and(|count| count > 0))
            })
    })
}

/// Hold back every statement `relay` sends through `proxy` until it has
/// logged a batch acknowledged after the hold began: the marks of that
/// batch are then held too. A hold that catches the relay between
/// batches, waiting on a fetch of its own, is released and tried again.
async fn hold_with_a_batch_acknowledged(proxy: &TcpProxy, relay: &RelayProcess) {
    const TRIES: usize = 5;
    for _ in 0..TRIES {
        proxy.hold_to_server();
        let offset = relay.log().len();
        let caught = wait_until(Duration::from_secs(5), || {
            let caught = acknowledged_batch_since(&relay.log(), offset);
            async move { caught }
        })
        .await;
        if caught {
            return;
        }
        proxy.release_held();
        let offset = relay.log().len();
        let resumed = wait_until(Duration::from_secs(30), || {
            let resumed = acknowledged_batch_since(&relay.log(), offset);
            async move { resumed }
        })
        .await;
        assert!(resumed, "the relay never published again:\n{}", relay.log());
    }
    panic!(
        "in {TRIES} holds of its database the relay never had a batch acknowledged:\n{}",
        relay.log()
    );
}

/// Freeze `relay_a` (instance id `relay_a_id`, SIGSTOP) with the
/// statements it sends through `database` held back and a batch
/// acknowledged since, start relay B with `settings_b` and wait until it
/// holds every partition relay A held; then let the held statements
/// through and thaw relay A. Returns relay B.
async fn freeze_past_the_lease_with_a_mark_held(
    db: &TestDatabase<sqlx::Postgres>,
    database: &TcpProxy,
    (relay_a, relay_a_id): (&RelayProcess, &str),
    settings_b: &str,
) -> RelayProcess {
    hold_with_a_batch_acknowledged(database, relay_a).await;
    relay_a.signal("STOP");
    let relay_b = RelayProcess::spawn(db.url(), &kafka_broker(), settings_b);
    let taken_over = wait_until(Duration::from_secs(60), || async {
        db.count(&format!(
            "SELECT COUNT(*) FROM outbox_partitions WHERE lease_owner = '{relay_a_id}'"
        ))
        .await
            == 0
    })
    .await;
    assert!(
        taken_over,
        "relay B never took the frozen relay's partitions:\n{}",
        relay_b.log()
    );
    database.release_held();
    relay_a.signal("CONT");
    relay_b
}

/// The acknowledged batch's mark ran under leases relay B now holds: the
/// database refused it, and the relay counted the events as stale marks.
async fn assert_marks_refused(relay: &RelayProcess, http: &str) {
    let refused = wait_until(Duration::from_secs(60), || async {
        let metrics = get(http, "/metrics").await.body;
        sample(&metrics, "outbox_relay_stale_marks_total").unwrap_or(0.0) > 0.0
    })
    .await;
    assert!(
        refused,
        "the thawed relay's stale mark was not refused:\n{}",
        relay.log()
    );
    assert!(
        relay
            .log()
            .contains("published events not marked: their partition lease was lost"),
        "{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_frozen_past_its_lease_recovers_and_everything_is_delivered() {
    const BACKLOG: u64 = 10_000;
    const TRANSACTIONS: u64 = 100;
    const PER_TRANSACTION: u64 = 100;
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("frozen");
    let collected = kafka::topic_consumer(&topic, 4).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    // The settings of the reproduction: a frozen relay's producer has
    // records time out and is fenced by the broker after the thaw.
    let settings = |name: &str| {
        config(name, "")
            .replace("lease_duration = \"2s\"", "lease_duration = \"4s\"")
            .replace(
                "publish_timeout = \"800ms\"",
                "publish_timeout = \"1500ms\"",
            )
            .replace("message_timeout = \"500ms\"", "message_timeout = \"1s\"")
            .replace("handover_after = \"4s\"\n", "")
            // Records wait in the producer before they are sent, so the
            // freeze most likely catches some in flight.
            .replace(
                "[kafka]\n",
                "[kafka]\noptions = { \"linger.ms\" = \"100\" }\n",
            )
    };

    // A backlog keeps relay A busy publishing when it is frozen, and a
    // writer commits 10,000 more events over about 20 s meanwhile.
    let backlog = enqueue_events(db.pool(), &topic, BACKLOG, 500, 500).await;
    let writer = {
        let pool = db.pool().clone();
        let topic = topic.clone();
        tokio::spawn(async move {
            let mut enqueued = Vec::new();
            for _ in 0..TRANSACTIONS {
                enqueued.extend(
                    enqueue_events(&pool, &topic, PER_TRANSACTION, 500, PER_TRANSACTION).await,
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            enqueued
        })
    };

    // Relay A reaches its database through a proxy, which holds its
    // statements back: the marks of its last batches reach the database
    // only after relay B has taken its partitions.
    let database = TcpProxy::in_front_of(db.url()).await;
    let relay_a = RelayProcess::spawn(
        &database.route(db.url()),
        &kafka_broker(),
        &settings("relay-a"),
    );
    let relay_a_http = endpoint_address(&relay_a).await;
    let progressed = wait_until(Duration::from_secs(30), || async {
        published(&db).await > 1_000
    })
    .await;
    assert!(progressed, "relay A never published:\n{}", relay_a.log());
    let relay_b = freeze_past_the_lease_with_a_mark_held(
        &db,
        &database,
        (&relay_a, "relay-a"),
        &settings("relay-b"),
    )
    .await;
    assert_marks_refused(&relay_a, &relay_a_http).await;

    let mut enqueued = backlog;
    enqueued.extend(writer.await.expect("writer"));
    assert_eq!(
        enqueued.len() as u64,
        BACKLOG + TRANSACTIONS * PER_TRANSACTION
    );
    wait_for_delivery(&db, &collected, enqueued.len(), Duration::from_secs(180)).await;
    check_delivery(&enqueued, &collected.snapshot());
    stop_cleanly(relay_a, "A");
    stop_cleanly(relay_b, "B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fatal_producer_error_is_replaced_by_a_fresh_producer_mid_run() {
    const EVENTS: u64 = 3_000;
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("fatal");
    let collected = kafka::topic_consumer(&topic, 3).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &topic, EVENTS, 100, 500).await;

    let config =
        RelayConfig::from_toml_str(&config("in-process", ""), "test.toml").expect("test config");
    let publisher = Arc::new(
        KafkaPublisher::new(KafkaPublisherConfig::new(vec![kafka::brokers()]))
            .expect("kafka publisher"),
    );
    let database_url: DatabaseUrl = db.url().parse().expect("database url");
    let mut config = config;
    config.batch_size = Some(50);
    let relay = RelayService::builder()
        .database(database_url)
        .broker(Arc::clone(&publisher) as Arc<dyn Publisher>)
        .config(config)
        .build()
        .expect("a relay");
    let stop = CancellationToken::new();
    let running = tokio::spawn(relay.run(stop.clone()));

    let progressed = wait_until(Duration::from_secs(30), || async {
        published(&db).await > 0
    })
    .await;
    assert!(progressed, "the relay never published");
    publisher
        .inject_fatal_error("fatal error injected by the test")
        .expect("inject a fatal error");
    assert!(
        published(&db).await < EVENTS as i64,
        "every event was published before the fatal error: the run is too short"
    );

    wait_for_delivery(&db, &collected, enqueued.len(), Duration::from_secs(120)).await;
    stop.cancel();
    let totals = running.await.expect("relay task").expect("relay run");
    assert_eq!(totals.published, EVENTS, "{totals:?}");
    assert!(
        publisher.client_rebuilds() >= 1,
        "the fatally failed producer was never replaced"
    );
    check_delivery(&enqueued, &collected.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_that_cannot_publish_hands_its_partitions_to_a_healthy_one() {
    const EVENTS: u64 = 2_000;
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("handover");
    let collected = kafka::topic_consumer(&topic, 3).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &topic, EVENTS, 100, 500).await;

    // Its broker is a port where nothing listens.
    let broken_broker = format!("kafka://127.0.0.1:{}", closed_port());
    let broken = RelayProcess::spawn(db.url(), &broken_broker, &config("broken", ""));
    let broken_http = endpoint_address(&broken).await;

    // Alone, it keeps its partitions but is not ready.
    let not_ready = wait_until(Duration::from_secs(90), || async {
        let ready = get(&broken_http, "/readyz").await;
        ready.status == 503 && ready.body.contains("every publish failed")
    })
    .await;
    assert!(
        not_ready,
        "a relay failing every publish never reported not ready:\n{}",
        broken.log()
    );
    assert_eq!(
        leases_of(&db, "broken").await,
        32,
        "a relay that is alone must keep its partitions:\n{}",
        broken.log()
    );
    assert_eq!(published(&db).await, 0);

    // With a healthy relay beside it, it hands them over.
    let healthy = RelayProcess::spawn(db.url(), &kafka_broker(), &config("healthy", ""));
    wait_for_delivery(&db, &collected, enqueued.len(), Duration::from_secs(120)).await;
    check_delivery(&enqueued, &collected.snapshot());
    assert_eq!(leases_of(&db, "broken").await, 0, "{}", broken.log());
    let readiness = get(&broken_http, "/readyz").await;
    assert_eq!(readiness.status, 503, "{}", readiness.body);
    assert!(readiness.body.contains("standing by"), "{}", readiness.body);
    assert!(
        broken
            .log()
            .contains("handed the partitions to the other relays"),
        "{}",
        broken.log()
    );
    stop_cleanly(broken, "broken");
    stop_cleanly(healthy, "healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_cut_off_from_rabbitmq_stands_by_and_rejoins_once_it_reaches_it() {
    let exchange = unique_name("rejoin");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    cut_off_relay_stands_by_and_rejoins(&exchange, collected, &rabbitmq::amqp_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_cut_off_from_redis_stands_by_and_rejoins_once_it_reaches_it() {
    let stream = unique_name("rejoin");
    redis_kit::require_redis().await;
    let collected = redis_kit::stream_consumer(&stream);
    cut_off_relay_stands_by_and_rejoins(&stream, collected, &redis_kit::redis_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_cut_off_from_nats_stands_by_and_rejoins_once_it_reaches_it() {
    let subject = unique_name("rejoin");
    let jetstream = nats_kit::require_nats().await;
    let stream =
        nats_kit::TestStream::create(&jetstream, &subject, std::slice::from_ref(&subject)).await;
    let collected = nats_kit::stream_consumer(jetstream, subject.clone());
    cut_off_relay_stands_by_and_rejoins(&subject, collected, &nats_kit::nats_url()).await;
    stream.delete().await;
}

/// Two relays share the partitions, one of them reaching the broker at
/// `url` through a proxy: cut off, it hands its partitions to the other
/// and is not ready; reconnected, it takes its share back, counts a client
/// rebuild and is ready again. Nothing is lost and order holds on
/// `topic`, whose deliveries `collected` gathers.
async fn cut_off_relay_stands_by_and_rejoins(topic: &str, collected: Collected, url: &str) {
    const EVENTS_PER_ROUND: u64 = 1_000;
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let proxy = TcpProxy::in_front_of(url).await;
    let proxied_url = proxy.route(url);
    assert_ne!(proxied_url, url, "the broker URL goes through the proxy");

    let cut_off = RelayProcess::spawn(db.url(), &proxied_url, &config("cut-off", ""));
    let direct = RelayProcess::spawn(db.url(), url, &config("direct", ""));
    let cut_off_http = endpoint_address(&cut_off).await;
    let shared = wait_until(Duration::from_secs(60), || async {
        leases_of(&db, "cut-off").await > 0 && leases_of(&db, "direct").await > 0
    })
    .await;
    assert!(shared, "the two relays never shared the partitions");
    let mut enqueued = enqueue_events(db.pool(), topic, EVENTS_PER_ROUND, 100, 100).await;
    wait_for_delivery(&db, &collected, enqueued.len(), Duration::from_secs(60)).await;

    // Cut off from the broker, it hands its partitions to the other relay.
    proxy.sever();
    let more = enqueue_events(db.pool(), topic, EVENTS_PER_ROUND, 100, 100).await;
    enqueued.extend(more);
    let handed_over = wait_until(Duration::from_secs(90), || async {
        leases_of(&db, "cut-off").await == 0 && leases_of(&db, "direct").await == 32
    })
    .await;
    assert!(
        handed_over,
        "the partitions were not handed over: the cut-off relay holds {}, the direct one {}\n{}",
        leases_of(&db, "cut-off").await,
        leases_of(&db, "direct").await,
        cut_off.log()
    );
    wait_for_delivery(&db, &collected, enqueued.len(), Duration::from_secs(60)).await;
    let readiness = get(&cut_off_http, "/readyz").await;
    assert_eq!(readiness.status, 503, "{}", readiness.body);

    // Once it reaches the broker again, it takes its share back.
    proxy.restore();
    let rejoined = wait_until(Duration::from_secs(90), || async {
        leases_of(&db, "cut-off").await > 0
    })
    .await;
    assert!(rejoined, "the relay never rejoined:\n{}", cut_off.log());
    let more = enqueue_events(db.pool(), topic, EVENTS_PER_ROUND, 100, 100).await;
    enqueued.extend(more);
    wait_for_delivery(&db, &collected, enqueued.len(), Duration::from_secs(60)).await;
    let ready = wait_until(Duration::from_secs(30), || async {
        get(&cut_off_http, "/readyz").await.status == 200
    })
    .await;
    assert!(
        ready,
        "the rejoined relay never became ready again:\n{}",
        cut_off.log()
    );
    let metrics = get(&cut_off_http, "/metrics").await.body;
    let rebuilds = sample(&metrics, "outbox_relay_broker_client_rebuilds_total").unwrap_or(0.0);
    assert!(rebuilds >= 1.0, "no client rebuild counted:\n{metrics}");
    check_delivery(&enqueued, &collected.snapshot());
    stop_cleanly(cut_off, "cut-off");
    stop_cleanly(direct, "direct");
}
