//! An event's aggregate: the unit whose events keep their order.

use super::ClaimedEvent;

/// Aggregate identity: (aggregate type, aggregate id).
pub type AggregateKey = (String, String);

/// The aggregate of an event.
pub fn aggregate_key(claimed: &ClaimedEvent) -> AggregateKey {
    (
        claimed.event.aggregate_type.clone(),
        claimed.event.aggregate_id.clone(),
    )
}
