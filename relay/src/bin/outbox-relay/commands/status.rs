//! `outbox-relay status`: the table's counts, per topic, and the live
//! leases, as text or JSON.

use outbox_relay::admin::{LiveLease, RelayStatus, SlotStatus};
use outbox_relay::error::Error;

/// Print `report`: the table's counts, the relay's replication slots
/// (PostgreSQL; none elsewhere), and the logical source's counts when
/// counted for it. JSON adds the fields `slots`, `source` (`poll` or
/// `logical`) and `stream_owned` (null when polling) to the status object,
/// and `stream_owned` to each topic under the logical source.
pub(super) fn print_status(report: &RelayStatus, json: bool) -> Result<(), Error> {
    let (status, slots, logical) = (&report.table, &report.slots, report.logical.as_ref());
    if json {
        let mut value = serde_json::to_value(status)?;
        if let serde_json::Value::Object(fields) = &mut value {
            fields.insert("slots".to_owned(), serde_json::to_value(slots)?);
            let source = if logical.is_some() { "logical" } else { "poll" };
            fields.insert("source".to_owned(), serde_json::Value::from(source));
            fields.insert(
                "stream_owned".to_owned(),
                serde_json::to_value(logical.map(|counts| counts.stream_owned))?,
            );
            fields.insert(
                "slot_backlogs".to_owned(),
                serde_json::to_value(logical.map(|counts| &counts.backlogs))?,
            );
            if let (Some(counts), Some(serde_json::Value::Array(topics))) =
                (logical, fields.get_mut("topics"))
            {
                for topic in topics.iter_mut() {
                    let name = topic["topic"].as_str().unwrap_or_default().to_owned();
                    let owned = counts
                        .topics
                        .iter()
                        .find(|(topic, _)| *topic == name)
                        .map_or(0, |(_, owned)| *owned);
                    if let serde_json::Value::Object(topic) = topic {
                        topic.insert("stream_owned".to_owned(), serde_json::Value::from(owned));
                    }
                }
            }
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let oldest = match (status.oldest_pending_at, status.oldest_pending_age_seconds) {
        (Some(time), Some(age)) => format!("{} ({age}s ago)", time.to_rfc3339()),
        (Some(time), None) => time.to_rfc3339(),
        _ => "-".to_owned(),
    };
    println!("pending:            {}", status.pending);
    println!("  waiting to retry: {}", status.retrying);
    println!(
        "  in flight:        {} (due now, in a partition with a live lease)",
        status.in_flight
    );
    println!("dead:               {}", status.dead);
    println!("published (kept):   {}", status.published);
    if let Some(counts) = logical {
        println!(
            "stream-owned:       {} (published by the stream or still ahead in the slot; kept \
             until retention)",
            counts.stream_owned
        );
        for backlog in &counts.backlogs {
            println!(
                "slot backlog:       {} of slot {} (committed before the slot existed; {} not \
                 handed to the table path yet), oldest {}",
                backlog.remaining,
                backlog.slot,
                backlog.not_handed_over,
                backlog
                    .oldest_at
                    .map_or_else(|| "-".to_owned(), |at| at.to_rfc3339())
            );
        }
    }
    println!("oldest pending:     {oldest}");
    println!(
        "leased partitions:  {}/{}",
        status.leased_partitions, status.partitions
    );
    println!("live relays:        {}", status.live_relays);
    if !status.topics.is_empty() {
        let width = status
            .topics
            .iter()
            .map(|topic| topic.topic.len())
            .max()
            .unwrap_or(0)
            .max("topic".len());
        println!();
        println!(
            "{:<width$}  {:>9}  {:>9}  {:>9}  {:>9}",
            "topic", "pending", "retrying", "dead", "published"
        );
        for topic in &status.topics {
            println!(
                "{:<width$}  {:>9}  {:>9}  {:>9}  {:>9}",
                topic.topic, topic.pending, topic.retrying, topic.dead, topic.published
            );
        }
    }
    print_slots(slots);
    println!();
    if status.leases.is_empty() {
        println!("live leases:        none");
    } else {
        println!("live leases:");
        for (owner, leases) in leases_by_owner(&status.leases) {
            let partitions: Vec<String> = leases
                .iter()
                .map(|lease| lease.partition_no.to_string())
                .collect();
            let first_expiry = leases
                .iter()
                .map(|lease| lease.expires_at)
                .min()
                .map(|time| time.to_rfc3339())
                .unwrap_or_default();
            println!(
                "  {owner}: {} partition(s) [{}], first expiry {first_expiry}",
                leases.len(),
                partitions.join(", ")
            );
        }
    }
    Ok(())
}

/// The logical source's slots: position, lag and retained WAL.
fn print_slots(slots: &[SlotStatus]) {
    for slot in slots {
        println!();
        println!(
            "replication slot {}: {}, confirmed {}, lag {} bytes, retained WAL {} bytes{}",
            slot.slot,
            if slot.active { "streaming" } else { "idle" },
            slot.confirmed_flush_lsn.as_deref().unwrap_or("-"),
            slot.lag_bytes,
            slot.retained_wal_bytes,
            if slot.wal_status.is_empty() {
                String::new()
            } else {
                format!(", wal_status {}", slot.wal_status)
            }
        );
    }
}

/// Leases grouped by owner, owners by name, each owner's by partition.
fn leases_by_owner(leases: &[LiveLease]) -> std::collections::BTreeMap<&str, Vec<&LiveLease>> {
    let mut grouped: std::collections::BTreeMap<&str, Vec<&LiveLease>> =
        std::collections::BTreeMap::new();
    for lease in leases {
        grouped.entry(lease.owner.as_str()).or_default().push(lease);
    }
    grouped
}
