//! [`Offsets`]: which offsets of each partition are finished, and so how
//! far the consumer group may commit.
//!
//! A message's offset becomes committable only once the delivery policy
//! finished the message (processed, duplicate or dead-lettered). The
//! position committed for a partition is its lowest unfinished offset: a
//! finished message after an unfinished one is never committed past it.

use std::collections::{BTreeMap, HashMap};

use rdkafka::topic_partition_list::TopicPartitionList;

/// `(topic, partition)`.
pub(crate) type TopicPartition = (String, i32);

/// Finished and unfinished offsets of the partitions this consumer reads.
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    partitions: HashMap<TopicPartition, PartitionOffsets>,
    next_generation: u64,
}

#[derive(Debug)]
struct PartitionOffsets {
    /// Changes when the partition is revoked and assigned again, so that
    /// messages of an earlier assignment do not move the new one's offsets.
    generation: u64,
    /// Received and not finished, with multiplicity.
    unfinished: BTreeMap<i64, u32>,
    /// The offset after the highest received.
    next: i64,
    /// The last committed position, if any.
    committed: Option<i64>,
}

impl PartitionOffsets {
    /// The offset to commit: the lowest unfinished one, else the next.
    fn position(&self) -> i64 {
        self.unfinished.keys().next().copied().unwrap_or(self.next)
    }
}

impl Offsets {
    pub(crate) fn received(&mut self, partition: TopicPartition, offset: i64) -> u64 {
        let next_generation = &mut self.next_generation;
        let entry = self.partitions.entry(partition).or_insert_with(|| {
            *next_generation += 1;
            PartitionOffsets {
                generation: *next_generation,
                unfinished: BTreeMap::new(),
                next: offset,
                committed: None,
            }
        });
        *entry.unfinished.entry(offset).or_insert(0) += 1;
        entry.next = entry.next.max(offset + 1);
        entry.generation
    }

    pub(crate) fn finished(&mut self, partition: TopicPartition, offset: i64, generation: u64) {
        let Some(entry) = self.partitions.get_mut(&partition) else {
            return;
        };
        if entry.generation != generation {
            return;
        }
        if let Some(count) = entry.unfinished.get_mut(&offset) {
            *count -= 1;
            if *count == 0 {
                entry.unfinished.remove(&offset);
            }
        }
    }

    /// Positions that moved since the last commit (`all`: every known one).
    pub(crate) fn committable(&self, all: bool) -> Vec<(TopicPartition, i64)> {
        self.partitions
            .iter()
            .filter_map(|(partition, entry)| {
                let position = entry.position();
                (all || entry.committed < Some(position)).then(|| (partition.clone(), position))
            })
            .collect()
    }

    /// An asynchronous commit failed: commit these partitions again.
    pub(crate) fn commit_failed(&mut self, list: &TopicPartitionList) {
        for element in list.elements() {
            if let Some(entry) = self
                .partitions
                .get_mut(&(element.topic().to_owned(), element.partition()))
            {
                entry.committed = None;
            }
        }
    }

    pub(crate) fn mark_committed(&mut self, positions: &[(TopicPartition, i64)]) {
        for (partition, position) in positions {
            if let Some(entry) = self.partitions.get_mut(partition) {
                entry.committed = Some(entry.committed.map_or(*position, |c| c.max(*position)));
            }
        }
    }

    /// Forget `partitions`; returns their positions to commit.
    pub(crate) fn revoke(&mut self, partitions: &[TopicPartition]) -> Vec<(TopicPartition, i64)> {
        partitions
            .iter()
            .filter_map(|partition| {
                let entry = self.partitions.remove(partition)?;
                let position = entry.position();
                (entry.committed < Some(position)).then(|| (partition.clone(), position))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(number: i32) -> TopicPartition {
        ("orders".to_owned(), number)
    }

    /// A fresh [`Offsets`] that received `offsets` of `partition`, and the
    /// generation they were received in.
    fn receive(partition: TopicPartition, offsets: &[i64]) -> (Offsets, u64) {
        let mut received = Offsets::default();
        let generations: Vec<u64> = offsets
            .iter()
            .map(|offset| received.received(partition.clone(), *offset))
            .collect();
        (received, generations[0])
    }

    /// Finish each `(offset, generation, position)` step's offset of
    /// `partition` in turn; after each, `position` is what is committable.
    fn assert_positions(
        offsets: &mut Offsets,
        partition: TopicPartition,
        steps: &[(i64, u64, i64)],
    ) {
        for &(offset, generation, position) in steps {
            offsets.finished(partition.clone(), offset, generation);
            assert_eq!(
                offsets.committable(false),
                vec![(partition.clone(), position)],
                "after finishing offset {offset} of generation {generation}"
            );
        }
    }

    #[test]
    fn commits_up_to_the_lowest_unfinished_offset() {
        let (mut offsets, generation) = receive(partition(0), &[10, 11, 12]);
        assert_positions(
            &mut offsets,
            partition(0),
            &[
                (11, generation, 10),
                (12, generation, 10),
                (10, generation, 13),
            ],
        );
    }

    #[test]
    fn commits_only_what_moved_unless_asked_for_all() {
        let (mut offsets, generation) = receive(partition(0), &[0]);
        offsets.finished(partition(0), 0, generation);
        let positions = offsets.committable(false);
        offsets.mark_committed(&positions);
        assert!(offsets.committable(false).is_empty());
        assert_eq!(offsets.committable(true), vec![(partition(0), 1)]);
    }

    #[test]
    fn a_revoked_partition_ignores_messages_of_its_old_assignment() {
        let (mut offsets, old) = receive(partition(1), &[5]);
        assert_eq!(offsets.revoke(&[partition(1)]), vec![(partition(1), 5)]);
        let new = offsets.received(partition(1), 5);
        assert_ne!(old, new);
        assert_positions(&mut offsets, partition(1), &[(5, old, 5), (5, new, 6)]);
    }

    #[test]
    fn a_redelivered_offset_is_finished_once_per_delivery() {
        let (mut offsets, generation) = receive(partition(0), &[3, 3]);
        assert_positions(
            &mut offsets,
            partition(0),
            &[(3, generation, 3), (3, generation, 4)],
        );
    }
}
