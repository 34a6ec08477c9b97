//! Several relays on one slot: one streams under the stream's lease, the
//! others stand by; when the streaming one is killed, a standby takes the
//! lease and the slot over and delivers what follows. With three relays,
//! `status --json` shows one lease holder and only it opens the stream.

use std::collections::HashSet;
use std::time::Duration;

use outbox_testkit::{Collected, kafka, rabbitmq, unique_name};
use sqlx::Acquire;

use crate::harness::{LogicalDatabase, insert_event};
use crate::support::process::{FAST_CONFIG, RelayProcess, wait_until};
use crate::support::workload::{check_delivery, enqueue_events};

const WAIT: Duration = Duration::from_secs(120);
const EVENTS_PER_ROUND: u64 = 200;

pub(crate) fn spawn_named(database: &LogicalDatabase, broker: &str, name: &str) -> RelayProcess {
    RelayProcess::spawn_with_args(
        database.db.url(),
        broker,
        &format!("instance_id = \"{name}\"\n{FAST_CONFIG}"),
        &[],
        &["--source", "logical", "--slot", database.slot.as_str()],
    )
}

pub(crate) async fn stream_holder(database: &LogicalDatabase) -> Option<String> {
    sqlx::query_scalar(
        "SELECT lease_owner FROM outbox_partitions WHERE partition_no = -1 AND lease_expires_at > now()",
    )
    .fetch_optional(database.db.pool())
    .await
    .expect("stream lease")
    .flatten()
}

async fn write_round(database: &LogicalDatabase, topic: &str, round: u64) {
    for batch in 0..EVENTS_PER_ROUND / 20 {
        let mut transaction = database.db.pool().begin().await.expect("begin");
        let connection = transaction.acquire().await.expect("connection");
        for index in 0..20 {
            let sequence = round * EVENTS_PER_ROUND + batch * 20 + index;
            insert_event(connection, topic, &format!("a-{}", sequence % 10), sequence).await;
        }
        transaction.commit().await.expect("commit");
    }
}

async fn distinct_arrivals(collected: &Collected) -> usize {
    collected
        .snapshot()
        .into_iter()
        .map(|message| message.ce_id)
        .collect::<HashSet<_>>()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_takes_the_stream_over_when_the_streaming_relay_dies() {
    let database = LogicalDatabase::new().await;
    let topic = unique_name("logical_standby");
    let collected = kafka::topic_consumer(&topic, 3).await;
    let broker = format!("kafka://{}", kafka::brokers());
    let mut first = Some(spawn_named(&database, &broker, "relay-first"));
    assert!(
        wait_until(WAIT, || async { stream_holder(&database).await.is_some() }).await,
        "a relay takes the stream's lease"
    );
    let mut second = Some(spawn_named(&database, &broker, "relay-second"));

    write_round(&database, &topic, 0).await;
    assert!(
        wait_until(WAIT, || async {
            distinct_arrivals(&collected).await >= EVENTS_PER_ROUND as usize
        })
        .await,
        "the first round arrives"
    );
    let holder = stream_holder(&database).await.expect("a holder");
    let survivor = if holder == "relay-first" {
        first.take().expect("first").kill9();
        "relay-second"
    } else {
        second.take().expect("second").kill9();
        "relay-first"
    };

    let killed_at = tokio::time::Instant::now();
    write_round(&database, &topic, 1).await;
    let delivered = wait_until(WAIT, || async {
        distinct_arrivals(&collected).await >= 2 * EVENTS_PER_ROUND as usize
    })
    .await;
    eprintln!(
        "second round delivered {} ms after the kill",
        killed_at.elapsed().as_millis()
    );
    let relay = first.as_mut().or(second.as_mut()).expect("the survivor");
    assert!(
        delivered,
        "the standby delivers the second round: {} arrived\n{}",
        distinct_arrivals(&collected).await,
        relay.log()
    );
    assert!(relay.is_running(), "the survivor runs");
    assert_eq!(stream_holder(&database).await.as_deref(), Some(survivor));
    let active: i64 = database
        .db
        .count(&format!(
            "SELECT COUNT(*) FROM pg_replication_slots WHERE slot_name = '{}' AND active",
            database.slot.as_str()
        ))
        .await;
    assert_eq!(active, 1, "the survivor streams from the slot");
}

/// The owner of the stream's lease (partition -1) in `status --json`.
fn stream_lease_owner(status: &serde_json::Value) -> Option<String> {
    status["leases"]
        .as_array()?
        .iter()
        .find(|lease| lease["partition_no"] == -1)
        .and_then(|lease| lease["owner"].as_str().map(str::to_owned))
}

/// Which of `relays` have opened the stream so far, by name.
fn streamed(relays: &[(String, RelayProcess)]) -> Vec<String> {
    relays
        .iter()
        .filter(|(_, relay)| relay.log().contains("streaming from the slot"))
        .map(|(name, _)| name.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_relays_on_one_slot_one_streams_and_a_standby_takes_over_after_sigkill() {
    let database = LogicalDatabase::new().await;
    let exchange = unique_name("logical_three");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let mut relays: Vec<(String, RelayProcess)> = (0..3)
        .map(|index| {
            let name = format!("relay-{index}");
            let relay = spawn_named(&database, &broker, &name);
            (name, relay)
        })
        .collect();

    let mut enqueued = enqueue_events(database.db.pool(), &exchange, 300, 10, 10).await;
    let all_arrived = |wanted: usize| {
        let collected = &collected;
        async move { collected.distinct_ids().len() >= wanted }
    };
    assert!(
        wait_until(WAIT, || all_arrived(enqueued.len())).await,
        "the first round arrives"
    );
    let all_up = wait_until(WAIT, || async {
        let status = database.status_json();
        status["live_relays"] == 3 && stream_lease_owner(&status).is_some()
    })
    .await;
    let status = database.status_json();
    assert!(
        all_up,
        "three relays run, one holds the stream's lease: {status}"
    );
    let holder = stream_lease_owner(&status).expect("a relay holds the stream's lease");
    assert_eq!(
        streamed(&relays),
        vec![holder.clone()],
        "only the lease holder streams; the two others stand by"
    );
    assert_eq!(
        database
            .db
            .count(&format!(
                "SELECT COUNT(*) FROM pg_replication_slots WHERE slot_name = '{}' AND active",
                database.slot.as_str()
            ))
            .await,
        1
    );

    let position = relays
        .iter()
        .position(|(name, _)| *name == holder)
        .expect("the holder is one of the three");
    let (_, killed) = relays.remove(position);
    killed.kill9();
    enqueued.extend(enqueue_events(database.db.pool(), &exchange, 300, 10, 10).await);
    let delivered = wait_until(WAIT, || all_arrived(enqueued.len())).await;
    assert!(
        delivered,
        "a standby delivers the second round: {} of {} arrived\n{}\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        relays[0].1.log(),
        relays[1].1.log()
    );
    let new_holder = stream_holder(&database).await.expect("a new holder");
    assert_ne!(new_holder, holder);
    assert_eq!(
        streamed(&relays),
        vec![new_holder],
        "one standby streams, the other still stands by"
    );
    for (name, relay) in &mut relays {
        assert!(relay.is_running(), "{name} runs");
    }
    check_delivery(&enqueued, &collected.snapshot());
}
