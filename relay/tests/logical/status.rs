//! Watching the logical source: the slot's gauges on `/metrics` and the
//! slot in `outbox-relay status`.

use sqlx::Acquire;

use crate::harness::{LogicalDatabase, WAIT, insert_event};
use crate::support::http::{endpoint_address, get, sample};
use crate::support::process::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_status_report_the_slot() {
    let database = LogicalDatabase::new().await;
    let relay = database.spawn_relay("stdout");
    let address = endpoint_address(&relay).await;
    let mut transaction = database.db.pool().begin().await.expect("begin");
    for sequence in 0..3 {
        let connection = transaction.acquire().await.expect("connection");
        insert_event(connection, "t", "a-1", sequence).await;
    }
    transaction.commit().await.expect("commit");
    let written_up_to = database.current_wal_position().await as f64;

    let last_metrics = std::sync::Mutex::new(String::new());
    let reported = wait_until(WAIT, || async {
        let body = get(&address, "/metrics").await.body;
        let caught_up = sample(&body, "outbox_relay_slot_confirmed_lsn")
            .is_some_and(|confirmed| confirmed >= written_up_to)
            && sample(&body, "outbox_relay_stream_unsettled_events") == Some(0.0);
        *last_metrics.lock().expect("metrics") = body;
        caught_up
    })
    .await;
    let last_metrics = last_metrics.into_inner().expect("metrics");
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
