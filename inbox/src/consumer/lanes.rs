//! [`MessageLanes`]: the messages in flight of a consumer that keeps the
//! order of a key (Kafka, Redis Streams), one lane per key. A lane runs
//! its messages one after another, in the order they were received, each
//! through the delivery policy in a task of its own; different lanes run
//! concurrently.
//!
//! With a `batch_size` above 1, messages whose lane is idle are gathered
//! into a batch (several of one lane in order), started when it is full or
//! `batch_wait` after its first message, and run in one inbox transaction.
//! A lane is busy while a batch holding its messages runs; its later
//! messages wait, and join the next batch once it ends.
//!
//! What a broker adds: its message ([`LaneMessage`]: its lane, its span)
//! and its side of a delivery ([`LaneBroker`]: the message as the policy
//! sees it, and what happens in the task once the policy settled it, such
//! as an acknowledgement).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::InboxBackend;
use crate::handler::Handler;
use crate::policy::{BrokerMessage, DeliveryPolicy, Settlement, panic_message};

/// A received message as the lanes keep it.
pub(crate) trait LaneMessage: Clone + Send + Sync + 'static {
    /// What the messages handled one after another share: the partition
    /// and key, the stream and aggregate.
    type Lane: Clone + Eq + Hash + Debug + Send + Sync + 'static;

    /// The lane of this message.
    fn lane(&self) -> Self::Lane;

    /// Whether it was in a batch whose handler failed: it then runs on its
    /// own, never in a batch again.
    fn runs_alone(&self) -> bool;

    /// Mark it as one that runs on its own.
    fn run_alone(&mut self);

    /// The `inbox_message` span its delivery runs in, with an empty
    /// `event_id` field for the policy to fill.
    fn span(&self) -> tracing::Span;
}

/// The broker's side of a delivery through the lanes.
pub(crate) trait LaneBroker<M: LaneMessage>: Send + Sync + 'static {
    /// The message as the delivery policy sees it.
    type Delivery<'a>: BrokerMessage
    where
        Self: 'a;

    /// `message` as the delivery policy sees it.
    fn delivery<'a>(&'a self, message: &'a M) -> Self::Delivery<'a>;

    /// Called in the task, once the policy settled its messages (not
    /// those left to run alone): acknowledge the finished ones where the
    /// broker acknowledges per message. Nothing by default.
    fn settled(&self, settled: &[(Arc<M>, Settlement)]) -> impl Future<Output = ()> + Send {
        let _ = settled;
        async {}
    }
}

/// What a message task returns: each message it ran and how the policy
/// settled it.
pub(crate) type TaskResult<M> = Result<Vec<(Arc<M>, Settlement)>, JoinError>;

/// The message loop's bookkeeping of the messages in flight.
pub(crate) struct MessageLanes<DB: InboxBackend, H: Handler<DB>, M: LaneMessage, B: LaneBroker<M>> {
    policy: Arc<DeliveryPolicy<DB, H>>,
    broker: Arc<B>,
    /// Cancelled when the consumer stops: pauses end, messages are released.
    stopping: CancellationToken,
    tasks: JoinSet<Vec<(Arc<M>, Settlement)>>,
    /// Lanes with a running message, and the messages waiting behind it.
    lanes: HashMap<M::Lane, VecDeque<M>>,
    /// Messages received and not finished: running, gathered or waiting
    /// in a lane.
    in_flight: usize,
    /// Messages per inbox transaction; 1 runs each on its own.
    batch_size: usize,
    /// Longest a gathered batch waits to fill.
    batch_wait: Duration,
    /// The batch being gathered: messages of idle lanes, in arrival order.
    gathered: Vec<M>,
    /// When the gathered batch starts at the latest.
    due: Instant,
}

impl<DB: InboxBackend, H: Handler<DB>, M: LaneMessage, B: LaneBroker<M>> MessageLanes<DB, H, M, B> {
    pub(crate) fn new(
        policy: Arc<DeliveryPolicy<DB, H>>,
        broker: Arc<B>,
        stopping: CancellationToken,
        batch_size: usize,
        batch_wait: Duration,
    ) -> Self {
        MessageLanes {
            policy,
            broker,
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
    fn gather(&mut self, message: M) {
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
    pub(crate) async fn next_finished(&mut self) -> Option<TaskResult<M>> {
        self.tasks.join_next().await
    }

    /// Take a newly received message: start it, or queue it behind the
    /// running message of its lane.
    pub(crate) fn received(&mut self, message: M) {
        self.in_flight += 1;
        match self.lanes.entry(message.lane()) {
            Entry::Occupied(mut waiting) => {
                tracing::trace!(
                    lane = ?waiting.key(),
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
    fn start(&mut self, message: M) {
        self.start_shared(Arc::new(message));
    }

    /// [`MessageLanes::start`] of a message already shared.
    fn start_shared(&mut self, message: Arc<M>) {
        let policy = Arc::clone(&self.policy);
        let broker = Arc::clone(&self.broker);
        let stopping = self.stopping.clone();
        let span = message.span();
        self.tasks.spawn(
            async move {
                let delivery = broker.delivery(&message);
                let delivering = policy.deliver(&delivery, &stopping);
                // A panic here would otherwise leave the lane blocked.
                let settlement = match AssertUnwindSafe(delivering).catch_unwind().await {
                    Ok(settlement) => settlement,
                    Err(panic) => {
                        tracing::error!(
                            panic = %panic_message(panic.as_ref()),
                            "message handling panicked; the message stays unacknowledged"
                        );
                        Settlement::Released
                    }
                };
                drop(delivery);
                let settled = vec![(message, settlement)];
                broker.settled(&settled).await;
                settled
            }
            .instrument(span),
        );
    }

    /// Run `batch` through the delivery policy, in one inbox transaction,
    /// in a task of its own.
    fn start_batch(&mut self, batch: Vec<M>) {
        let policy = Arc::clone(&self.policy);
        let broker = Arc::clone(&self.broker);
        let stopping = self.stopping.clone();
        let batch: Vec<Arc<M>> = batch.into_iter().map(Arc::new).collect();
        let span = tracing::info_span!("inbox_batch", messages = batch.len());
        self.tasks.spawn(
            async move {
                let deliveries: Vec<B::Delivery<'_>> = batch
                    .iter()
                    .map(|message| broker.delivery(message))
                    .collect();
                let delivering = policy.deliver_batch(&deliveries, &stopping);
                let settlements = match AssertUnwindSafe(delivering).catch_unwind().await {
                    Ok(settlements) => settlements,
                    Err(panic) => {
                        tracing::error!(
                            panic = %panic_message(panic.as_ref()),
                            "batch handling panicked; its messages stay unacknowledged"
                        );
                        vec![Settlement::Released; deliveries.len()]
                    }
                };
                drop(deliveries);
                let ran: Vec<(Arc<M>, Settlement)> = batch.into_iter().zip(settlements).collect();
                let settled: Vec<(Arc<M>, Settlement)> = ran
                    .iter()
                    .filter(|(_, settlement)| *settlement != Settlement::RunAlone)
                    .cloned()
                    .collect();
                if !settled.is_empty() {
                    broker.settled(&settled).await;
                }
                ran
            }
            .instrument(span),
        );
    }

    /// A message task ended: go on with the lanes it held (the next
    /// message of each, or, when batching, all of a lane's waiting messages
    /// gathered for the next batch); the messages it finished, for the
    /// caller's bookkeeping.
    pub(crate) fn finished(&mut self, joined: TaskResult<M>) -> Vec<Arc<M>> {
        let ran = match joined {
            Ok(done) => done,
            Err(error) => {
                // Tasks catch panics and are only aborted with the consumer.
                tracing::error!(%error, "message task ended abnormally");
                return Vec::new();
            }
        };
        let mut held = Vec::new();
        let mut run_alone: Vec<Arc<M>> = Vec::new();
        let mut finished = Vec::new();
        for (message, settlement) in ran {
            if settlement == Settlement::RunAlone {
                run_alone.push(message);
                continue;
            }
            self.in_flight = self.in_flight.saturating_sub(1);
            let lane = message.lane();
            if !held.contains(&lane) {
                held.push(lane);
            }
            if settlement.is_finished() {
                finished.push(message);
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
            } else if self.batch_size == 1 || waiting.front().is_some_and(M::runs_alone) {
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
        finished
    }

    /// Run the messages a failed batch left to run alone: per lane, the
    /// first starts on its own and the rest wait in front of the lane's
    /// queue, in order; the lanes they hold.
    fn run_alone(&mut self, messages: Vec<Arc<M>>) -> Vec<M::Lane> {
        let mut by_lane: Vec<(M::Lane, Vec<Arc<M>>)> = Vec::new();
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
                message.run_alone();
                waiting.insert(position, message);
            }
            self.start_shared(first);
            lanes.push(lane);
        }
        lanes
    }

    /// Forget the waiting and gathered messages for which `forget` holds
    /// (e.g. of partitions revoked in a rebalance: their new owner reads
    /// them again); how many were forgotten.
    #[cfg(feature = "kafka")]
    pub(crate) fn forget_waiting(&mut self, forget: impl Fn(&M) -> bool) -> usize {
        let mut dropped = 0;
        for waiting in self.lanes.values_mut() {
            let before = waiting.len();
            waiting.retain(|message| !forget(message));
            dropped += before - waiting.len();
        }
        let gathered = self.gathered.len();
        self.gathered.retain(|message| !forget(message));
        dropped += gathered - self.gathered.len();
        self.in_flight = self.in_flight.saturating_sub(dropped);
        dropped
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

/// Sleep until `due`, a gathered batch's deadline; forever when there is
/// none (the message loop's branch is off then).
pub(crate) async fn sleep_until_due(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}
