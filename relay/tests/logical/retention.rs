//! Retention under the logical source: a streamed event is deleted once it
//! is old enough and the slot has confirmed a checkpoint taken after its
//! transaction; failed events and events the slot has not passed stay.

use std::time::Duration;

use outbox_relay::RetentionSettings;
use outbox_relay::logical::run_logical_retention_pass;
use outbox_relay::store::{EventSource, FailedAttempt, LeaseStore};
use sqlx::Acquire;

use crate::harness::{LogicalDatabase, WAIT, acquire, fetch_at_least, insert_event};
use crate::support::process::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_events_are_deleted_once_the_slot_confirmed_a_later_checkpoint() {
    let database = LogicalDatabase::new().await;
    let source = database.source();
    let leases = acquire(&source, "relay-retention").await;
    let settings = RetentionSettings {
        keep_published: Duration::ZERO,
        interval: Duration::ZERO,
        batch_size: 2,
    };
    let pass = || async {
        run_logical_retention_pass(
            database.store.pool(),
            database.store.as_ref(),
            &database.slot,
            &settings,
        )
        .await
        .expect("retention pass")
    };

    let mut transaction = database.db.pool().begin().await.expect("begin");
    let mut ids = Vec::new();
    for sequence in 0..4 {
        let connection = transaction.acquire().await.expect("connection");
        ids.push(insert_event(connection, "t", &format!("a-{sequence}"), sequence).await);
    }
    transaction.commit().await.expect("commit");
    assert_eq!(pass().await, 0, "nothing is settled yet");

    // Three published, one rejected and recorded for a retry.
    assert_eq!(fetch_at_least(&source, 4).await.len(), 4);
    let (published, failed) = ids.split_at(3);
    source
        .mark_published("relay-retention", 1, &leases, published)
        .await
        .expect("mark");
    let failure = FailedAttempt {
        id: failed[0],
        partition_no: 0,
        error: "rejected".to_owned(),
        retry_in: Some(Duration::from_secs(3600)),
    };
    source
        .record_failures("relay-retention", 1, &leases, &[failure])
        .await
        .expect("record failure");
    // An event committed after the checkpoint, published too.
    let mut later = database.db.pool().begin().await.expect("begin");
    let connection = later.acquire().await.expect("connection");
    let later_id = insert_event(connection, "t", "b-1", 9).await;
    later.commit().await.expect("commit");
    assert_eq!(fetch_at_least(&source, 1).await.len(), 1);
    source
        .mark_published("relay-retention", 1, &leases, &[later_id])
        .await
        .expect("mark");

    let checkpoint: i64 = database
        .db
        .count("SELECT (MIN(wal_position) - '0/0'::pg_lsn)::bigint FROM outbox_stream_checkpoints")
        .await;
    assert!(
        wait_until(WAIT, || async {
            database.confirmed_flush().await >= checkpoint as u64
        })
        .await,
        "the slot confirms the checkpoint"
    );
    assert_eq!(pass().await, 3, "the three published before the checkpoint");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM outbox_events ORDER BY id")
        .fetch_all(database.db.pool())
        .await
        .expect("rows left");
    assert_eq!(left, vec![failed[0], later_id]);
    source
        .release_leases("relay-retention", &leases)
        .await
        .expect("release");
}
