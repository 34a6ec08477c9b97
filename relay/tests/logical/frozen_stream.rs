//! SIGSTOP of the streaming relay for longer than `wal_sender_timeout`
//! while a writer commits: the standby takes the lease and the slot over
//! (ending the frozen relay's replication connection if it is still
//! there) and delivers what follows. After SIGCONT the thawed relay finds
//! its lease gone: it stops its stream, cannot take the slot back (the
//! slot's walsender stays the new holder's), and stands by; nothing is
//! lost, each aggregate's events first arrive in order, and both relays
//! exit 0 on SIGTERM.
//!
//! `wal_sender_timeout` is set on the test's database only (a user-settable
//! parameter since PostgreSQL 12, read by the walsender of a logical
//! replication connection), so this test changes nothing server-wide.

use std::time::Duration;

use outbox_testkit::{rabbitmq, unique_name};
use sqlx::AssertSqlSafe;
use tokio_util::sync::CancellationToken;

use crate::harness::LogicalDatabase;
use crate::standby::{spawn_named, stream_holder};
use crate::support::process::{RelayProcess, wait_until};
use crate::support::service_control::freeze;
use crate::support::workload::{check_delivery, enqueue_events};

const WAIT: Duration = Duration::from_secs(120);

/// The test database's `wal_sender_timeout`; the relay stays frozen past it.
const WAL_SENDER_TIMEOUT: Duration = Duration::from_secs(3);

async fn slot_sender(database: &LogicalDatabase) -> Option<i32> {
    sqlx::query_scalar("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1")
        .bind(database.slot.as_str())
        .fetch_one(database.db.pool())
        .await
        .expect("the slot's walsender")
}

fn exits_zero_on_sigterm(name: &str, relay: &mut RelayProcess) {
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(60));
    assert!(
        status.is_some_and(|status| status.success()),
        "{name} did not exit 0 on SIGTERM: {status:?}\n{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_frozen_past_wal_sender_timeout_is_replaced_and_fenced_after_it_thaws() {
    let database = LogicalDatabase::new().await;
    let name: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(database.db.pool())
        .await
        .expect("database name");
    sqlx::query(AssertSqlSafe(format!(
        "ALTER DATABASE \"{name}\" SET wal_sender_timeout = '{}ms'",
        WAL_SENDER_TIMEOUT.as_millis()
    )))
    .execute(database.db.pool())
    .await
    .expect("set wal_sender_timeout on the test database");
    let exchange = unique_name("logical_frozen");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let mut first = spawn_named(&database, &broker, "relay-first");
    assert!(
        wait_until(WAIT, || async { stream_holder(&database).await.is_some() }).await,
        "a relay takes the stream's lease:\n{}",
        first.log()
    );
    let mut second = spawn_named(&database, &broker, "relay-second");

    let stop_writing = CancellationToken::new();
    let writer = {
        let pool = database.db.pool().clone();
        let topic = exchange.clone();
        let stop = stop_writing.clone();
        tokio::spawn(async move {
            let mut enqueued = Vec::new();
            while !stop.is_cancelled() {
                enqueued.extend(enqueue_events(&pool, &topic, 20, 10, 5).await);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            enqueued
        })
    };
    let arrivals_beyond = |count: usize| {
        let collected = &collected;
        async move { collected.distinct_ids().len() >= count }
    };
    assert!(
        wait_until(WAIT, || arrivals_beyond(100)).await,
        "events arrive before the freeze:\n{}",
        first.log()
    );

    let holder = stream_holder(&database).await.expect("a holder");
    let (frozen_name, survivor_name) = if holder == "relay-first" {
        ("relay-first", "relay-second")
    } else {
        ("relay-second", "relay-first")
    };
    let (frozen, survivor) = if holder == "relay-first" {
        (&mut first, &mut second)
    } else {
        (&mut second, &mut first)
    };
    let frozen_at = tokio::time::Instant::now();
    let thaw = freeze(frozen.pid());
    let arrived_at_freeze = collected.distinct_ids().len();
    let taken_over = wait_until(WAIT, || async {
        stream_holder(&database).await.as_deref() == Some(survivor_name)
            && collected.distinct_ids().len() >= arrived_at_freeze + 100
    })
    .await;
    assert!(
        taken_over,
        "{survivor_name} takes the stream over from the frozen {frozen_name}:\n{}",
        survivor.log()
    );
    // Frozen past wal_sender_timeout: the server would have ended its
    // connection by now even if the standby had not.
    tokio::time::sleep_until(frozen_at + 2 * WAL_SENDER_TIMEOUT).await;
    let sender = slot_sender(&database).await;
    assert!(sender.is_some(), "{survivor_name} streams from the slot");
    let thawed_log_from = frozen.log().len();
    drop(thaw);

    let fenced = wait_until(WAIT, || async {
        frozen.log()[thawed_log_from..].contains("stopping the replication stream")
    })
    .await;
    assert!(
        fenced,
        "the thawed {frozen_name} never noticed it lost the stream:\n{}",
        frozen.log()
    );
    let arrived_at_thaw = collected.distinct_ids().len();
    assert!(
        wait_until(WAIT, || arrivals_beyond(arrived_at_thaw + 100)).await,
        "events keep arriving after the thaw:\n{}",
        survivor.log()
    );
    assert_eq!(
        slot_sender(&database).await,
        sender,
        "the slot's walsender, the only connection that can move its confirmed position, is \
         still the survivor's"
    );
    assert_eq!(
        stream_holder(&database).await.as_deref(),
        Some(survivor_name),
        "the thawed relay did not take the lease back"
    );
    assert!(
        !frozen.log()[thawed_log_from..].contains("streaming from the slot"),
        "the thawed relay opened the slot again:\n{}",
        frozen.log()
    );

    stop_writing.cancel();
    let enqueued = writer.await.expect("writer");
    assert!(
        wait_until(WAIT, || arrivals_beyond(enqueued.len())).await,
        "{} of {} arrived:\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        survivor.log()
    );
    let duplicates = check_delivery(&enqueued, &collected.snapshot());
    let ended_by_survivor = survivor
        .log()
        .contains("ended the replication connection of a relay that lost the stream's lease");
    eprintln!(
        "{} events, {duplicates} published again around the freeze; the frozen relay's \
         connection was ended by {}",
        enqueued.len(),
        if ended_by_survivor {
            "the survivor"
        } else {
            "wal_sender_timeout"
        }
    );
    assert!(frozen.is_running(), "the thawed relay stands by");
    exits_zero_on_sigterm(frozen_name, frozen);
    exits_zero_on_sigterm(survivor_name, survivor);
}
