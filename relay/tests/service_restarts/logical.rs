//! The logical source while the server changes under it: PostgreSQL
//! restarted under writers (the relay carries on by itself, nothing lost,
//! each aggregate in order), and a slot the server invalidates under a
//! small `max_slot_wal_keep_size` (the relay stops with one line naming the
//! recovery, and refuses to start on that slot; `outbox-relay recover-slot`
//! then re-creates it and every event reaches the broker). Both change the
//! server for every other test, so they hold [`super::SERVICES`].

use std::process::Command;
use std::time::{Duration, Instant};

use outbox_testkit::kafka;
use tokio_util::sync::CancellationToken;

use super::{Broker, SERVICES};
use crate::logical_harness::LogicalDatabase;
use crate::support::process::{RelayProcess, wait_until};
use crate::support::service_control::{freeze, restart_postgres};
use crate::support::workload::{
    WriterPlan, check_delivery, committed_events, join_writers, spawn_writers,
};

const WAIT: Duration = Duration::from_secs(120);

fn spawn_logical(database: &LogicalDatabase, broker: &str) -> RelayProcess {
    database.spawn_relay(broker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logical_source_carries_on_after_a_postgres_restart_losing_nothing() {
    const WRITERS: u64 = 3;
    let _alone = SERVICES.lock().await;
    let database = LogicalDatabase::new().await;
    let topic = outbox_testkit::unique_name("logical-restart");
    let collected = kafka::topic_consumer(&topic, 3).await;
    let stop_writing = CancellationToken::new();
    let plan = WriterPlan {
        writer: 0,
        aggregates: 10,
        at_least: 100,
        pause: Duration::from_millis(20),
    };
    let writers = spawn_writers(database.db.pool(), &topic, WRITERS, plan, &stop_writing);
    let mut relay = spawn_logical(&database, &Broker::Kafka.url());
    assert!(
        wait_until(WAIT, || async { collected.distinct_ids().len() >= 50 }).await,
        "the relay streams before the restart:\n{}",
        relay.log()
    );

    tokio::task::spawn_blocking(restart_postgres)
        .await
        .expect("the restart runs");
    let deadline = Instant::now() + WAIT;
    while sqlx::query("SELECT 1")
        .execute(database.db.pool())
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the database never answered after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let arrived_after_restart = collected.distinct_ids().len();
    let written_after_restart = database
        .db
        .count("SELECT COUNT(*) FROM outbox_events")
        .await;
    assert!(
        wait_until(WAIT, || async {
            collected.distinct_ids().len() > arrived_after_restart + 50
                && database
                    .db
                    .count("SELECT COUNT(*) FROM outbox_events")
                    .await
                    > written_after_restart + 50
        })
        .await,
        "the writers or the relay never carried on after the restart:\n{}",
        relay.log()
    );
    stop_writing.cancel();
    let enqueued = committed_events(join_writers(writers).await, &database.db).await;
    assert!(
        wait_until(WAIT, || async {
            collected.distinct_ids().len() >= enqueued.len()
        })
        .await,
        "{} of {} events arrived after the restart:\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        relay.log()
    );
    assert!(
        relay.is_running(),
        "the relay exited on the restart:\n{}",
        relay.log()
    );
    let duplicates = check_delivery(&enqueued, &collected.snapshot());
    eprintln!(
        "{} events, {duplicates} published again after the restart",
        enqueued.len()
    );
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|status| status.success()),
        "the relay did not exit 0: {status:?}\n{}",
        relay.log()
    );
}

/// `max_slot_wal_keep_size` set server-wide; dropping the guard resets it
/// (also when the test fails).
struct KeepSizeGuard {
    url: String,
}

impl KeepSizeGuard {
    fn set(url: &str, size: &str) -> Self {
        let guard = KeepSizeGuard {
            url: url.to_owned(),
        };
        psql(
            url,
            &[
                &format!("ALTER SYSTEM SET max_slot_wal_keep_size = '{size}'"),
                "SELECT pg_reload_conf()",
            ],
        );
        guard
    }
}

impl Drop for KeepSizeGuard {
    fn drop(&mut self) {
        psql(
            &self.url,
            &[
                "ALTER SYSTEM RESET max_slot_wal_keep_size",
                "SELECT pg_reload_conf()",
            ],
        );
    }
}

/// Run `statements` with `psql`, each on its own (ALTER SYSTEM cannot run
/// in a transaction); reports a failure without panicking (guards call it).
fn psql(url: &str, statements: &[&str]) {
    let mut command = Command::new("psql");
    command
        .args([url, "-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .stdout(std::process::Stdio::null());
    for statement in statements {
        command.args(["-c", statement]);
    }
    match command.status() {
        Ok(status) if status.success() => {}
        outcome => eprintln!("psql {statements:?}: {outcome:?}"),
    }
}

async fn wal_status(database: &LogicalDatabase) -> String {
    sqlx::query_scalar(
        "SELECT COALESCE(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(database.slot.as_str())
    .fetch_one(database.db.pool())
    .await
    .expect("the slot's wal_status")
}

/// Write WAL past `max_slot_wal_keep_size`: fill a table, switch segments
/// and checkpoint, until the server invalidates the slot.
async fn push_the_slot_out(database: &LogicalDatabase) -> bool {
    sqlx::query("CREATE TABLE IF NOT EXISTS wal_filler (id BIGSERIAL PRIMARY KEY, note TEXT)")
        .execute(database.db.pool())
        .await
        .expect("create the filler table");
    wait_until(WAIT, || async {
        for statement in [
            "INSERT INTO wal_filler (note) SELECT repeat('x', 200) FROM generate_series(1, 2000)",
            "SELECT pg_switch_wal()::text",
        ] {
            sqlx::query(statement)
                .execute(database.db.pool())
                .await
                .expect("write WAL");
        }
        sqlx::query("CHECKPOINT")
            .execute(database.db.pool())
            .await
            .expect("checkpoint");
        wal_status(database).await == "lost"
    })
    .await
}

/// The last line of a relay's stderr: the error it exits with.
fn last_line(log: &str) -> &str {
    log.lines().last().unwrap_or_default()
}

fn names_the_recovery(line: &str, database: &LogicalDatabase) -> bool {
    line.starts_with("outbox-relay: ")
        && line.contains(&format!(
            "replication slot `{}` was invalidated",
            database.slot.as_str()
        ))
        && line.contains("wal_status = lost")
        && line.contains(&format!(
            "outbox-relay recover-slot --slot {} --since",
            database.slot.as_str()
        ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logical_source_stops_on_an_invalidated_slot_and_recover_slot_loses_nothing() {
    let _alone = SERVICES.lock().await;
    let database = LogicalDatabase::new().await;
    let topic = outbox_testkit::unique_name("logical-lost");
    let collected = kafka::topic_consumer(&topic, 3).await;
    let mut relay = spawn_logical(&database, &Broker::Kafka.url());
    let mut enqueued =
        crate::support::workload::enqueue_events(database.db.pool(), &topic, 20, 5, 5).await;
    assert!(
        wait_until(WAIT, || async { collected.distinct_ids().len() >= 20 }).await,
        "the relay streams before the slot is lost:\n{}",
        relay.log()
    );

    let keep_size = KeepSizeGuard::set(database.db.url(), "32MB");
    let frozen = freeze(relay.pid());
    let since = database.database_now().await;
    // Committed while the relay is frozen: these must not be lost silently.
    enqueued.extend(
        crate::support::workload::enqueue_events(database.db.pool(), &topic, 20, 5, 5).await,
    );
    assert!(
        push_the_slot_out(&database).await,
        "the server never invalidated the slot: wal_status = {}",
        wal_status(&database).await
    );
    drop(frozen);

    let status = relay.wait_exit(WAIT);
    let log = relay.log();
    assert!(
        status.is_some_and(|status| !status.success()),
        "the relay did not stop with a non-zero exit on the lost slot: {status:?}\n{log}"
    );
    assert!(
        names_the_recovery(last_line(&log), &database),
        "the relay's last line does not name the recovery:\n{log}"
    );
    eprintln!("the relay stopped with: {}", last_line(&log));

    // Started on the lost slot: refused with the same line, before
    // anything is read.
    let mut restarted = spawn_logical(&database, &Broker::Kafka.url());
    let status = restarted.wait_exit(WAIT);
    let log = restarted.log();
    assert!(
        status.is_some_and(|status| !status.success()),
        "`run --source logical` on a lost slot did not refuse: {status:?}\n{log}"
    );
    assert!(
        names_the_recovery(last_line(&log), &database),
        "the refusal does not name the recovery:\n{log}"
    );
    assert_eq!(
        wal_status(&database).await,
        "lost",
        "the relay never re-creates a lost slot by itself"
    );

    // The recovery the line names, with outbox-relay alone: the events
    // committed while the slot fell behind, and those after it, all reach
    // the broker, each aggregate in order.
    drop(keep_size);
    let recovered = database.recover_slot(&since);
    assert!(
        recovered.status.success(),
        "recover-slot failed: {}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&recovered.stdout).trim());
    assert_ne!(
        wal_status(&database).await,
        "lost",
        "the slot was re-created"
    );
    enqueued.extend(
        crate::support::workload::enqueue_events(database.db.pool(), &topic, 20, 5, 5).await,
    );
    let mut recovered_relay = spawn_logical(&database, &Broker::Kafka.url());
    assert!(
        wait_until(WAIT, || async {
            collected.distinct_ids().len() >= enqueued.len()
        })
        .await,
        "{} of {} events arrived after recover-slot:\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        recovered_relay.log()
    );
    let duplicates = check_delivery(&enqueued, &collected.snapshot());
    eprintln!("{} events, {duplicates} published again", enqueued.len());
    recovered_relay.signal("TERM");
    let status = recovered_relay.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|status| status.success()),
        "the relay did not exit 0 after the recovery: {status:?}\n{}",
        recovered_relay.log()
    );
}
