//! `OperatorStore`: retention, the backlog, the clock, topics and replay pages.

use outbox_relay::event::Fence;
use std::time::Duration;

use outbox_relay::store::DeadSelector;
use outbox_testkit::TestDatabase;

use super::{LONG, StoreBackend, enqueue, lease_all_and_fetch, publish_and_kill};
use outbox_relay::store::ReplayWindow;

pub(crate) async fn retention_deletes_only_old_published_events<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    enqueue(db, &[("r", 1), ("s", 1), ("t", 1), ("u", 1)]).await;
    let (leases, fetched) = lease_all_and_fetch(store.as_ref(), partition_count).await;
    let published: Vec<i64> = fetched[..2]
        .iter()
        .map(|claimed| claimed.event.id)
        .collect();
    publish_and_kill(
        store.as_ref(),
        partition_count,
        &leases,
        &published,
        &fetched[2],
    )
    .await;

    assert_eq!(
        store.delete_published(LONG, 100).await.expect("delete"),
        0,
        "too young to delete"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store
            .delete_published(Duration::ZERO, 1)
            .await
            .expect("delete"),
        1,
        "bounded batch"
    );
    assert_eq!(
        store
            .delete_published(Duration::ZERO, 100)
            .await
            .expect("delete"),
        1
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending'")
            .await,
        1
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'dead'")
            .await,
        1
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 2);

    let status = store.status().await.expect("status");
    assert_eq!((status.pending, status.dead, status.published), (1, 1, 0));
    assert!(status.oldest_pending_at.is_some());

    assert_eq!(
        store
            .discard_dead(&DeadSelector::Aggregate {
                aggregate_type: "account".to_owned(),
                aggregate_id: "t".to_owned()
            })
            .await
            .expect("discard"),
        1
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 1);
}

pub(crate) async fn the_backlog_reads_pending_and_dead_events_only<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    let empty = store.backlog().await.expect("backlog");
    assert_eq!(
        (empty.pending, empty.dead, empty.oldest_pending_at),
        (0, 0, None)
    );

    enqueue(db, &[("first", 1)]).await;
    let first_created = store
        .status()
        .await
        .expect("status")
        .oldest_pending_at
        .expect("one pending event");
    tokio::time::sleep(Duration::from_millis(20)).await;
    enqueue(db, &[("later", 1), ("doomed", 1), ("other", 1)]).await;
    let (leases, fetched) = lease_all_and_fetch(store.as_ref(), partition_count).await;
    assert_eq!(fetched.len(), 4);
    let backlog = store.backlog().await.expect("backlog");
    assert_eq!((backlog.pending, backlog.dead), (4, 0));
    assert_eq!(backlog.oldest_pending_at, Some(first_created));

    publish_and_kill(
        store.as_ref(),
        partition_count,
        &leases,
        &[fetched[0].event.id],
        &fetched[2],
    )
    .await;

    let backlog = store.backlog().await.expect("backlog");
    let status = store.status().await.expect("status");
    assert_eq!((backlog.pending, backlog.dead), (2, 1));
    assert_eq!((status.pending, status.dead), (2, 1));
    assert_eq!(
        backlog.oldest_pending_at, status.oldest_pending_at,
        "the lowest pending id is the oldest pending event"
    );
    assert!(
        backlog.oldest_pending_at > Some(first_created),
        "the published event no longer counts"
    );
}

/// `database_time` is the clock the database stamps `created_at` with:
/// an event enqueued between two readings lies between them (compared to
/// the millisecond, SQLite's precision).
pub(crate) async fn database_time_is_the_clock_of_created_at<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    let before = store.database_time().await.expect("database time");
    enqueue(db, &[("clock", 1)]).await;
    let after = store.database_time().await.expect("database time");
    let (_, fetched) = lease_all_and_fetch(store.as_ref(), partition_count).await;
    let millis = |time: chrono::DateTime<chrono::Utc>| time.timestamp_millis();
    let created = millis(fetched[0].event.created_at);
    assert!(
        millis(before) <= created && created <= millis(after),
        "{}: created_at {} is not between the database times {before} and {after}",
        DB::LABEL,
        fetched[0].event.created_at
    );
}

/// `topic_exists` finds a topic whatever the state of its events, and only
/// a topic some event has.
pub(crate) async fn topic_exists_finds_events_in_any_state<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    let label = DB::LABEL;
    assert!(
        !store.topic_exists("accounts").await.expect("topic_exists"),
        "{label}: empty table"
    );
    enqueue(db, &[("t", 1), ("t", 2)]).await;
    assert!(
        store.topic_exists("accounts").await.expect("topic_exists"),
        "{label}: pending"
    );
    assert!(
        !store.topic_exists("nothing").await.expect("topic_exists"),
        "{label}: other topic"
    );
    let (leases, fetched) = lease_all_and_fetch(store.as_ref(), partition_count).await;
    publish_and_kill(
        store.as_ref(),
        partition_count,
        &leases,
        &[fetched[0].event.id],
        &fetched[1],
    )
    .await;
    assert!(
        store.topic_exists("accounts").await.expect("topic_exists"),
        "{label}: published and dead"
    );
}

/// `fetch_published` pages through the published events of one topic in
/// the window, in id order, and leaves out pending events, other topics and
/// events outside the window.
pub(crate) async fn fetch_published_pages_one_topic_in_id_order<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    let label = DB::LABEL;
    let published = enqueue(db, &[("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)]).await;
    enqueue_other_topic(db, "ledger", 2).await;
    let (leases, fetched) = lease_all_and_fetch(store.as_ref(), partition_count).await;
    let ids: Vec<i64> = fetched.iter().map(|claimed| claimed.event.id).collect();
    store
        .mark_published(
            Fence {
                relay_id: "relay",
                partition_count,
                leases: &leases,
            },
            &ids,
        )
        .await
        .expect("mark");
    let still_pending = enqueue(db, &[("a", 6)]).await;

    let now = store.database_time().await.expect("database time");
    let window = ReplayWindow {
        topic: "accounts".to_owned(),
        since: now - chrono::Duration::hours(1),
        until: now + chrono::Duration::hours(1),
    };
    let first = store.fetch_published(&window, 0, 3).await.expect("page 1");
    let after = first.last().map_or(0, |event| event.id);
    let second = store
        .fetch_published(&window, after, 3)
        .await
        .expect("page 2");
    let after = second.last().map_or(after, |event| event.id);
    let third = store
        .fetch_published(&window, after, 3)
        .await
        .expect("page 3");
    assert_eq!(
        (first.len(), second.len(), third.len()),
        (3, 2, 0),
        "{label}"
    );
    let pages: Vec<_> = first.iter().chain(&second).collect();
    assert!(
        pages.windows(2).all(|pair| pair[0].id < pair[1].id),
        "{label}: id order"
    );
    let event_ids: Vec<uuid::Uuid> = pages.iter().map(|event| event.event_id).collect();
    assert_eq!(
        event_ids, published,
        "{label}: the published events of the topic"
    );
    assert!(
        !event_ids.contains(&still_pending[0]),
        "{label}: pending left out"
    );
    assert!(
        pages.iter().all(|event| event.topic == "accounts"),
        "{label}"
    );

    let before_the_events = ReplayWindow {
        until: window.since,
        since: window.since - chrono::Duration::hours(1),
        ..window
    };
    let none = store
        .fetch_published(&before_the_events, 0, 100)
        .await
        .expect("empty window");
    assert!(none.is_empty(), "{label}: outside the window");
}

/// `count` events on `topic`, enqueued as messages (the event type's own
/// topic is `accounts`).
async fn enqueue_other_topic<DB: outbox::Backend>(db: &TestDatabase<DB>, topic: &str, count: u64) {
    let messages = (0..count)
        .map(|sequence| {
            outbox::OutboxMessage::new(
                "ledger.posted",
                "/ledger",
                "ledger",
                format!("l-{sequence}"),
                topic,
                serde_json::value::to_raw_value(&serde_json::json!({ "sequence": sequence }))
                    .expect("payload"),
            )
        })
        .collect();
    let mut tx = db.pool().begin().await.expect("begin");
    outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
}
