//! A relay that holds the stream's lease but cannot open the stream gives
//! the lease up after a lease, so that work is never held hostage; once the
//! slot is free it streams again.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sqlx::Acquire;

use crate::harness::{LogicalDatabase, insert_event};
use crate::support::http::{endpoint_address, get, sample};
use crate::support::process::{FAST_CONFIG, RelayProcess, wait_until};

const WAIT: Duration = Duration::from_secs(60);

/// Another consumer streaming from the slot, so the relay's
/// `START_REPLICATION` is refused; killed on drop.
struct SlotSquatter(Child);

impl SlotSquatter {
    fn start(database: &LogicalDatabase) -> Self {
        let child = Command::new("pg_recvlogical")
            .args([
                "--dbname",
                database.db.url(),
                "--slot",
                database.slot.as_str(),
            ])
            .args(["--start", "--file", "/dev/null", "--no-loop"])
            .args(["--option", "proto_version=1"])
            .arg("--option")
            .arg(format!("publication_names={}", database.slot.as_str()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pg_recvlogical (PostgreSQL's client tools)");
        SlotSquatter(child)
    }
}

impl Drop for SlotSquatter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn stream_lease_token(database: &LogicalDatabase) -> i64 {
    database
        .db
        .count("SELECT lease_token FROM outbox_partitions WHERE partition_no = -1")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_cannot_open_the_stream_gives_its_lease_up() {
    let database = LogicalDatabase::new().await;
    let slot_is_active = || async {
        database
            .db
            .count(&format!(
                "SELECT COUNT(*) FROM pg_replication_slots WHERE slot_name = '{}' AND active",
                database.slot.as_str()
            ))
            .await
            == 1
    };
    let squatter = SlotSquatter::start(&database);
    assert!(
        wait_until(WAIT, slot_is_active).await,
        "pg_recvlogical holds the slot"
    );

    let relay = RelayProcess::spawn_with_args(
        database.db.url(),
        "stdout",
        FAST_CONFIG,
        &[],
        &["--source", "logical", "--slot", database.slot.as_str()],
    );
    let gave_up = wait_until(WAIT, || async {
        stream_lease_token(&database).await >= 2
            && relay.log().contains("giving the stream's lease up")
    })
    .await;
    assert!(
        gave_up,
        "the lease is given up and taken again:\n{}",
        relay.log()
    );

    drop(squatter);
    let mut transaction = database.db.pool().begin().await.expect("begin");
    for sequence in 0..5 {
        let connection = transaction.acquire().await.expect("connection");
        insert_event(connection, "stuck", "a-1", sequence).await;
    }
    transaction.commit().await.expect("commit");
    let address = endpoint_address(&relay).await;
    let published = wait_until(WAIT, || async {
        let metrics = get(&address, "/metrics").await.body;
        sample(
            &metrics,
            "outbox_relay_events_published_total{topic=\"stuck\"}",
        ) == Some(5.0)
    })
    .await;
    assert!(
        published,
        "the relay streams once the slot is free:\n{}",
        relay.log()
    );
}
