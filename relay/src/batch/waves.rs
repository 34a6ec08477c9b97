//! Split a batch into waves that keep each aggregate's order.
//!
//! The relay awaits every acknowledgement of a wave before it sends the
//! next one, so an event is never sent while an earlier event of its
//! aggregate that might still fail is unacknowledged, and when an event
//! fails, the later events of its aggregate are not sent at all.
//!
//! - For a publisher that does not keep order within one call, wave `k`
//!   holds the `k`-th event of every aggregate in the batch, in id order
//!   ([`split_into_waves`]). Batches over many aggregates are a single
//!   wave.
//! - For a publisher that does
//!   ([`Publisher::keeps_order`](crate::publish::Publisher::keeps_order)),
//!   an aggregate's consecutive events to one topic travel in one wave, and
//!   a new wave starts only where an aggregate switches topic
//!   ([`split_into_topic_runs`]). The broker refuses by destination (an
//!   unknown topic, an exchange without a queue): events of one aggregate
//!   to one destination succeed or fail together, and an event to another
//!   destination waits for the acknowledgement of the earlier ones.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use crate::event::{AggregateKey, ClaimedEvent, OutboundEvent, aggregate_key};

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

/// Split `batch` (in id order) into waves where only a change of topic
/// within an aggregate starts a new wave for it.
pub(crate) fn split_into_topic_runs(batch: Vec<ClaimedEvent>) -> Vec<Vec<ClaimedEvent>> {
    // Per aggregate: its current wave and the topic of its last event.
    let mut runs: HashMap<AggregateKey, (usize, String)> = HashMap::new();
    place_in_waves(batch, |claimed| match runs.entry(aggregate_key(claimed)) {
        Entry::Vacant(vacant) => {
            vacant.insert((0, claimed.event.topic.clone()));
            0
        }
        Entry::Occupied(mut occupied) => {
            let (wave, topic) = occupied.get_mut();
            if *topic != claimed.event.topic {
                *wave += 1;
                topic.clone_from(&claimed.event.topic);
            }
            *wave
        }
    })
}

fn split_by_aggregate<T>(batch: Vec<T>, key: impl Fn(&T) -> AggregateKey) -> Vec<Vec<T>> {
    let mut seen_per_aggregate: HashMap<AggregateKey, usize> = HashMap::new();
    place_in_waves(batch, |item| {
        let position = seen_per_aggregate.entry(key(item)).or_insert(0);
        *position += 1;
        *position - 1
    })
}

/// Put each item (in order) in the wave `wave_of` names for it.
fn place_in_waves<T>(batch: Vec<T>, mut wave_of: impl FnMut(&T) -> usize) -> Vec<Vec<T>> {
    let mut waves: Vec<Vec<T>> = Vec::new();
    for item in batch {
        let wave = wave_of(&item);
        if waves.len() <= wave {
            waves.resize_with(wave + 1, Vec::new);
        }
        waves[wave].push(item);
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(id: i64, aggregate_id: &str) -> ClaimedEvent {
        claimed_to(id, aggregate_id, "orders")
    }

    fn claimed_to(id: i64, aggregate_id: &str, topic: &str) -> ClaimedEvent {
        ClaimedEvent::for_test(id, aggregate_id, topic)
    }

    /// Events `(id, aggregate id)` to the same topic, in this order.
    fn batch(events: &[(i64, &str)]) -> Vec<ClaimedEvent> {
        events
            .iter()
            .map(|&(id, aggregate_id)| claimed(id, aggregate_id))
            .collect()
    }

    fn ids(wave: &[ClaimedEvent]) -> Vec<i64> {
        wave.iter().map(|claimed| claimed.event.id).collect()
    }

    #[test]
    fn each_wave_holds_one_event_per_aggregate_in_id_order() {
        let batch = batch(&[(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "a")]);
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

    #[test]
    fn an_aggregate_s_events_to_one_topic_travel_in_one_wave() {
        let batch = batch(&[(1, "a"), (2, "b"), (3, "a"), (4, "a"), (5, "b")]);
        let waves = split_into_topic_runs(batch);
        assert_eq!(
            waves.iter().map(|wave| ids(wave)).collect::<Vec<_>>(),
            vec![vec![1, 2, 3, 4, 5]]
        );
    }

    #[test]
    fn a_change_of_topic_within_an_aggregate_starts_a_new_wave() {
        let batch = vec![
            claimed_to(1, "a", "orders"),
            claimed_to(2, "b", "orders"),
            claimed_to(3, "a", "audit"),
            claimed_to(4, "a", "audit"),
            claimed_to(5, "b", "orders"),
            claimed_to(6, "a", "orders"),
        ];
        let waves = split_into_topic_runs(batch);
        assert_eq!(
            waves.iter().map(|wave| ids(wave)).collect::<Vec<_>>(),
            vec![vec![1, 2, 5], vec![3, 4], vec![6]]
        );
    }
}
