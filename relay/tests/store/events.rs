//! `EventSource`: per-aggregate blocking, what is fetched, commit wakeups.

use std::time::Duration;

use outbox_relay::event::Wakeup;
use outbox_relay::event::{FailedAttempt, Fence, FetchLimit, FetchRequest};
use outbox_relay::store::DeadSelector;
use outbox_testkit::TestDatabase;

use super::{LONG, StoreBackend, enqueue, fetch_request, lease_all_and_fetch, partitions};

/// A fetch returns the longest run of events, in id order, whose payloads
/// fit its byte cap, and always its first event, whatever its size.
pub(crate) async fn a_fetch_stops_at_its_byte_cap<DB: StoreBackend>(db: &TestDatabase<DB>) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    let partition_count = store.partition_count().await.expect("partition count");
    let large = "l".repeat(250);
    enqueue(db, &[("a", 1), (large.as_str(), 2), ("c", 3), ("d", 4)]).await;
    let leases = store
        .acquire_leases("relay", 1000, LONG)
        .await
        .expect("acquire");
    let all = partitions(&leases);
    let fetch = async |exclude: &[i64], limit: FetchLimit| -> Vec<i64> {
        store
            .fetch_pending(FetchRequest {
                partition_count,
                partitions: &all,
                exclude,
                hold_dead: true,
                limit,
            })
            .await
            .expect("fetch")
            .iter()
            .map(|claimed| claimed.event.id)
            .collect()
    };
    let uncapped = store
        .fetch_pending(fetch_request(partition_count, &all, &[]))
        .await
        .expect("fetch");
    assert_eq!(uncapped.len(), 4);
    let ids: Vec<i64> = uncapped.iter().map(|claimed| claimed.event.id).collect();
    let sizes: Vec<i64> = uncapped
        .iter()
        .map(|claimed| i64::try_from(claimed.payload_bytes()).expect("size"))
        .collect();
    assert!(sizes[1] > 250 && sizes[0] < 100, "the payloads: {sizes:?}");
    let three = sizes[0] + sizes[1] + sizes[2];

    assert_eq!(
        fetch(&[], FetchLimit::new(100, three)).await,
        ids[..3],
        "a cap of exactly three payloads returns three"
    );
    assert_eq!(
        fetch(&[], FetchLimit::new(100, three - 1)).await,
        ids[..2],
        "a byte short of three, two"
    );
    assert_eq!(
        fetch(&[], FetchLimit::new(100, sizes[0] + sizes[1] - 1)).await,
        ids[..1],
        "the cut is a prefix: small events behind the large one wait for it"
    );
    assert_eq!(
        fetch(&[], FetchLimit::new(100, 1)).await,
        ids[..1],
        "the first event comes whatever its size"
    );
    assert_eq!(
        fetch(&ids[..1], FetchLimit::new(100, 1)).await,
        ids[1..2],
        "an event larger than the cap comes alone"
    );
    assert_eq!(
        fetch(&[], FetchLimit::new(2, i64::MAX)).await,
        ids[..2],
        "the event count still bounds the fetch"
    );
}

pub(crate) async fn a_failed_event_holds_back_its_aggregate_only<DB: StoreBackend>(
    db: &TestDatabase<DB>,
) {
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
        .fetch_pending(fetch_request(partition_count, &all, &[]))
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
        .fetch_pending(fetch_request(partition_count, &all, &in_flight))
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
    // A run of consecutive ids is left out, and the ids on either side of
    // it are not.
    let run = [
        fetched[1].event.id,
        fetched[2].event.id,
        fetched[3].event.id,
    ];
    let around = store
        .fetch_pending(fetch_request(partition_count, &all, &run))
        .await
        .expect("fetch");
    let around_ids: Vec<i64> = around.iter().map(|claimed| claimed.event.id).collect();
    assert_eq!(
        around_ids,
        vec![fetched[0].event.id, fetched[4].event.id],
        "a run of ids left out leaves its neighbours in"
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
            .record_failures(
                Fence {
                    relay_id: "relay",
                    partition_count,
                    leases: &leases
                },
                &failures
            )
            .await
            .expect("record"),
        2
    );

    let held = store
        .fetch_pending(fetch_request(partition_count, &all, &[]))
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
        .fetch_pending(FetchRequest {
            partition_count,
            partitions: &all,
            exclude: &[],
            hold_dead: false,
            limit: FetchLimit::events(100),
        })
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
        .fetch_pending(fetch_request(partition_count, &all, &[]))
        .await
        .expect("fetch");
    let after_retry_order: Vec<&str> = after_retry
        .iter()
        .map(|claimed| claimed.event.aggregate_id.as_str())
        .collect();
    assert_eq!(after_retry_order, vec!["y", "z", "y"]);
}

/// An event whose `created_at` a producer wrote by hand, in a form other
/// than the database's default, is read as the same instant; a value that is
/// not a time is refused at insert, so it can never stop the fetch.
pub(crate) async fn a_hand_written_created_at_is_read_as_the_same_instant<DB: StoreBackend>(
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

/// Where the database can tell (PostgreSQL's `NOTIFY`), a commit raises
/// the wakeup that `watch_commits` was given; elsewhere watching is a no-op
/// that must not fail, and the batch loop polls.
pub(crate) async fn a_commit_raises_the_watched_wakeup_where_the_backend_notifies<
    DB: StoreBackend,
>(
    db: &TestDatabase<DB>,
) {
    let store = DB::store(db);
    store.migrate().await.expect("migrate");
    // A registered relay that has not said it polls on its own: producers
    // notify it.
    store
        .heartbeat("watching", Duration::from_secs(60))
        .await
        .expect("register a relay");
    let wakeup = Wakeup::new();
    let stop = tokio_util::sync::CancellationToken::new();
    store.watch_commits(
        wakeup.clone(),
        &outbox_relay::tasks::Tasks::stopped_by(stop.clone()),
    );
    if DB::NOTIFIES_COMMITS {
        // The listener connects in the background: commit until one commit
        // lands after it listens. The deadline bounds a hang; it is not a
        // measured expectation.
        let deadline = tokio::time::Instant::now() + LONG;
        loop {
            enqueue(db, &[("watched", 1)]).await;
            let woken =
                tokio::time::timeout(Duration::from_millis(500), wakeup.wait(Duration::MAX)).await;
            if woken.is_ok() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: no commit raised the wakeup",
                DB::LABEL
            );
        }
    } else {
        enqueue(db, &[("watched", 1)]).await;
    }
    stop.cancel();
}
