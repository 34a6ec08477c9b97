//! Watching the logical source: the slot's gauges on `/metrics` and the
//! slot in `outbox-relay status`; the pending gauges and counts leave out
//! the rows the stream published without writing them.

use sqlx::Acquire;

use crate::harness::{LogicalDatabase, WAIT, insert_event};
use crate::support::http::{endpoint_address, get, sample};
use crate::support::process::wait_until;

/// Commit one event per entry of `aggregates` in one transaction, then wait
/// until `/metrics` shows the slot confirmed past it with nothing
/// unsettled. Returns whether it did, and the last `/metrics` read.
async fn commit_and_wait_until_confirmed(
    database: &LogicalDatabase,
    address: &str,
    aggregates: &[&str],
) -> (bool, String) {
    let mut transaction = database.db.pool().begin().await.expect("begin");
    for (sequence, aggregate) in (0..).zip(aggregates) {
        let connection = transaction.acquire().await.expect("connection");
        insert_event(connection, "t", aggregate, sequence).await;
    }
    transaction.commit().await.expect("commit");
    let written_up_to = database.current_wal_position().await as f64;

    let last_metrics = std::sync::Mutex::new(String::new());
    let caught_up = wait_until(WAIT, || async {
        let body = get(address, "/metrics").await.body;
        let caught_up = sample(&body, "outbox_relay_slot_confirmed_lsn")
            .is_some_and(|confirmed| confirmed >= written_up_to)
            && sample(&body, "outbox_relay_stream_unsettled_events") == Some(0.0);
        *last_metrics.lock().expect("metrics") = body;
        caught_up
    })
    .await;
    (caught_up, last_metrics.into_inner().expect("metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_status_report_the_slot() {
    let database = LogicalDatabase::new().await;
    let relay = database.spawn_relay("stdout");
    let address = endpoint_address(&relay).await;
    let (reported, last_metrics) =
        commit_and_wait_until_confirmed(&database, &address, &["a-1"; 3]).await;
    assert!(reported, "the slot's gauges follow it:\n{last_metrics}");
    for gauge in [
        "outbox_relay_slot_lag_bytes",
        "outbox_relay_slot_retained_wal_bytes",
    ] {
        assert!(
            sample(&last_metrics, gauge).is_some_and(|bytes| bytes >= 0.0),
            "{gauge} is reported"
        );
    }

    let status = database.status_json();
    let slots = status["slots"].as_array().expect("slots");
    assert_eq!(slots.len(), 1, "{status}");
    assert_eq!(slots[0]["slot"], database.slot.as_str());
    assert_eq!(slots[0]["active"], true, "the relay streams from it");
    assert!(slots[0]["confirmed_flush_lsn"].is_string());
    assert!(
        slots[0]["lag_bytes"]
            .as_i64()
            .is_some_and(|bytes| bytes >= 0)
    );
    assert!(slots[0]["retained_wal_bytes"].as_i64().is_some());
    assert_eq!(
        status["partitions"], 32,
        "the stream's lease row is not a partition"
    );
    drop(relay);
}

/// Streamed events published without a write stay `pending` rows: the
/// pending gauges and `status --source logical` do not count them (polling's
/// `status` still does), and an event the table path holds is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_gauges_leave_out_streamed_published_rows() {
    const EVENTS: u64 = 5;
    let database = LogicalDatabase::new().await;
    let relay = database.spawn_relay("stdout");
    let address = endpoint_address(&relay).await;
    let aggregates: Vec<String> = (0..EVENTS)
        .map(|sequence| format!("a-{sequence}"))
        .collect();
    let aggregates: Vec<&str> = aggregates.iter().map(String::as_str).collect();
    let (settled, _) = commit_and_wait_until_confirmed(&database, &address, &aggregates).await;
    assert!(settled, "the relay streams and confirms the events");
    let pending_rows = database
        .db
        .count("SELECT COUNT(*) FROM outbox_events WHERE state = 'pending'")
        .await;
    assert_eq!(pending_rows, EVENTS as i64, "streamed rows stay pending");
    let body = get(&address, "/metrics").await.body;
    assert_eq!(
        sample(&body, "outbox_relay_pending_events"),
        Some(0.0),
        "published streamed rows are not pending:\n{body}"
    );
    assert_eq!(
        sample(&body, "outbox_relay_oldest_pending_age_seconds"),
        Some(0.0),
        "{body}"
    );

    let logical = database.status_json_with(&["--source", "logical"]);
    assert_eq!(logical["source"], "logical", "{logical}");
    assert_eq!(logical["pending"], 0, "{logical}");
    assert_eq!(logical["oldest_pending_at"], serde_json::Value::Null);
    assert_eq!(logical["stream_owned"], EVENTS, "{logical}");
    assert_eq!(logical["topics"][0]["pending"], 0, "{logical}");
    assert_eq!(logical["topics"][0]["stream_owned"], EVENTS, "{logical}");
    let polling = database.status_json();
    assert_eq!(polling["source"], "poll", "{polling}");
    assert_eq!(
        polling["pending"], EVENTS,
        "polling counts every pending row"
    );
    assert_eq!(polling["stream_owned"], serde_json::Value::Null);

    // An event the table path holds (as a failure would leave it) is
    // pending on both.
    sqlx::query(
        "UPDATE outbox_events SET attempts = 1, last_error = 'refused', \
         next_attempt_at = now() + interval '1 hour' \
         WHERE id = (SELECT MIN(id) FROM outbox_events)",
    )
    .execute(database.db.pool())
    .await
    .expect("record a failure");
    let body = get(&address, "/metrics").await.body;
    assert_eq!(
        sample(&body, "outbox_relay_pending_events"),
        Some(1.0),
        "{body}"
    );
    assert!(
        sample(&body, "outbox_relay_oldest_pending_age_seconds").is_some_and(|age| age >= 0.0),
        "{body}"
    );
    let logical = database.status_json_with(&["--source", "logical"]);
    assert_eq!(logical["pending"], 1, "{logical}");
    assert_eq!(logical["retrying"], 1, "{logical}");
    assert_eq!(logical["stream_owned"], EVENTS - 1, "{logical}");
    assert!(logical["oldest_pending_at"].is_string(), "{logical}");
    drop(relay);
}
