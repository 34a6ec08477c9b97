//! The relay's statements against real PostgreSQL, MariaDB and SQLite:
//! leases and fencing, per-aggregate blocking, retention and dead-event
//! repair. Every scenario runs once per backend on a fresh database.

use std::sync::Arc;
use std::time::Duration;

use outbox::Event;
use outbox_relay::store::{
    ClaimedEvent, DeadSelector, FailedAttempt, Lease, MySqlStore, OutboxStore, PostgresStore,
    SqliteStore,
};
use outbox_testkit::{TestBackend, TestDatabase};
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(
    type = "account.credited",
    aggregate = "account",
    topic = "accounts",
    source = "/accounts"
)]
struct AccountCredited {
    #[event(aggregate_id)]
    account: String,
    amount: i64,
}

const LONG: Duration = Duration::from_secs(60);

async fn enqueue<DB: outbox::Backend>(
    db: &TestDatabase<DB>,
    events: &[(&str, i64)],
) -> Vec<uuid::Uuid> {
    let events: Vec<AccountCredited> = events
        .iter()
        .map(|(account, amount)| AccountCredited {
            account: (*account).to_owned(),
            amount: *amount,
        })
        .collect();
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::enqueue_batch(&mut tx, &events)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    ids
}

/// As relay "relay": take every partition and fetch what is due.
async fn lease_all_and_fetch(
    store: &dyn OutboxStore,
    partition_count: i32,
) -> (Vec<Lease>, Vec<ClaimedEvent>) {
    let leases = store
        .acquire_leases("relay", 1000, LONG)
        .await
        .expect("acquire");
    let fetched = store
        .fetch_pending(partition_count, &partitions(&leases), &[], true, 100)
        .await
        .expect("fetch");
    (leases, fetched)
}

/// As relay "relay": mark `published`, and move `dead` to the dead state.
async fn publish_and_kill(
    store: &dyn OutboxStore,
    partition_count: i32,
    leases: &[Lease],
    published: &[i64],
    dead: &ClaimedEvent,
) {
    store
        .mark_published("relay", partition_count, leases, published)
        .await
        .expect("mark");
    let last_attempt = FailedAttempt {
        id: dead.event.id,
        partition_no: dead.partition_no,
        error: "rejected".to_owned(),
        retry_in: None,
    };
    store
        .record_failures("relay", partition_count, leases, &[last_attempt])
        .await
        .expect("record");
}

fn partitions(leases: &[Lease]) -> Vec<i32> {
    leases.iter().map(|lease| lease.partition_no).collect()
}

async fn a_lost_lease_cannot_mark_or_fail_rows<DB: StoreBackend>(db: &TestDatabase<DB>) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    enqueue(db, &[("a", 1), ("b", 2), ("c", 3)]).await;

    let short = Duration::from_millis(1500);
    let old = store
        .acquire_leases("relay-a", 1000, short)
        .await
        .expect("acquire");
    assert_eq!(
        old.len() as i32,
        partition_count,
        "a lone relay can take every partition"
    );
    assert!(
        store
            .acquire_leases("relay-b", 1000, LONG)
            .await
            .expect("acquire")
            .is_empty(),
        "live leases are not taken"
    );
    let fetched = store
        .fetch_pending(partition_count, &partitions(&old), &[], true, 100)
        .await
        .expect("fetch");
    assert_eq!(fetched.len(), 3);
    let ids: Vec<i64> = fetched.iter().map(|claimed| claimed.event.id).collect();

    // relay-a stalls past its lease; relay-b takes the partitions over.
    tokio::time::sleep(short + Duration::from_millis(500)).await;
    let new = store
        .acquire_leases("relay-b", 1000, LONG)
        .await
        .expect("acquire after expiry");
    assert_eq!(new.len(), old.len(), "expired leases are taken over");
    for (old_lease, new_lease) in old.iter().zip(&new) {
        assert_eq!(old_lease.partition_no, new_lease.partition_no);
        assert!(
            new_lease.lease_token > old_lease.lease_token,
            "takeover bumps the fencing token"
        );
    }
    assert!(
        store
            .renew_leases("relay-a", &old, LONG)
            .await
            .expect("renew")
            .is_empty(),
        "an expired lease is not renewed"
    );

    let stale_mark = store
        .mark_published("relay-a", partition_count, &old, &ids)
        .await
        .expect("mark");
    assert_eq!(stale_mark, 0, "a stale lease marks nothing");
    let stale_failure = FailedAttempt {
        id: ids[0],
        partition_no: fetched[0].partition_no,
        error: "stale".to_owned(),
        retry_in: None,
    };
    let failed = store
        .record_failures("relay-a", partition_count, &old, &[stale_failure])
        .await
        .expect("record");
    assert_eq!(failed, 0, "a stale lease alters nothing");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending' AND attempts = 0")
            .await,
        3
    );

    let marked = store
        .mark_published("relay-b", partition_count, &new, &ids)
        .await
        .expect("mark");
    assert_eq!(marked, 3, "the live lease marks the rows");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'")
            .await,
        3
    );

    // Released leases are free again, and fence their old holder out.
    assert_eq!(
        store
            .release_leases("relay-b", &new)
            .await
            .expect("release"),
        new.len() as u64
    );
    let again = store
        .acquire_leases("relay-c", 1000, LONG)
        .await
        .expect("acquire released");
    assert_eq!(again.len(), new.len());
}

/// The token, not the owner, fences: the same relay holding a partition
/// again under a new token cannot complete work fetched under the old one.
async fn the_same_owner_with_an_old_token_is_fenced_out<DB: StoreBackend>(db: &TestDatabase<DB>) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    enqueue(db, &[("a", 1), ("b", 2), ("c", 3)]).await;
    let old = store
        .acquire_leases("relay-a", 1000, LONG)
        .await
        .expect("acquire");
    let fetched = store
        .fetch_pending(partition_count, &partitions(&old), &[], true, 100)
        .await
        .expect("fetch");
    let ids: Vec<i64> = fetched.iter().map(|claimed| claimed.event.id).collect();
    assert_eq!(ids.len(), 3);

    // relay-a gives its partitions up and takes them again: new tokens.
    store
        .release_leases("relay-a", &old)
        .await
        .expect("release");
    let new = store
        .acquire_leases("relay-a", 1000, LONG)
        .await
        .expect("acquire again");
    assert_eq!(partitions(&new), partitions(&old));
    for (old_lease, new_lease) in old.iter().zip(&new) {
        assert!(new_lease.lease_token > old_lease.lease_token);
    }

    let stale_mark = store
        .mark_published("relay-a", partition_count, &old, &ids)
        .await
        .expect("mark");
    assert_eq!(
        stale_mark, 0,
        "an old token marks nothing, whoever holds it"
    );
    let stale_failure = FailedAttempt {
        id: ids[0],
        partition_no: fetched[0].partition_no,
        error: "stale".to_owned(),
        retry_in: None,
    };
    assert_eq!(
        store
            .record_failures("relay-a", partition_count, &old, &[stale_failure])
            .await
            .expect("record"),
        0,
        "an old token alters nothing"
    );
    assert!(
        store
            .renew_leases("relay-a", &old, LONG)
            .await
            .expect("renew")
            .is_empty(),
        "an old token is not renewed"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending' AND attempts = 0")
            .await,
        3
    );
    assert_eq!(
        store
            .mark_published("relay-a", partition_count, &new, &ids)
            .await
            .expect("mark"),
        3,
        "the current token marks the rows"
    );
}

async fn concurrent_acquirers_split_the_partitions<DB: StoreBackend>(db: &TestDatabase<DB>) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    let mut tasks = Vec::new();
    for relay in 0..4 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            store
                .acquire_leases(&format!("relay-{relay}"), 1000, LONG)
                .await
        }));
    }
    let mut taken = Vec::new();
    for task in tasks {
        taken.extend(partitions(&task.await.expect("task").expect("acquire")));
    }
    taken.sort_unstable();
    assert_eq!(
        taken,
        (0..partition_count).collect::<Vec<_>>(),
        "every partition is taken exactly once"
    );
}

async fn a_failed_event_holds_back_its_aggregate_only<DB: StoreBackend>(db: &TestDatabase<DB>) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    enqueue(db, &[("x", 1), ("y", 1), ("x", 2), ("z", 1), ("y", 2)]).await;
    let leases = store
        .acquire_leases("relay", 1000, LONG)
        .await
        .expect("acquire");
    let all = partitions(&leases);

    let fetched = store
        .fetch_pending(partition_count, &all, &[], true, 100)
        .await
        .expect("fetch");
    let order: Vec<&str> = fetched
        .iter()
        .map(|claimed| claimed.event.aggregate_id.as_str())
        .collect();
    assert_eq!(
        order,
        vec!["x", "y", "x", "z", "y"],
        "pending events come in id order"
    );
    let in_flight = [fetched[0].event.id, fetched[3].event.id];
    let rest = store
        .fetch_pending(partition_count, &all, &in_flight, true, 100)
        .await
        .expect("fetch");
    let rest_ids: Vec<i64> = rest.iter().map(|claimed| claimed.event.id).collect();
    assert_eq!(
        rest_ids,
        vec![
            fetched[1].event.id,
            fetched[2].event.id,
            fetched[4].event.id
        ],
        "events published but not yet marked are left out"
    );

    // x's first event fails and waits a minute; y's first event is dead.
    let x1 = &fetched[0];
    let y1 = &fetched[1];
    let failures = [
        FailedAttempt {
            id: x1.event.id,
            partition_no: x1.partition_no,
            error: "broker said no".to_owned(),
            retry_in: Some(LONG),
        },
        FailedAttempt {
            id: y1.event.id,
            partition_no: y1.partition_no,
            error: "too large".to_owned(),
            retry_in: None,
        },
    ];
    assert_eq!(
        store
            .record_failures("relay", partition_count, &leases, &failures)
            .await
            .expect("record"),
        2
    );

    let held = store
        .fetch_pending(partition_count, &all, &[], true, 100)
        .await
        .expect("fetch");
    let held_order: Vec<&str> = held
        .iter()
        .map(|claimed| claimed.event.aggregate_id.as_str())
        .collect();
    assert_eq!(
        held_order,
        vec!["z"],
        "x waits for its retry, y is held by its dead event, z flows"
    );

    let skipped = store
        .fetch_pending(partition_count, &all, &[], false, 100)
        .await
        .expect("fetch");
    let skipped_order: Vec<&str> = skipped
        .iter()
        .map(|claimed| claimed.event.aggregate_id.as_str())
        .collect();
    assert_eq!(
        skipped_order,
        vec!["z", "y"],
        "under the skip policy a dead event holds nothing"
    );

    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'dead' AND attempts = 1 AND last_error = 'too large'")
            .await,
        1
    );

    // An operator retries the dead event: it is pending again, ahead of y's second.
    let dead = store
        .list_dead(&DeadSelector::All, 10)
        .await
        .expect("list dead");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].last_error.as_deref(), Some("too large"));
    let selector = DeadSelector::EventId(dead[0].event_id.clone());
    assert_eq!(store.retry_dead(&selector).await.expect("retry"), 1);
    let after_retry = store
        .fetch_pending(partition_count, &all, &[], true, 100)
        .await
        .expect("fetch");
    let after_retry_order: Vec<&str> = after_retry
        .iter()
        .map(|claimed| claimed.event.aggregate_id.as_str())
        .collect();
    assert_eq!(after_retry_order, vec!["y", "z", "y"]);
}

async fn retention_deletes_only_old_published_events<DB: StoreBackend>(db: &TestDatabase<DB>) {
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

async fn the_backlog_reads_pending_and_dead_events_only<DB: StoreBackend>(db: &TestDatabase<DB>) {
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

/// An event whose `created_at` a producer wrote by hand, in a form other
/// than the database's default, is read as the same instant; a value that is
/// not a time is refused at insert, so it can never stop the fetch.
async fn a_hand_written_created_at_is_read_as_the_same_instant<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    // 2026-11-30T08:00:00Z, as each database's column type takes it.
    let hand_written = match DB::LABEL {
        "PostgreSQL" => "2026-11-30 10:00:00+02",
        "MariaDB" => "2026-11-30 08:00:00",
        _ => "2026-11-30 10:00:00+02:00",
    };
    let insert = |event_id: &str, created_at: &str| {
        format!(
            "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload, created_at) \
             VALUES ('{event_id}', 'account.credited', '/accounts', 'account', 'hand', 'accounts', '{{}}', '{created_at}')"
        )
    };
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(
        &mut connection,
        &insert("0195f3a8-7d2c-7000-8000-000000000001", hand_written),
    )
    .await
    .unwrap_or_else(|error| panic!("{}: insert {hand_written}: {error}", DB::LABEL));
    let refused = DB::execute(
        &mut connection,
        &insert("0195f3a8-7d2c-7000-8000-000000000002", "1732960800"),
    )
    .await;
    let error = refused
        .expect_err("a created_at that is not a time is refused")
        .to_string();
    if DB::LABEL == "SQLite" {
        assert!(
            error.contains("created_at"),
            "the error names the column: {error}"
        );
    }
    drop(connection);

    let (_, fetched) = lease_all_and_fetch(store.as_ref(), partition_count).await;
    assert_eq!(fetched.len(), 1, "{}: the event is fetched", DB::LABEL);
    let expected = chrono::DateTime::parse_from_rfc3339("2026-11-30T08:00:00Z")
        .expect("time")
        .with_timezone(&chrono::Utc);
    assert_eq!(fetched[0].event.created_at, expected, "{}", DB::LABEL);
    let status = store.status().await.expect("status");
    assert_eq!(status.oldest_pending_at, Some(expected), "{}", DB::LABEL);
}

/// The backend's store, over the test database's pool.
trait StoreBackend: outbox::Backend + TestBackend {
    fn store(db: &TestDatabase<Self>) -> Arc<dyn OutboxStore>;
}

impl StoreBackend for sqlx::Postgres {
    fn store(db: &TestDatabase<Self>) -> Arc<dyn OutboxStore> {
        Arc::new(PostgresStore::new(db.pool().clone()))
    }
}

impl StoreBackend for sqlx::MySql {
    fn store(db: &TestDatabase<Self>) -> Arc<dyn OutboxStore> {
        Arc::new(MySqlStore::new(db.pool().clone()))
    }
}

impl StoreBackend for sqlx::Sqlite {
    fn store(db: &TestDatabase<Self>) -> Arc<dyn OutboxStore> {
        Arc::new(SqliteStore::new(db.pool().clone()))
    }
}

outbox_testkit::test_on_every_backend!(
    a_lost_lease_cannot_mark_or_fail_rows,
    the_same_owner_with_an_old_token_is_fenced_out,
    concurrent_acquirers_split_the_partitions,
    a_failed_event_holds_back_its_aggregate_only,
    retention_deletes_only_old_published_events,
    the_backlog_reads_pending_and_dead_events_only,
    a_hand_written_created_at_is_read_as_the_same_instant,
);
