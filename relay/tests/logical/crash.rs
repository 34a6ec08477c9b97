//! SIGKILL of the streaming relay while writers commit: nothing is lost and
//! each aggregate's events first arrive in order; what the killed relay had
//! published but not confirmed is streamed and published again.

use std::collections::HashSet;
use std::time::Duration;

use outbox_testkit::{Collected, rabbitmq, unique_name};

use crate::harness::LogicalDatabase;
use crate::support::process::{RelayProcess, wait_until};
use crate::support::workload::{check_delivery, enqueue_events};

const WAIT: Duration = Duration::from_secs(180);
const ROUNDS: u64 = 30;
const EVENTS_PER_ROUND: u64 = 100;
const KILLS: usize = 3;

fn spawn_relay(database: &LogicalDatabase) -> RelayProcess {
    database.spawn_relay(&rabbitmq::amqp_url())
}

fn distinct(collected: &Collected) -> usize {
    collected
        .snapshot()
        .into_iter()
        .map(|message| message.ce_id)
        .collect::<HashSet<_>>()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_of_the_streaming_relay_loses_nothing_and_keeps_order() {
    let database = LogicalDatabase::new().await;
    let exchange = unique_name("logical_crash");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let pool = database.db.pool().clone();
    let topic = exchange.clone();
    let writer = tokio::spawn(async move {
        let mut enqueued = Vec::new();
        for _ in 0..ROUNDS {
            enqueued.extend(enqueue_events(&pool, &topic, EVENTS_PER_ROUND, 20, 10).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        enqueued
    });

    let mut relay = spawn_relay(&database);
    for kill in 1..=KILLS {
        let wanted = kill * (ROUNDS * EVENTS_PER_ROUND) as usize / (KILLS + 1);
        let reached = wait_until(WAIT, || async { distinct(&collected) >= wanted }).await;
        assert!(
            reached,
            "{} of {wanted} arrived before kill {kill}:\n{}",
            distinct(&collected),
            relay.log()
        );
        relay.kill9();
        relay = spawn_relay(&database);
    }
    let enqueued = writer.await.expect("writer");
    let arrived = wait_until(WAIT, || async { distinct(&collected) >= enqueued.len() }).await;
    assert!(
        arrived,
        "{} of {} arrived:\n{}",
        distinct(&collected),
        enqueued.len(),
        relay.log()
    );
    let duplicates = check_delivery(&enqueued, &collected.snapshot());
    eprintln!(
        "{} events, {duplicates} published again after the kills",
        enqueued.len()
    );
}
