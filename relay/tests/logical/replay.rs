//! `outbox-relay replay --source logical`, end to end on RabbitMQ: the
//! streamed events the slot confirmed are replayed although their rows
//! stay pending, and the ones committed after the last confirmed retention
//! checkpoint are left out and counted.

use std::collections::HashSet;

use outbox_relay::operator::unconfirmed_in_window;
use outbox_relay::store::ReplayWindow;
use outbox_testkit::{Received, rabbitmq, unique_name};

use crate::harness::{DELIVERY_WAIT, LogicalDatabase, stop};
use crate::support::process::{FAST_CONFIG, RelayProcess, wait_until};
use crate::support::workload::enqueue_events;

/// The AMQP header of the `outboxreplay` extension attribute.
const REPLAY_HEADER: &str = "cloudEvents:outboxreplay";

fn is_replay(message: &Received) -> bool {
    message.headers.get(REPLAY_HEADER).map(String::as_str) == Some("true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_publishes_the_streamed_events_the_slot_confirmed() {
    let database = LogicalDatabase::new().await;
    let exchange = unique_name("logical_replay");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let pool = database.db.pool();
    let slot = database.slot.as_str();
    // Retention checkpoints often, so that one soon covers the events.
    let config = format!("{FAST_CONFIG}\n[retention]\ninterval = \"200ms\"\n");
    let mut relay = RelayProcess::spawn_with_args(
        database.db.url(),
        &broker,
        &config,
        &[],
        &["--source", "logical", "--slot", slot],
    );
    let streamed = enqueue_events(pool, &exchange, 24, 4, 4).await;
    // The replay's own judgement: every streamed event is known to be
    // acknowledged once a retention checkpoint after it is confirmed.
    let window = ReplayWindow {
        topic: exchange.clone(),
        since: chrono::Utc::now() - chrono::Duration::hours(1),
        until: chrono::Utc::now() + chrono::Duration::hours(1),
    };
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() >= streamed.len()
                && unconfirmed_in_window(pool, &database.slot, &window)
                    .await
                    .expect("count the unconfirmed events")
                    == 0
        })
        .await,
        "the events were delivered and a confirmed checkpoint covers them:\n{}",
        relay.log()
    );
    stop(&mut relay);
    let pending = database
        .db
        .count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending'")
        .await;
    assert_eq!(pending, streamed.len() as i64, "streamed rows stay pending");

    // Committed while no relay streams: not known to be published.
    let later = enqueue_events(pool, &exchange, 6, 2, 3).await;

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args([
            "replay",
            "--database-url",
            database.db.url(),
            "--broker",
            &broker,
        ])
        .args(["--topic", &exchange, "--since", "1h"])
        .args(["--source", "logical", "--slot", slot])
        .output()
        .expect("run replay");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.starts_with(&format!(
            "{} event(s) of topic `{exchange}` replayed",
            streamed.len()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "; {} streamed event(s) of the window were left out",
            later.len()
        )),
        "{stdout}"
    );

    let expected: HashSet<String> = streamed.iter().map(ToString::to_string).collect();
    let replayed = || -> Vec<String> {
        collected
            .snapshot()
            .into_iter()
            .filter(is_replay)
            .map(|message| message.ce_id)
            .collect()
    };
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            replayed().len() >= expected.len()
        })
        .await,
        "{} of {} replays arrived",
        replayed().len(),
        expected.len()
    );
    let replayed = replayed();
    assert_eq!(replayed.len(), expected.len(), "each event replayed once");
    assert_eq!(
        replayed.into_iter().collect::<HashSet<_>>(),
        expected,
        "exactly the streamed events the slot confirmed are replayed"
    );
}
