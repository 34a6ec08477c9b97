//! [`MessageLanes`]: the messages in flight, one lane per partition and
//! key. A lane runs its messages one after another, in offset order, each
//! through the delivery policy in a task of its own; different lanes run
//! concurrently.
//!
//! With a `batch_size` above 1, messages whose lane is idle are gathered
//! into a batch (several of one lane in offset order), started when it is
//! full or `batch_wait` after its first message, and run in one inbox
//! transaction. A lane is busy while a batch holding its messages runs;
//! its later messages wait, and join the next batch once it ends.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::dead_letter::DeadLetterProducer;
use super::message::{KafkaDelivery, LaneKey, ReceivedMessage};
use super::offset_commits::OffsetCommitContext;
use crate::backend::InboxBackend;
use crate::handler::Handler;
use crate::policy::{DeliveryPolicy, Settlement, panic_message};

/// What a message task returns: each message it ran and how the policy
/// settled it.
type TaskResult = Result<Vec<(Arc<ReceivedMessage>, Settlement)>, JoinError>;

/// The message loop's bookkeeping of the messages in flight.
pub(crate) struct MessageLanes<DB: InboxBackend, H: Handler<DB>> {
    policy: Arc<DeliveryPolicy<DB, H>>,
    dead_letters: Arc<DeadLetterProducer>,
    /// Cancelled when the consumer stops: pauses end, messages are released.
    stopping: CancellationToken,
    tasks: JoinSet<Vec<(Arc<ReceivedMessage>, Settlement)>>,
    /// Lanes with a running message, and the messages waiting behind it.
    lanes: HashMap<LaneKey, VecDeque<ReceivedMessage>>,
    /// Messages received and not finished: running, gathered or waiting
    /// in a lane.
    in_flight: usize,
    /// Messages per inbox transaction; 1 runs each on its own.
    batch_size: usize,
    /// Longest a gathered batch waits to fill.
    batch_wait: Duration,
    /// The batch being gathered: messages of idle lanes, in arrival order.
    gathered: Vec<ReceivedMessage>,
    /// When the gathered batch starts at the latest.
    due: Instant,
}

impl<DB: InboxBackend, H: Handler<DB>> MessageLanes<DB, H> {
    pub(crate) fn new(
        policy: Arc<DeliveryPolicy<DB, H>>,
        dead_letters: Arc<DeadLetterProducer>,
        stopping: CancellationToken,
        batch_size: usize,
        batch_wait: Duration,
    ) -> Self {
        MessageLanes {
            policy,
            dead_letters,
            stopping,
            tasks: JoinSet::new(),
            lanes: HashMap::new(),
            in_flight: 0,
            batch_size: batch_size.max(1),
            batch_wait,
            gathered: Vec::new(),
            due: Instant::now(),
        }
    }

    /// When the gathered batch must start, if one is gathered.
    pub(crate) fn batch_due(&self) -> Option<Instant> {
        (!self.gathered.is_empty()).then_some(self.due)
    }

    /// Start the gathered batch, up to `batch_size` of it; a message left
    /// behind whose lane the batch now holds waits in its lane.
    pub(crate) fn start_gathered(&mut self) {
        if self.gathered.is_empty() {
            return;
        }
        let rest = self
            .gathered
            .split_off(self.batch_size.min(self.gathered.len()));
        let batch = std::mem::take(&mut self.gathered);
        for message in &batch {
            self.lanes.entry(message.lane()).or_default();
        }
        for message in rest {
            match self.lanes.get_mut(&message.lane()) {
                Some(waiting) => waiting.push_back(message),
                None => self.gathered.push(message),
            }
        }
        if !self.gathered.is_empty() {
            self.due = Instant::now() + self.batch_wait;
        }
        self.start_batch(batch);
    }

    /// Gather `message` and start the batch once full; a message whose lane
    /// a running batch holds waits in its lane instead.
    fn gather(&mut self, message: ReceivedMessage) {
        if let Some(waiting) = self.lanes.get_mut(&message.lane()) {
            waiting.push_back(message);
            return;
        }
        if self.gathered.is_empty() {
            self.due = Instant::now() + self.batch_wait;
        }
        self.gathered.push(message);
        if self.gathered.len() >= self.batch_size {
            self.start_gathered();
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
            Entry::Vacant(lane) if self.batch_size == 1 => {
                lane.insert(VecDeque::new());
                self.start(message);
            }
            Entry::Vacant(_) => self.gather(message),
        }
    }

    /// Run `message` through the delivery policy in a task of its own.
    fn start(&mut self, message: ReceivedMessage) {
        self.start_shared(Arc::new(message));
    }

    /// [`MessageLanes::start`] of a message already shared.
    fn start_shared(&mut self, message: Arc<ReceivedMessage>) {
        let policy = Arc::clone(&self.policy);
        let dead_letters = Arc::clone(&self.dead_letters);
        let stopping = self.stopping.clone();
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
                vec![(message, settlement)]
            }
            .instrument(span),
        );
    }

    /// Run `batch` through the delivery policy, in one inbox transaction,
    /// in a task of its own.
    fn start_batch(&mut self, batch: Vec<ReceivedMessage>) {
        let policy = Arc::clone(&self.policy);
        let dead_letters = Arc::clone(&self.dead_letters);
        let stopping = self.stopping.clone();
        let batch: Vec<Arc<ReceivedMessage>> = batch.into_iter().map(Arc::new).collect();
        let span = tracing::info_span!("inbox_batch", messages = batch.len());
        self.tasks.spawn(
            async move {
                let deliveries: Vec<KafkaDelivery<'_>> = batch
                    .iter()
                    .map(|message| KafkaDelivery {
                        message,
                        dead_letters: &dead_letters,
                    })
                    .collect();
                let delivering = policy.deliver_batch(&deliveries, &stopping);
                let settlements = match AssertUnwindSafe(delivering).catch_unwind().await {
                    Ok(settlements) => settlements,
                    Err(panic) => {
                        tracing::error!(
                            panic = %panic_message(panic.as_ref()),
                            "batch handling panicked; its offsets stay uncommitted"
                        );
                        vec![Settlement::Released; deliveries.len()]
                    }
                };
                drop(deliveries);
                batch.into_iter().zip(settlements).collect()
            }
            .instrument(span),
        );
    }

    /// A message task ended: mark each finished message's offset
    /// committable and go on with the lanes it held: the next message of
    /// each, or, when batching, all of a lane's waiting messages gathered
    /// for the next batch.
    pub(crate) fn finished(&mut self, joined: TaskResult, context: &OffsetCommitContext) {
        let ran = match joined {
            Ok(done) => done,
            Err(error) => {
                // Tasks catch panics and are only aborted with the consumer.
                tracing::error!(%error, "message task ended abnormally");
                return;
            }
        };
        let mut held = Vec::new();
        let mut run_alone: Vec<Arc<ReceivedMessage>> = Vec::new();
        for (message, settlement) in ran {
            if settlement == Settlement::RunAlone {
                run_alone.push(message);
                continue;
            }
            self.in_flight = self.in_flight.saturating_sub(1);
            if settlement.is_finished() {
                context.offsets().finished(
                    message.topic_partition(),
                    message.offset,
                    message.generation,
                );
            }
            let lane = message.lane();
            if !held.contains(&lane) {
                held.push(lane);
            }
        }
        let alone = self.run_alone(run_alone);
        for lane in held {
            if alone.contains(&lane) {
                // A message of the lane runs alone: the lane stays held.
                continue;
            }
            let Some(mut waiting) = self.lanes.remove(&lane) else {
                continue;
            };
            if self.stopping.is_cancelled() {
                self.in_flight = self.in_flight.saturating_sub(waiting.len());
            } else if self.batch_size == 1 || waiting.front().is_some_and(|next| next.alone) {
                // One at a time, and a failed batch's messages of the lane
                // alone, in order, before the lane batches again.
                if let Some(next) = waiting.pop_front() {
                    self.lanes.insert(lane, waiting);
                    self.start(next);
                }
            } else {
                for next in waiting {
                    self.gather(next);
                }
            }
        }
    }

    /// Run the messages a failed batch left to run alone: per lane, the
    /// first starts on its own and the rest wait in front of the lane's
    /// queue, in offset order; the lanes they hold.
    fn run_alone(&mut self, messages: Vec<Arc<ReceivedMessage>>) -> Vec<LaneKey> {
        let mut by_lane: Vec<(LaneKey, Vec<Arc<ReceivedMessage>>)> = Vec::new();
        for message in messages {
            let lane = message.lane();
            match by_lane.iter_mut().find(|(key, _)| *key == lane) {
                Some((_, group)) => group.push(message),
                None => by_lane.push((lane, vec![message])),
            }
        }
        let mut lanes = Vec::with_capacity(by_lane.len());
        for (lane, group) in by_lane {
            if self.stopping.is_cancelled() {
                // Left for redelivery, as waiting messages are on stop.
                self.in_flight = self.in_flight.saturating_sub(group.len());
                continue;
            }
            let mut group = group.into_iter();
            let Some(first) = group.next() else {
                continue;
            };
            let waiting = self.lanes.entry(lane.clone()).or_default();
            for (position, message) in group.enumerate() {
                let mut message =
                    Arc::try_unwrap(message).unwrap_or_else(|shared| (*shared).clone());
                message.alone = true;
                waiting.insert(position, message);
            }
            self.start_shared(first);
            lanes.push(lane);
        }
        lanes
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
        let gathered = self.gathered.len();
        self.gathered
            .retain(|message| !revoked.contains(&message.topic_partition()));
        dropped += gathered - self.gathered.len();
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
        self.in_flight = self.in_flight.saturating_sub(self.gathered.len());
        self.gathered.clear();
        for waiting in self.lanes.values_mut() {
            self.in_flight = self.in_flight.saturating_sub(waiting.len());
            waiting.clear();
        }
    }
}
