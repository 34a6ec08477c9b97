//! The relay's HTTP endpoint against a real relay process: the metrics
//! match what the relay did to the table, readiness follows the database,
//! a taken port is a clear startup error, and JSON logs carry batch spans.

mod support;

use std::time::Duration;

use outbox_testkit::{rabbitmq, unique_name};
use sqlx::AssertSqlSafe;
use support::http::{endpoint_address, get, sample};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::workload::enqueue_events;

/// Events on the topic whose exchange exists.
const DELIVERED: u64 = 600;

async fn count(pool: &sqlx::PgPool, sql: String) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .expect("count query")
}

async fn scrape(address: &str) -> String {
    let response = get(address, "/metrics").await;
    assert_eq!(response.status, 200, "/metrics: {}", response.body);
    response.body
}

fn value(metrics: &str, name: &str) -> f64 {
    sample(metrics, name).unwrap_or_else(|| panic!("no sample {name} in:\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_what_the_relay_published_rejected_and_dead_lettered() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let delivered = unique_name("metrics");
    let missing = unique_name("metrics-missing");
    let collected = rabbitmq::exchange_consumer(&delivered).await;
    enqueue_events(db.pool(), &delivered, DELIVERED, 40, 50).await;
    // One event for an exchange that does not exist: rejected on each of
    // its 3 attempts, then dead.
    enqueue_events(db.pool(), &missing, 1, 1, 1).await;

    let relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), FAST_CONFIG);
    let address = endpoint_address(&relay).await;
    assert_eq!(get(&address, "/healthz").await.status, 200);
    // Scraped while the relay works: counters never exceed the table.
    let early = scrape(&address).await;
    let early_published = sample(
        &early,
        &format!("outbox_relay_events_published_total{{topic=\"{delivered}\"}}"),
    )
    .unwrap_or(0.0);
    let published_rows = count(
        db.pool(),
        format!(
            "SELECT COUNT(*) FROM outbox_events WHERE topic = '{delivered}' AND state = 'published'"
        ),
    )
    .await;
    assert!(
        early_published <= DELIVERED as f64,
        "published counter {early_published} above the {DELIVERED} events"
    );
    assert!(published_rows <= DELIVERED as i64);

    let settled = wait_until(Duration::from_secs(60), || {
        let pool = db.pool().clone();
        async move {
            count(
                &pool,
                "SELECT COUNT(*) FROM outbox_events WHERE state = 'pending'".to_owned(),
            )
            .await
                == 0
        }
    })
    .await;
    assert!(settled, "events still pending:\n{}", relay.log());

    let metrics = scrape(&address).await;
    let published_rows = count(
        db.pool(),
        format!(
            "SELECT COUNT(*) FROM outbox_events WHERE topic = '{delivered}' AND state = 'published'"
        ),
    )
    .await;
    assert_eq!(published_rows, DELIVERED as i64);
    assert_eq!(
        value(
            &metrics,
            &format!("outbox_relay_events_published_total{{topic=\"{delivered}\"}}")
        ),
        published_rows as f64,
        "published counter against the table"
    );
    assert_eq!(value(&metrics, "outbox_relay_stale_marks_total"), 0.0);
    assert_eq!(
        value(&metrics, "outbox_relay_commit_to_ack_seconds_count"),
        published_rows as f64,
        "one latency observation per acknowledged event"
    );
    assert!(value(&metrics, "outbox_relay_batch_publish_seconds_count") >= 1.0);

    let (attempts, dead): (i32, i64) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT MAX(attempts), COUNT(*) FROM outbox_events WHERE topic = '{missing}' AND state = 'dead'"
    )))
    .fetch_one(db.pool())
    .await
    .expect("dead row");
    assert_eq!(
        (attempts, dead),
        (3, 1),
        "the missing exchange's event is dead"
    );
    assert_eq!(
        value(
            &metrics,
            &format!("outbox_relay_events_failed_total{{topic=\"{missing}\"}}")
        ),
        f64::from(attempts)
    );
    assert_eq!(
        value(
            &metrics,
            &format!("outbox_relay_events_retried_total{{topic=\"{missing}\"}}")
        ),
        f64::from(attempts - 1)
    );
    assert_eq!(
        value(
            &metrics,
            &format!("outbox_relay_events_dead_lettered_total{{topic=\"{missing}\"}}")
        ),
        1.0
    );
    assert!(
        sample(
            &metrics,
            &format!("outbox_relay_events_failed_total{{topic=\"{delivered}\"}}")
        )
        .is_none(),
        "no failure on the delivered topic"
    );
    assert_eq!(value(&metrics, "outbox_relay_pending_events"), 0.0);
    assert_eq!(
        value(&metrics, "outbox_relay_oldest_pending_age_seconds"),
        0.0
    );
    assert_eq!(value(&metrics, "outbox_relay_dead_events"), 1.0);
    let partitions = count(
        db.pool(),
        "SELECT COUNT(*) FROM outbox_partitions".to_owned(),
    )
    .await;
    assert_eq!(
        value(&metrics, "outbox_relay_leases_held"),
        partitions as f64,
        "a lone relay holds every partition"
    );
    assert!(
        collected.len() >= DELIVERED as usize,
        "the consumer got {} of {DELIVERED}",
        collected.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_on_rabbitmq_connects_before_its_first_event() {
    let db = outbox_testkit::postgres().await;
    let relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), FAST_CONFIG);
    let address = endpoint_address(&relay).await;
    // Nothing is ever written: only a connection opened at start makes the
    // relay ready, so the first events do not wait for the AMQP handshake.
    let ready = wait_until(Duration::from_secs(30), || {
        let address = address.clone();
        async move { get(&address, "/readyz").await.status == 200 }
    })
    .await;
    assert!(ready, "an idle relay never became ready:\n{}", relay.log());
    assert!(
        relay.log().contains("connected to rabbitmq"),
        "the relay logs its connection:\n{}",
        relay.log()
    );
    let metrics = get(&address, "/metrics").await.body;
    assert!(
        sample(&metrics, "outbox_relay_events_published_total").is_none(),
        "nothing was published"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_follows_the_database() {
    let db = outbox_testkit::postgres().await;
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(db.pool())
        .await
        .expect("database name");
    let relay = RelayProcess::spawn(db.url(), "stdout", FAST_CONFIG);
    let address = endpoint_address(&relay).await;
    let ready = wait_until(Duration::from_secs(30), || {
        let address = address.clone();
        async move { get(&address, "/readyz").await.status == 200 }
    })
    .await;
    assert!(ready, "never ready:\n{}", relay.log());
    assert_eq!(
        value(&scrape(&address).await, "outbox_relay_ready"),
        1.0,
        "the ready gauge while /readyz answers 200"
    );

    // Shut the database to new connections and end the existing ones.
    let admin = outbox_testkit::postgres().await;
    sqlx::query(AssertSqlSafe(format!(
        "ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS false"
    )))
    .execute(admin.pool())
    .await
    .expect("refuse connections");
    db.pool().close().await;
    sqlx::query(AssertSqlSafe(format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
    )))
    .execute(admin.pool())
    .await
    .expect("end connections");

    let reason = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let unready = wait_until(Duration::from_secs(30), || {
        let address = address.clone();
        let reason = std::sync::Arc::clone(&reason);
        async move {
            let response = get(&address, "/readyz").await;
            let unready = response.status == 503;
            if let Ok(mut reason) = reason.lock() {
                *reason = response.body;
            }
            unready
        }
    })
    .await;
    let reason = reason
        .lock()
        .map(|reason| reason.clone())
        .unwrap_or_default();
    assert!(
        unready,
        "still ready with the database closed:\n{}",
        relay.log()
    );
    assert!(
        reason.contains("database"),
        "the reason names the database: {reason}"
    );
    assert_eq!(
        get(&address, "/healthz").await.status,
        200,
        "alive while not ready"
    );
    assert_eq!(
        value(&scrape(&address).await, "outbox_relay_ready"),
        0.0,
        "the ready gauge with the database closed"
    );

    sqlx::query(AssertSqlSafe(format!(
        "ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS true"
    )))
    .execute(admin.pool())
    .await
    .expect("allow connections");
    let ready_again = wait_until(Duration::from_secs(30), || {
        let address = address.clone();
        async move { get(&address, "/readyz").await.status == 200 }
    })
    .await;
    assert!(
        ready_again,
        "not ready after the database came back:\n{}",
        relay.log()
    );
    assert_eq!(
        value(&scrape(&address).await, "outbox_relay_ready"),
        1.0,
        "the ready gauge once the database is back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_taken_http_port_stops_the_relay_before_it_claims_anything() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    enqueue_events(db.pool(), &unique_name("port"), 5, 1, 5).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let port = taken.local_addr().expect("address").port();
    let config = FAST_CONFIG.replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"127.0.0.1:{port}\""),
    );
    let mut relay = RelayProcess::spawn(db.url(), "stdout", &config);
    let status = relay
        .wait_exit(Duration::from_secs(30))
        .expect("the relay exits");
    assert!(!status.success());
    let log = relay.log();
    let error_line = log
        .lines()
        .find(|line| line.starts_with("outbox-relay: "))
        .unwrap_or_else(|| panic!("no error line:\n{log}"));
    assert!(
        error_line.contains(&format!("127.0.0.1:{port}")),
        "the error names the address: {error_line}"
    );
    let leased = count(
        db.pool(),
        "SELECT COUNT(*) FROM outbox_partitions WHERE lease_owner IS NOT NULL".to_owned(),
    )
    .await;
    let published = count(
        db.pool(),
        "SELECT COUNT(*) FROM outbox_events WHERE state <> 'pending'".to_owned(),
    )
    .await;
    assert_eq!((leased, published), (0, 0), "nothing leased or published");
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn json_logs_carry_a_span_per_batch_with_its_counts() {
    let db = outbox_testkit::sqlite().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    enqueue_events(db.pool(), &unique_name("json"), 20, 4, 20).await;
    let relay = RelayProcess::spawn_with_args(
        db.url(),
        "stdout",
        FAST_CONFIG,
        &["--log-format", "json"],
        &[],
    );
    let batch_logged = wait_until(Duration::from_secs(30), || {
        let found = relay.log().contains("\"batch published\"");
        async move { found }
    })
    .await;
    assert!(batch_logged, "no batch logged:\n{}", relay.log());
    let log = relay.log();
    for line in log.lines().filter(|line| !line.trim().is_empty()) {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|error| panic!("not a JSON log line ({error}): {line}"));
    }
    let batch = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|entry| entry["fields"]["message"] == "batch published")
        .expect("a batch line");
    assert_eq!(
        batch["span"]["name"], "batch",
        "inside the batch span: {batch}"
    );
    assert_eq!(
        batch["span"]["events"], 20,
        "the span counts the batch: {batch}"
    );
    assert_eq!(batch["fields"]["published"], 20, "{batch}");
}
