//! The source driven directly: commit order, and the confirmed position
//! held behind an unsettled transaction.

use std::time::Duration;

use outbox_relay::event::{Fence, FetchLimit, FetchRequest};
use outbox_relay::leases::LeaseStore;
use outbox_relay::source::EventSource;
use sqlx::Acquire;

use crate::harness::{LogicalDatabase, WAIT, acquire, fetch_at_least, insert_event};
use crate::support::process::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_arrive_in_commit_order_and_the_slot_waits_for_every_earlier_transaction() {
    let database = LogicalDatabase::new().await;
    let source = database.source();
    let leases = acquire(&source, "relay-a").await;
    assert_eq!(leases.len(), 1, "the stream lease is free");

    // The transaction holding the lower id commits last.
    let mut first = database.db.pool().begin().await.expect("begin");
    let mut second = database.db.pool().begin().await.expect("begin");
    let lower = insert_event(first.acquire().await.expect("conn"), "t", "a-1", 1).await;
    let higher = insert_event(second.acquire().await.expect("conn"), "t", "a-2", 2).await;
    assert!(lower < higher);
    second.commit().await.expect("commit");
    first.commit().await.expect("commit");

    let fetched = fetch_at_least(&source, 2).await;
    let ids: Vec<i64> = fetched.iter().map(|claimed| claimed.event.id).collect();
    assert_eq!(ids, vec![higher, lower], "commit order");
    assert_eq!(fetched[0].event.aggregate_id, "a-2");

    // Settling the later transaction first confirms nothing.
    let before = source.confirmed_position();
    assert_eq!(
        source
            .mark_published(
                Fence {
                    relay_id: "relay-a",
                    partition_count: 1,
                    leases: &leases
                },
                &[lower]
            )
            .await
            .expect("mark"),
        1
    );
    assert_eq!(source.confirmed_position(), before);
    assert_eq!(source.unsettled_events(), 1);
    // A mark under another lease token changes nothing.
    let stale = [outbox_relay::event::Lease {
        partition_no: 0,
        lease_token: leases[0].lease_token + 1,
    }];
    assert_eq!(
        source
            .mark_published(
                Fence {
                    relay_id: "relay-a",
                    partition_count: 1,
                    leases: &stale
                },
                &[higher]
            )
            .await
            .expect("mark"),
        0
    );
    assert_eq!(
        source
            .mark_published(
                Fence {
                    relay_id: "relay-a",
                    partition_count: 1,
                    leases: &leases
                },
                &[higher]
            )
            .await
            .expect("mark"),
        1
    );
    let confirmed = source.confirmed_position();
    assert!(confirmed > before, "the slot moves once both are settled");
    assert!(
        wait_until(WAIT, || async {
            database.confirmed_flush().await >= confirmed
        })
        .await,
        "the server learns the confirmed position"
    );
    assert_eq!(
        database
            .db
            .count("SELECT COUNT(*) FROM outbox_events WHERE state <> 'pending' OR last_error IS NOT NULL")
            .await,
        0,
        "the happy path writes no row"
    );

    source
        .release_leases("relay-a", &leases)
        .await
        .expect("release");
}

/// A failure recorded before a restart: the transaction is streamed again,
/// the failed event's copy is settled by what the table already says (its
/// error kept), and the slot moves once the rest is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_recorded_before_a_restart_does_not_hold_the_slot_after_it() {
    let database = LogicalDatabase::new().await;
    let source = database.source();
    let leases = acquire(&source, "relay-a").await;
    let mut transaction = database.db.pool().begin().await.expect("begin");
    let connection = transaction.acquire().await.expect("connection");
    let failed = insert_event(connection, "t", "a-1", 1).await;
    let flowing = insert_event(connection, "t", "b-1", 1).await;
    transaction.commit().await.expect("commit");
    assert_eq!(fetch_at_least(&source, 2).await.len(), 2);
    let failure = outbox_relay::event::FailedAttempt {
        id: failed,
        partition_no: 0,
        error: "rejected by the broker".to_owned(),
        retry_in: Some(Duration::from_secs(3600)),
    };
    assert_eq!(
        source
            .record_failures(
                Fence {
                    relay_id: "relay-a",
                    partition_count: 1,
                    leases: &leases
                },
                &[failure]
            )
            .await
            .expect("record"),
        1
    );
    let before = database.confirmed_flush().await;
    source
        .release_leases("relay-a", &leases)
        .await
        .expect("release");

    let leases = acquire(&source, "relay-a").await;
    let fetched = fetch_at_least(&source, 1).await;
    let ids: Vec<i64> = fetched.iter().map(|claimed| claimed.event.id).collect();
    assert_eq!(ids, vec![flowing], "the failed event waits for its retry");
    source
        .mark_published(
            Fence {
                relay_id: "relay-a",
                partition_count: 1,
                leases: &leases,
            },
            &[flowing],
        )
        .await
        .expect("mark");
    assert_eq!(source.unsettled_events(), 0);
    assert!(
        wait_until(WAIT, || async { database.confirmed_flush().await > before }).await,
        "the slot moves past the transaction"
    );
    let error: Option<String> =
        sqlx::query_scalar("SELECT last_error FROM outbox_events WHERE id = $1")
            .bind(failed)
            .fetch_one(database.db.pool())
            .await
            .expect("failed row");
    assert_eq!(error.as_deref(), Some("rejected by the broker"));
    source
        .release_leases("relay-a", &leases)
        .await
        .expect("release");
}

/// The stream stops reading once its buffer holds `max_batch_bytes` of
/// payloads, and reads on as they are settled; a fetch from it stops at
/// its byte cap, its first event whatever the size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_buffer_and_its_fetches_are_bounded_by_payload_bytes() {
    let database = LogicalDatabase::new().await;
    // Each payload is about 35 bytes: three fill 100.
    let source = database.source_buffering(100);
    let leases = acquire(&source, "relay-a").await;
    let mut ids = Vec::new();
    for sequence in 0..10 {
        let mut transaction = database.db.pool().begin().await.expect("begin");
        let connection = transaction.acquire().await.expect("conn");
        ids.push(insert_event(connection, "t", &format!("a-{sequence}"), sequence).await);
        transaction.commit().await.expect("commit");
    }
    let first = fetch_at_least(&source, 3).await;
    assert_eq!(
        first
            .iter()
            .map(|claimed| claimed.event.id)
            .collect::<Vec<_>>(),
        ids[..3],
        "the buffer holds three transactions"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        source.unsettled_events(),
        3,
        "the stream reads no further while the buffer is full"
    );
    let capped = source
        .fetch_pending(FetchRequest {
            partition_count: 1,
            partitions: &[0],
            exclude: &[],
            hold_dead: true,
            limit: FetchLimit::new(100, 1),
        })
        .await
        .expect("fetch");
    assert_eq!(
        capped
            .iter()
            .map(|claimed| claimed.event.id)
            .collect::<Vec<_>>(),
        ids[..1],
        "a fetch returns its first event whatever its size"
    );
    let two = i64::try_from(first[0].payload_bytes() + first[1].payload_bytes()).expect("size");
    let fitting = source
        .fetch_pending(FetchRequest {
            partition_count: 1,
            partitions: &[0],
            exclude: &[],
            hold_dead: true,
            limit: FetchLimit::new(100, two),
        })
        .await
        .expect("fetch");
    assert_eq!(
        fitting
            .iter()
            .map(|claimed| claimed.event.id)
            .collect::<Vec<_>>(),
        ids[..2],
        "then as many as fit"
    );
    assert_eq!(
        source
            .mark_published(
                Fence {
                    relay_id: "relay-a",
                    partition_count: 1,
                    leases: &leases
                },
                &ids[..3]
            )
            .await
            .expect("mark"),
        3
    );
    let next = fetch_at_least(&source, 3).await;
    assert_eq!(
        next.iter()
            .map(|claimed| claimed.event.id)
            .collect::<Vec<_>>(),
        ids[3..6],
        "settled events make room for the next ones"
    );
}
