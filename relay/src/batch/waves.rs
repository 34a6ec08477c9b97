//! Split a batch into waves that keep each aggregate's order.
//!
//! Wave `k` holds the `k`-th event of every aggregate in the batch, in id
//! order. The relay awaits every acknowledgement of a wave before it sends
//! the next one, so an event is never sent while an earlier event of its
//! aggregate is unacknowledged; and when an event fails, the later events
//! of its aggregate are not sent at all. Batches over many aggregates are a
//! single wave.

use std::collections::HashMap;

use crate::OutboundEvent;
use crate::store::ClaimedEvent;

/// Aggregate identity: (aggregate type, aggregate id).
pub(crate) type AggregateKey = (String, String);

/// The aggregate of an event.
pub(crate) fn aggregate_key(claimed: &ClaimedEvent) -> AggregateKey {
    (
        claimed.event.aggregate_type.clone(),
        claimed.event.aggregate_id.clone(),
    )
}

/// Split `batch` (in id order) into waves.
pub(crate) fn split_into_waves(batch: Vec<ClaimedEvent>) -> Vec<Vec<ClaimedEvent>> {
    split_by_aggregate(batch, aggregate_key)
}

/// Split `events` (in id order) into waves, as [`split_into_waves`] does.
pub(crate) fn split_events_into_waves(events: Vec<OutboundEvent>) -> Vec<Vec<OutboundEvent>> {
    split_by_aggregate(events, |event| {
        (event.aggregate_type.clone(), event.aggregate_id.clone())
    })
}

fn split_by_aggregate<T>(batch: Vec<T>, key: impl Fn(&T) -> AggregateKey) -> Vec<Vec<T>> {
    let mut seen_per_aggregate: HashMap<AggregateKey, usize> = HashMap::new();
    let mut waves: Vec<Vec<T>> = Vec::new();
    for item in batch {
        let position = seen_per_aggregate.entry(key(&item)).or_insert(0);
        if waves.len() <= *position {
            waves.push(Vec::new());
        }
        waves[*position].push(item);
        *position += 1;
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(id: i64, aggregate_id: &str) -> ClaimedEvent {
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
                topic: "orders".to_owned(),
                payload: "{}".to_owned(),
                headers: Default::default(),
                created_at: chrono::Utc::now(),
                attempts: 0,
                replay: false,
            },
        }
    }

    fn ids(wave: &[ClaimedEvent]) -> Vec<i64> {
        wave.iter().map(|claimed| claimed.event.id).collect()
    }

    #[test]
    fn each_wave_holds_one_event_per_aggregate_in_id_order() {
        let batch = vec![
            claimed(1, "a"),
            claimed(2, "b"),
            claimed(3, "a"),
            claimed(4, "c"),
            claimed(5, "a"),
        ];
        let waves = split_into_waves(batch);
        assert_eq!(
            waves.iter().map(|wave| ids(wave)).collect::<Vec<_>>(),
            vec![vec![1, 2, 4], vec![3], vec![5]]
        );
    }

    #[test]
    fn distinct_aggregates_are_one_wave() {
        let waves = split_into_waves((0..100).map(|id| claimed(id, &id.to_string())).collect());
        assert_eq!(waves.len(), 1);
        assert_eq!(waves[0].len(), 100);
    }
}
