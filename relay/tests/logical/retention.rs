//! Retention under the logical source: a streamed event is deleted once it
//! is old enough and the slot has confirmed a checkpoint taken after its
//! transaction; failed events and events the slot has not passed stay.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use outbox_relay::event::{FailedAttempt, Fence};
use outbox_relay::leases::LeaseStore;
use outbox_relay::operator::RetentionSettings;
use outbox_relay::operator::run_logical_retention_pass;
use outbox_relay::source::EventSource;
use sqlx::Acquire;

use crate::harness::{LogicalDatabase, WAIT, acquire, fetch_at_least, insert_event};
use crate::support::process::wait_until;

/// Passes made while waiting for a checkpoint that an unsettled event
/// keeps the slot from confirming.
const PASSES_BEHIND_AN_UNSETTLED_EVENT: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_events_are_deleted_once_the_slot_confirmed_a_later_checkpoint() {
    let database = LogicalDatabase::new().await;
    let source = database.source();
    let leases = acquire(&source, "relay-retention").await;
    let mut settings = RetentionSettings::default();
    settings.keep_published = Duration::ZERO;
    settings.interval = Duration::ZERO;
    settings.batch_size = 2;
    let deleted = AtomicU64::new(0);
    let pass = || async {
        let rows = run_logical_retention_pass(
            database.store.pool(),
            database.store.as_ref(),
            &database.slot,
            &settings,
        )
        .await
        .expect("retention pass");
        deleted.fetch_add(rows, Ordering::SeqCst)
    };
    let rows_left = || async {
        sqlx::query_scalar::<_, i64>("SELECT id FROM outbox_events ORDER BY id")
            .fetch_all(database.db.pool())
            .await
            .expect("rows left")
    };

    let mut transaction = database.db.pool().begin().await.expect("begin");
    let mut ids = Vec::new();
    for sequence in 0..4 {
        let connection = transaction.acquire().await.expect("connection");
        ids.push(insert_event(connection, "t", &format!("a-{sequence}"), sequence).await);
    }
    transaction.commit().await.expect("commit");
    pass().await;
    assert_eq!(rows_left().await, ids, "nothing is settled yet");

    // Three published, one rejected and recorded for a retry.
    assert_eq!(fetch_at_least(&source, 4).await.len(), 4);
    let (published, failed) = ids.split_at(3);
    source
        .mark_published(
            Fence {
                relay_id: "relay-retention",
                partition_count: 1,
                leases: &leases,
            },
            published,
        )
        .await
        .expect("mark");
    let failure = FailedAttempt {
        id: failed[0],
        partition_no: 0,
        error: "rejected".to_owned(),
        retry_in: Some(Duration::from_secs(3600)),
    };
    source
        .record_failures(
            Fence {
                relay_id: "relay-retention",
                partition_count: 1,
                leases: &leases,
            },
            &[failure],
        )
        .await
        .expect("record failure");
    // Each pass takes a checkpoint; transactions of other databases can
    // hold a checkpoint's snapshot back, so a later one may be the first
    // to cover these rows.
    assert!(
        wait_until(WAIT, || async {
            pass().await;
            deleted.load(Ordering::SeqCst) == 3
        })
        .await,
        "the three published events are deleted"
    );
    assert_eq!(rows_left().await, vec![failed[0]], "the failed event stays");

    // An event streamed and not settled: the slot cannot confirm past it,
    // so no checkpoint after it ever covers it.
    let mut later = database.db.pool().begin().await.expect("begin");
    let connection = later.acquire().await.expect("connection");
    let unsettled = insert_event(connection, "t", "b-1", 9).await;
    later.commit().await.expect("commit");
    assert_eq!(fetch_at_least(&source, 1).await.len(), 1);
    for _ in 0..PASSES_BEHIND_AN_UNSETTLED_EVENT {
        pass().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        rows_left().await,
        vec![failed[0], unsettled],
        "kept while unsettled"
    );
    source
        .mark_published(
            Fence {
                relay_id: "relay-retention",
                partition_count: 1,
                leases: &leases,
            },
            &[unsettled],
        )
        .await
        .expect("mark");
    assert!(
        wait_until(WAIT, || async {
            pass().await;
            deleted.load(Ordering::SeqCst) == 4
        })
        .await,
        "deleted once settled and confirmed"
    );
    assert_eq!(rows_left().await, vec![failed[0]]);
    source
        .release_leases("relay-retention", &leases)
        .await
        .expect("release");
}
