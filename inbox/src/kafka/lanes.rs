//! [`MessageLanes`]: the shared lanes ([`crate::consumer::MessageLanes`])
//! with Kafka's bookkeeping around them: one lane per partition and key,
//! and each message's offset marked received when it arrives and finished
//! when the policy finished it, so that the offsets commit only up to the
//! lowest unfinished one.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::dead_letter::DeadLetterProducer;
use super::message::{KafkaDelivery, ReceivedMessage};
use super::offset_commits::OffsetCommitContext;
use crate::backend::InboxBackend;
use crate::consumer::{self, LaneBroker, LaneMessage, TaskResult};
use crate::handler::Handler;

impl LaneMessage for ReceivedMessage {
    type Lane = super::message::LaneKey;

    fn lane(&self) -> Self::Lane {
        ReceivedMessage::lane(self)
    }

    fn runs_alone(&self) -> bool {
        self.alone
    }

    fn run_alone(&mut self) {
        self.alone = true;
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "inbox_message",
            topic = %self.topic,
            partition = self.partition,
            offset = self.offset,
            event_id = tracing::field::Empty,
        )
    }
}

impl LaneBroker<ReceivedMessage> for DeadLetterProducer {
    type Delivery<'a> = KafkaDelivery<'a>;

    fn delivery<'a>(&'a self, message: &'a ReceivedMessage) -> KafkaDelivery<'a> {
        KafkaDelivery {
            message,
            dead_letters: self,
        }
    }
}

/// The message loop's bookkeeping of the messages in flight.
pub(crate) struct MessageLanes<DB: InboxBackend, H: Handler<DB>>(
    consumer::MessageLanes<DB, H, ReceivedMessage, DeadLetterProducer>,
);

impl<DB: InboxBackend, H: Handler<DB>> MessageLanes<DB, H> {
    pub(crate) fn new(
        policy: Arc<crate::policy::DeliveryPolicy<DB, H>>,
        dead_letters: Arc<DeadLetterProducer>,
        stopping: CancellationToken,
        batch_size: usize,
        batch_wait: Duration,
    ) -> Self {
        MessageLanes(consumer::MessageLanes::new(
            policy,
            dead_letters,
            stopping,
            batch_size,
            batch_wait,
        ))
    }

    /// When the gathered batch must start, if one is gathered.
    pub(crate) fn batch_due(&self) -> Option<Instant> {
        self.0.batch_due()
    }

    /// Start the gathered batch.
    pub(crate) fn start_gathered(&mut self) {
        self.0.start_gathered();
    }

    /// Messages received and not finished.
    pub(crate) fn in_flight(&self) -> usize {
        self.0.in_flight()
    }

    /// Whether a message task runs.
    pub(crate) fn has_running(&self) -> bool {
        self.0.has_running()
    }

    /// Wait for the next message task to end; `None` when none runs.
    pub(crate) async fn next_finished(&mut self) -> Option<TaskResult<ReceivedMessage>> {
        self.0.next_finished().await
    }

    /// Take a newly received message: note its offset, then start it or
    /// queue it behind the running message of its lane.
    pub(crate) fn received(&mut self, mut message: ReceivedMessage, context: &OffsetCommitContext) {
        message.generation = context
            .offsets()
            .received(message.topic_partition(), message.offset);
        self.0.received(message);
    }

    /// A message task ended: mark each finished message's offset
    /// committable and go on with the lanes it held.
    pub(crate) fn finished(
        &mut self,
        joined: TaskResult<ReceivedMessage>,
        context: &OffsetCommitContext,
    ) {
        for message in self.0.finished(joined) {
            context.offsets().finished(
                message.topic_partition(),
                message.offset,
                message.generation,
            );
        }
    }

    /// Forget the waiting messages of partitions revoked in a rebalance:
    /// their new owner reads them again from the committed offset.
    pub(crate) fn purge_revoked(&mut self, context: &OffsetCommitContext) {
        let revoked = std::mem::take(
            &mut *context
                .revoked
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if revoked.is_empty() {
            return;
        }
        let dropped = self
            .0
            .forget_waiting(|message| revoked.contains(&message.topic_partition()));
        tracing::info!(
            partitions = ?revoked,
            dropped_waiting = dropped,
            "partitions revoked"
        );
    }

    /// On stop: release every waiting message (left for redelivery) and
    /// tell the running ones to give up their pauses.
    pub(crate) fn stop(&mut self) {
        self.0.stop();
    }
}
