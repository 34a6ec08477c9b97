//! `LeaseStore`: leases and fencing, concurrent acquirers, relay liveness.

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::event::{FailedAttempt, Fence, Lease};
use outbox_testkit::TestDatabase;

use super::{LONG, StoreBackend, enqueue, fetch_request, partitions};

pub(crate) async fn a_lost_lease_cannot_mark_or_fail_rows<DB: StoreBackend>(db: &TestDatabase<DB>) {
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
        .fetch_pending(fetch_request(partition_count, &partitions(&old), &[]))
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
        .mark_published(
            Fence {
                relay_id: "relay-a",
                partition_count,
                leases: &old,
            },
            &ids,
        )
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
        .record_failures(
            Fence {
                relay_id: "relay-a",
                partition_count,
                leases: &old,
            },
            &[stale_failure],
        )
        .await
        .expect("record");
    assert_eq!(failed, 0, "a stale lease alters nothing");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending' AND attempts = 0")
            .await,
        3
    );

    let marked = store
        .mark_published(
            Fence {
                relay_id: "relay-b",
                partition_count,
                leases: &new,
            },
            &ids,
        )
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

/// The mark of `retention.published = "0s"` deletes the acknowledged rows,
/// fenced as the mark is: a token nobody holds or another owner deletes
/// nothing, and a row that is no longer pending stays.
pub(crate) async fn the_delete_mark_removes_acknowledged_rows_under_a_live_lease_only<
    DB: StoreBackend,
>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    enqueue(db, &[("a", 1), ("b", 2), ("c", 3)]).await;
    let leases = store
        .acquire_leases("relay-a", 1000, LONG)
        .await
        .expect("acquire");
    let fetched = store
        .fetch_pending(fetch_request(partition_count, &partitions(&leases), &[]))
        .await
        .expect("fetch");
    let ids: Vec<i64> = fetched.iter().map(|claimed| claimed.event.id).collect();
    assert_eq!(ids.len(), 3);

    let forged: Vec<Lease> = leases
        .iter()
        .map(|lease| Lease {
            lease_token: lease.lease_token + 100,
            ..*lease
        })
        .collect();
    for (relay_id, held) in [("relay-a", &forged), ("relay-b", &leases)] {
        let fence = Fence {
            relay_id,
            partition_count,
            leases: held,
        };
        let deleted = store
            .delete_acknowledged(fence, &ids)
            .await
            .expect("delete");
        assert_eq!(
            deleted, 0,
            "{relay_id} without the live lease deletes nothing"
        );
    }
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 3);

    let fence = Fence {
        relay_id: "relay-a",
        partition_count,
        leases: &leases,
    };
    let dead = FailedAttempt {
        id: ids[2],
        partition_no: fetched[2].partition_no,
        error: "rejected".to_owned(),
        retry_in: None,
    };
    assert_eq!(
        store.record_failures(fence, &[dead]).await.expect("record"),
        1
    );
    let deleted = store
        .delete_acknowledged(fence, &ids)
        .await
        .expect("delete");
    assert_eq!(
        deleted, 2,
        "the live lease deletes the pending rows it names"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'dead'")
            .await,
        1,
        "a dead row is not deleted by the mark"
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 1);
}

/// The token, not the owner, fences: the same relay holding a partition
/// again under a new token cannot complete work fetched under the old one.
pub(crate) async fn the_same_owner_with_an_old_token_is_fenced_out<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    enqueue(db, &[("a", 1), ("b", 2), ("c", 3)]).await;
    let old = store
        .acquire_leases("relay-a", 1000, LONG)
        .await
        .expect("acquire");
    let fetched = store
        .fetch_pending(fetch_request(partition_count, &partitions(&old), &[]))
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
        .mark_published(
            Fence {
                relay_id: "relay-a",
                partition_count,
                leases: &old,
            },
            &ids,
        )
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
            .record_failures(
                Fence {
                    relay_id: "relay-a",
                    partition_count,
                    leases: &old
                },
                &[stale_failure]
            )
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
            .mark_published(
                Fence {
                    relay_id: "relay-a",
                    partition_count,
                    leases: &new
                },
                &ids
            )
            .await
            .expect("mark"),
        3,
        "the current token marks the rows"
    );
}

pub(crate) async fn concurrent_acquirers_split_the_partitions<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
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

/// `heartbeat` counts the live relays, this one included; `deregister`
/// forgets one, and forgetting an unknown relay is no error.
pub(crate) async fn heartbeat_counts_live_relays_and_deregister_forgets_one<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let label = DB::LABEL;
    assert_eq!(
        store.heartbeat("relay-a", LONG).await.expect("heartbeat"),
        1,
        "{label}"
    );
    assert_eq!(
        store.heartbeat("relay-b", LONG).await.expect("heartbeat"),
        2,
        "{label}"
    );
    assert_eq!(
        store.heartbeat("relay-a", LONG).await.expect("heartbeat"),
        2,
        "a second heartbeat is the same relay ({label})"
    );
    store.deregister("relay-a").await.expect("deregister");
    assert_eq!(
        store.heartbeat("relay-b", LONG).await.expect("heartbeat"),
        1,
        "{label}"
    );
    store
        .deregister("never-registered")
        .await
        .expect("deregister an unknown relay");
    store.deregister("relay-b").await.expect("deregister");
    assert_eq!(
        store.heartbeat("relay-c", LONG).await.expect("heartbeat"),
        1,
        "{label}"
    );
}
