//! RabbitMQ stops for 20 s in the middle of a run. The relay backs off
//! instead of spinning, resumes when the broker is back, and loses nothing.
//! Alone in its test binary: it stops the broker every other test uses.

mod support;

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use outbox_testkit::{TestBackend, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::workload::{check_delivery, enqueue_events};

fn rabbitmqctl(action: &str) {
    let status = Command::new("rabbitmqctl")
        .arg(action)
        .status()
        .unwrap_or_else(|error| {
            panic!("rabbitmqctl {action}: {error} (the outage test drives the local RabbitMQ)")
        });
    assert!(status.success(), "rabbitmqctl {action} failed");
}

/// Restarts the broker even when the test fails half way.
struct StartAppOnDrop;

impl Drop for StartAppOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl").arg("start_app").status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rabbitmq_down_for_20s_backs_off_resumes_and_loses_nothing() {
    const EVENTS: u64 = 20_000;
    let db = outbox_testkit::postgres().await;
    let exchange = unique_name("outage");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let enqueued = enqueue_events(db.pool(), &exchange, EVENTS, 200, 500).await;
    let published = || async {
        let mut connection = db.pool().acquire().await.expect("acquire");
        sqlx::Postgres::fetch_i64(
            &mut connection,
            "SELECT COUNT(*) FROM outbox_events WHERE state = 'published'",
        )
        .await
        .expect("count published")
    };

    let mut relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), FAST_CONFIG);
    assert!(
        wait_until(Duration::from_secs(60), || async {
            published().await > 1_000
        })
        .await,
        "the relay publishes before the outage"
    );

    let _restart = StartAppOnDrop;
    rabbitmqctl("stop_app");
    let log_before_outage = relay.log().len();
    let published_at_stop = published().await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let outage_log = relay.log()[log_before_outage..].to_owned();
    rabbitmqctl("start_app");

    assert!(relay.is_running(), "the relay survives the outage");
    assert!(
        published_at_stop < EVENTS as i64,
        "the outage lands mid-run"
    );
    let backoffs = outage_log.matches("backing off").count();
    let batches = outage_log.matches("batch published").count();
    assert!(
        backoffs >= 1,
        "the relay notices the outage and backs off:\n{outage_log}"
    );
    // Doubling from 100 ms to 5 s gives about a dozen attempts in 20 s; a
    // busy loop would make thousands.
    assert!(
        batches <= 40,
        "{batches} publish attempts during a 20 s outage: the relay spins instead of backing off"
    );

    assert!(
        wait_until(Duration::from_secs(120), || async {
            collected
                .snapshot()
                .into_iter()
                .map(|message| message.ce_id)
                .collect::<HashSet<_>>()
                .len()
                >= enqueued.len()
        })
        .await,
        "every event arrives after the broker is back ({} so far)",
        collected.len()
    );
    check_delivery(&enqueued, &collected.snapshot());
}
