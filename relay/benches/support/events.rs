//! What the relay benchmarks' events look like: their names, JSON payloads
//! and CloudEvents attributes.

use uuid::Uuid;

/// The `event_type` of every bench event.
pub const EVENT_TYPE: &str = "shipment.moved";
/// The `source` of every bench event.
pub const SOURCE: &str = "/shipments";
/// The `aggregate_type` of every bench event.
pub const AGGREGATE_TYPE: &str = "shipment";

/// A database, topic or exchange name of the bench's own.
pub fn unique_name(prefix: &str) -> String {
    format!("outbox-bench-{prefix}-{}", Uuid::now_v7().simple())
}

/// The JSON payload of event `sequence` of aggregate `aggregate_id`, padded
/// to `bytes`.
pub fn payload(aggregate_id: &str, sequence: u64, bytes: usize) -> String {
    let bare = serde_json::json!({ "shipment": aggregate_id, "sequence": sequence, "note": "" });
    let pad = bytes.saturating_sub(bare.to_string().len());
    serde_json::json!({ "shipment": aggregate_id, "sequence": sequence, "note": "x".repeat(pad) })
        .to_string()
}

/// The CloudEvents attributes the relay sends (binary mode), for the raw
/// clients, so that their records are as large as the relay's.
pub fn attributes(event_id: &Uuid, aggregate_id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("specversion", "1.0".to_owned()),
        ("id", event_id.to_string()),
        ("source", SOURCE.to_owned()),
        ("type", EVENT_TYPE.to_owned()),
        (
            "time",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        ),
        ("aggregatetype", AGGREGATE_TYPE.to_owned()),
        ("eventversion", "1".to_owned()),
        ("partitionkey", aggregate_id.to_owned()),
    ]
}
