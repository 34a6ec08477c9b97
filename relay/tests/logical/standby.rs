//! Several relays on one slot: one streams under the stream's lease, the
//! others stand by; when the streaming one is killed, a standby takes the
//! lease and the slot over and delivers what follows.

use std::collections::HashSet;
use std::time::Duration;

use outbox_testkit::{Collected, kafka, unique_name};
use sqlx::Acquire;

use crate::harness::{LogicalDatabase, insert_event};
use crate::support::process::{FAST_CONFIG, RelayProcess, wait_until};

const WAIT: Duration = Duration::from_secs(120);
const EVENTS_PER_ROUND: u64 = 200;

fn spawn_named(database: &LogicalDatabase, broker: &str, name: &str) -> RelayProcess {
    RelayProcess::spawn_with_args(
        database.db.url(),
        broker,
        &format!("instance_id = \"{name}\"\n{FAST_CONFIG}"),
        &[],
        &["--source", "logical", "--slot", database.slot.as_str()],
    )
}

async fn stream_holder(database: &LogicalDatabase) -> Option<String> {
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
