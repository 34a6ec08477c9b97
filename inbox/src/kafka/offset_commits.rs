//! [`OffsetCommitContext`]: the consumer's librdkafka context, which keeps
//! the [`Offsets`] bookkeeping and commits finished offsets: periodically,
//! before a rebalance revokes partitions, and when the consumer stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::logging::forward_log;
use super::offsets::{Offsets, TopicPartition};

/// The consumer's librdkafka context: the offsets bookkeeping, committed
/// before a rebalance takes partitions away, and the consumer's logs.
#[derive(Debug, Default)]
pub(crate) struct OffsetCommitContext {
    offsets: Mutex<Offsets>,
    /// Partitions revoked since the message loop last looked.
    pub(crate) revoked: Mutex<Vec<TopicPartition>>,
    /// Set when the consumer is dropped without a normal stop: nothing is
    /// committed any more.
    pub(crate) closing: AtomicBool,
}

impl OffsetCommitContext {
    pub(crate) fn offsets(&self) -> std::sync::MutexGuard<'_, Offsets> {
        self.offsets.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Sets [`OffsetCommitContext::closing`] when dropped.
pub(crate) struct ClosingGuard(pub(crate) Arc<OffsetCommitContext>);

impl Drop for ClosingGuard {
    fn drop(&mut self) {
        self.0.closing.store(true, Ordering::Relaxed);
    }
}

impl ClientContext for OffsetCommitContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        forward_log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka consumer client error");
    }
}

impl ConsumerContext for OffsetCommitContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                let partitions: Vec<TopicPartition> = list
                    .elements()
                    .iter()
                    .map(|element| (element.topic().to_owned(), element.partition()))
                    .collect();
                let positions = self.offsets().revoke(&partitions);
                if !self.closing.load(Ordering::Relaxed) {
                    // Commit what is finished before another member takes
                    // the partitions over; a commit here is synchronous, as
                    // the partitions are gone afterwards.
                    commit_positions(consumer, self, positions, CommitMode::Sync);
                }
                self.revoked
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(partitions);
            }
            Rebalance::Assign(list) => {
                tracing::info!(
                    partitions = ?list
                        .elements()
                        .iter()
                        .map(|element| format!("{}/{}", element.topic(), element.partition()))
                        .collect::<Vec<_>>(),
                    "partitions assigned"
                );
            }
            Rebalance::Error(error) => tracing::warn!(%error, "kafka rebalance failed"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => {}
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                tracing::warn!(
                    %error,
                    partitions = offsets.count(),
                    "offset commit failed; retried with the next one"
                );
                self.offsets().commit_failed(offsets);
            }
        }
    }
}

/// Store the committable offsets of the assigned partitions and commit them.
pub(crate) fn commit(consumer: &StreamConsumer<OffsetCommitContext>, mode: CommitMode) {
    let context: &OffsetCommitContext = consumer.context();
    let positions = context.offsets().committable(false);
    commit_positions(consumer, context, positions, mode);
}

/// As [`commit`], also for positions committed before (the final commit,
/// in case an asynchronous commit failed unnoticed).
pub(crate) fn commit_all(consumer: &StreamConsumer<OffsetCommitContext>, mode: CommitMode) {
    let context: &OffsetCommitContext = consumer.context();
    let positions = context.offsets().committable(true);
    commit_positions(consumer, context, positions, mode);
}

/// Store `positions` and commit the stored offsets.
fn commit_positions(
    consumer: &impl Consumer<OffsetCommitContext>,
    context: &OffsetCommitContext,
    positions: Vec<(TopicPartition, i64)>,
    mode: CommitMode,
) {
    if positions.is_empty() {
        return;
    }
    let mut list = TopicPartitionList::with_capacity(positions.len());
    for ((topic, partition), offset) in &positions {
        if let Err(error) = list.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
            tracing::warn!(topic = %topic, partition, %error, "cannot list an offset to commit");
        }
    }
    // An error here names partitions no longer assigned; the others are stored.
    if let Err(error) = consumer.store_offsets(&list) {
        tracing::debug!(%error, "some offsets were not stored");
    }
    match consumer.commit_consumer_state(mode) {
        Ok(()) => {
            context.offsets().mark_committed(&positions);
            for ((topic, partition), offset) in &positions {
                tracing::trace!(topic = %topic, partition, offset, "offset committed");
            }
        }
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(error) => tracing::warn!(%error, "offset commit failed; retried with the next one"),
    }
}
