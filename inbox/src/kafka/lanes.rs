//! [`MessageLanes`]: the messages in flight, one lane per partition and
//! key. A lane runs its messages one after another, in offset order, each
//! through the delivery policy in a task of its own; different lanes run
//! concurrently.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError};

use futures::FutureExt;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::dead_letter::DeadLetterProducer;
use super::message::{KafkaDelivery, LaneKey, ReceivedMessage};
use super::offset_commits::OffsetCommitContext;
use crate::backend::InboxBackend;
use crate::handler::Handler;
use crate::policy::{DeliveryPolicy, Settlement, panic_message};

/// What a message task returns: the message and how the policy settled it.
type TaskResult = Result<(Arc<ReceivedMessage>, Settlement), JoinError>;

/// The message loop's bookkeeping of the messages in flight.
pub(crate) struct MessageLanes<DB: InboxBackend, H: Handler<DB>> {
    policy: Arc<DeliveryPolicy<DB, H>>,
    dead_letters: Arc<DeadLetterProducer>,
    /// Cancelled when the consumer stops: pauses end, messages are released.
    stopping: CancellationToken,
    tasks: JoinSet<(Arc<ReceivedMessage>, Settlement)>,
    /// Lanes with a running message, and the messages waiting behind it.
    lanes: HashMap<LaneKey, VecDeque<ReceivedMessage>>,
    /// Messages received and not finished: running or waiting in a lane.
    in_flight: usize,
}

impl<DB: InboxBackend, H: Handler<DB>> MessageLanes<DB, H> {
    pub(crate) fn new(
        policy: Arc<DeliveryPolicy<DB, H>>,
        dead_letters: Arc<DeadLetterProducer>,
        stopping: CancellationToken,
    ) -> Self {
        MessageLanes {
            policy,
            dead_letters,
            stopping,
            tasks: JoinSet::new(),
            lanes: HashMap::new(),
            in_flight: 0,
        }
    }

    /// Messages received and not finished.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether a message task runs.
    pub(crate) fn has_running(&self) -> bool {
        !self.tasks.is_empty()
    }

    /// Wait for the next message task to end; `None` when none runs.
    pub(crate) async fn next_finished(&mut self) -> Option<TaskResult> {
        self.tasks.join_next().await
    }

    /// Take a newly received message: start it, or queue it behind the
    /// running message of its lane.
    pub(crate) fn received(&mut self, mut message: ReceivedMessage, context: &OffsetCommitContext) {
        message.generation = context
            .offsets()
            .received(message.topic_partition(), message.offset);
        self.in_flight += 1;
        match self.lanes.entry(message.lane()) {
            Entry::Occupied(mut waiting) => {
                tracing::trace!(
                    topic = %message.topic,
                    partition = message.partition,
                    offset = message.offset,
                    "message waits for an earlier one of its key"
                );
                waiting.get_mut().push_back(message);
            }
            Entry::Vacant(lane) => {
                lane.insert(VecDeque::new());
                self.start(message);
            }
        }
    }

    /// Run `message` through the delivery policy in a task of its own.
    fn start(&mut self, message: ReceivedMessage) {
        let policy = Arc::clone(&self.policy);
        let dead_letters = Arc::clone(&self.dead_letters);
        let stopping = self.stopping.clone();
        let message = Arc::new(message);
        let span = tracing::info_span!(
            "inbox_message",
            topic = %message.topic,
            partition = message.partition,
            offset = message.offset,
            event_id = tracing::field::Empty,
        );
        self.tasks.spawn(
            async move {
                let delivery = KafkaDelivery {
                    message: &message,
                    dead_letters: &dead_letters,
                };
                let delivering = policy.deliver(&delivery, &stopping);
                // A panic here would otherwise leave the lane blocked.
                let settlement = match AssertUnwindSafe(delivering).catch_unwind().await {
                    Ok(settlement) => settlement,
                    Err(panic) => {
                        tracing::error!(
                            panic = %panic_message(panic.as_ref()),
                            "message handling panicked; the offset stays uncommitted"
                        );
                        Settlement::Released
                    }
                };
                (message, settlement)
            }
            .instrument(span),
        );
    }

    /// A message task ended: mark a finished message's offset committable
    /// and start the next message of its lane.
    pub(crate) fn finished(&mut self, joined: TaskResult, context: &OffsetCommitContext) {
        let (message, settlement) = match joined {
            Ok(done) => done,
            Err(error) => {
                // Tasks catch panics and are only aborted with the consumer.
                tracing::error!(%error, "message task ended abnormally");
                return;
            }
        };
        self.in_flight = self.in_flight.saturating_sub(1);
        if settlement.is_finished() {
            context.offsets().finished(
                message.topic_partition(),
                message.offset,
                message.generation,
            );
        }
        let lane = message.lane();
        let next = match self.lanes.get_mut(&lane) {
            Some(waiting) if !self.stopping.is_cancelled() => waiting.pop_front(),
            _ => None,
        };
        match next {
            Some(next) => self.start(next),
            None => {
                if let Some(waiting) = self.lanes.remove(&lane) {
                    self.in_flight = self.in_flight.saturating_sub(waiting.len());
                }
            }
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
        let mut dropped = 0;
        for (lane, waiting) in &mut self.lanes {
            if revoked.contains(&(lane.0.clone(), lane.1)) {
                dropped += waiting.len();
                waiting.clear();
            }
        }
        self.in_flight = self.in_flight.saturating_sub(dropped);
        tracing::info!(
            partitions = ?revoked,
            dropped_waiting = dropped,
            "partitions revoked"
        );
    }

    /// On stop: release every waiting message (left for redelivery) and
    /// tell the running ones to give up their pauses.
    pub(crate) fn stop(&mut self) {
        self.stopping.cancel();
        for waiting in self.lanes.values_mut() {
            self.in_flight = self.in_flight.saturating_sub(waiting.len());
            waiting.clear();
        }
    }
}
