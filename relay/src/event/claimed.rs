//! What a source hands the batch loop and what the loop hands back: an
//! event with its partition ([`ClaimedEvent`]), the lease that fences it
//! ([`Lease`]), what one fetch asks for ([`FetchRequest`], [`FetchLimit`]),
//! who writes under which leases ([`Fence`]), and a failed attempt to
//! record ([`FailedAttempt`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::OutboundEvent;

/// A partition lease held by this instance: the partition and the fencing
/// token it was acquired with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Lease {
    /// Partition number, `0..partition count`.
    pub partition_no: i32,
    /// Fencing token: bumped on every acquisition of the partition.
    pub lease_token: i64,
}

/// An event fetched for publishing, with the partition it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedEvent {
    /// `partition_key % partition count`.
    pub partition_no: i32,
    /// The event itself.
    pub event: OutboundEvent,
    /// When its transaction committed, where the source knows it: the
    /// logical source reads it from the WAL's commit record. The commit →
    /// acknowledgement histogram measures from it, else from `created_at`
    /// (the transaction's start).
    pub committed_at: Option<DateTime<Utc>>,
}

impl ClaimedEvent {
    /// The bytes of its payload: what `max_batch_bytes` counts.
    pub fn payload_bytes(&self) -> usize {
        self.event.payload.len()
    }
}

#[cfg(test)]
impl ClaimedEvent {
    /// Event `id` of aggregate `order/aggregate_id`, to `topic`, for tests.
    pub(crate) fn for_test(id: i64, aggregate_id: &str, topic: &str) -> ClaimedEvent {
        ClaimedEvent {
            partition_no: 0,
            event: OutboundEvent {
                id,
                event_id: uuid::Uuid::now_v7(),
                event_type: "t".to_owned(),
                event_version: 1,
                source: "/s".to_owned(),
                aggregate_type: "order".to_owned(),
                aggregate_id: aggregate_id.to_owned(),
                topic: topic.to_owned(),
                payload: "{}".into(),
                headers: Default::default(),
                created_at: chrono::Utc::now(),
                attempts: 0,
                replay: false,
            },
            committed_at: None,
        }
    }
}

/// How much one fetch may return: at most `events` events, whose payloads
/// add up to at most `bytes`, except that a fetch returns its first event
/// whatever the size of its payload (so an event larger than the cap goes
/// out alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchLimit {
    /// Most events.
    pub events: i64,
    /// Most payload bytes in all (the first event comes whatever its size).
    pub bytes: i64,
}

impl FetchLimit {
    /// At most `events` events, whatever their size.
    #[cfg(feature = "test-util")]
    pub fn events(events: i64) -> Self {
        FetchLimit {
            events,
            bytes: i64::MAX,
        }
    }

    /// At most `events` events and `bytes` payload bytes.
    pub fn new(events: i64, bytes: i64) -> Self {
        FetchLimit { events, bytes }
    }
}

/// A failed publish attempt to record.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedAttempt {
    /// `outbox_events.id`.
    pub id: i64,
    /// Partition of the event, to find the lease that fences the write.
    pub partition_no: i32,
    /// The broker's error, stored in `last_error`.
    pub error: String,
    /// When to try again; `None` moves the event to the dead state.
    pub retry_in: Option<Duration>,
}

/// What one fetch asks a source for: the due events of `partitions`, in id
/// order, within `limit`, leaving out `exclude` (published, not yet
/// marked), and holding back the later events of an aggregate whose
/// earlier event waits for a retry, or is dead when `hold_dead` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRequest<'a> {
    /// How many partitions the table has (`partition_key % partition_count`).
    pub partition_count: i32,
    /// The partitions whose events to fetch: those this relay leases.
    pub partitions: &'a [i32],
    /// Ids to leave out.
    pub exclude: &'a [i64],
    /// Whether a dead event holds back the later events of its aggregate.
    pub hold_dead: bool,
    /// How much the fetch may return.
    pub limit: FetchLimit,
}

/// Who writes, under which leases: a mark or a failure changes a row only
/// where the lease of its partition is one of `leases`, held by
/// `relay_id` and unexpired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence<'a> {
    /// The relay instance that holds the leases.
    pub relay_id: &'a str,
    /// How many partitions the table has.
    pub partition_count: i32,
    /// The leases the write is made under.
    pub leases: &'a [Lease],
}
