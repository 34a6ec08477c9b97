//! [`BrokerSide`]: what a scenario needs of a broker and its inbox adapter,
//! so that each scenario is written once for Kafka and RabbitMQ.

use std::future::Future;
use std::time::Duration;

use outbox::Event;
use outbox_inbox::{ConsumerStats, Handler, Inbox, InboxBackend};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::fixture::WAIT;

/// A message as the relay publishes it: the CloudEvents attributes, the
/// aggregate id as the key and the event's JSON payload as the body. A
/// scenario can spoil any part of it to make poison.
#[derive(Debug, Clone)]
pub struct Message {
    /// CloudEvents `id`; `None` leaves it out (the message id too).
    pub id: Option<String>,
    /// CloudEvents `type`.
    pub event_type: String,
    /// CloudEvents `source`.
    pub source: String,
    /// The aggregate id: Kafka's record key, RabbitMQ's
    /// `cloudEvents:partitionkey`.
    pub key: String,
    /// CloudEvents `aggregatetype`.
    pub aggregate_type: String,
    /// CloudEvents `eventversion`.
    pub event_version: String,
    /// The payload.
    pub body: Vec<u8>,
    /// The Kafka partition to write to; `None` leaves it to the key's
    /// hash. RabbitMQ has one queue and ignores it.
    pub partition: Option<i32>,
}

impl Message {
    /// `event` as the relay publishes it, with event id `id`.
    pub fn of<E: Event>(event: &E, id: &str) -> Message {
        Message {
            id: Some(id.to_owned()),
            event_type: E::EVENT_TYPE.to_owned(),
            source: E::SOURCE.to_owned(),
            key: event.aggregate_id(),
            aggregate_type: E::AGGREGATE_TYPE.to_owned(),
            event_version: E::EVENT_VERSION.to_string(),
            body: event.payload().expect("payload").get().as_bytes().to_vec(),
            partition: None,
        }
    }
}

/// A message read back from the dead-letter destination, in the terms both
/// adapters share.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// Why the consumer gave up on the message.
    pub reason: String,
    /// Where it came from: Kafka's `topic/partition/offset`, RabbitMQ's
    /// queue.
    pub origin: String,
    /// The attempts the consumer made, where the adapter records them.
    pub attempts: Option<u32>,
    /// The key (aggregate id) the original carried.
    pub key: Option<String>,
    /// The CloudEvents `source` the original carried.
    pub source: Option<String>,
    /// The original body.
    pub body: Vec<u8>,
}

/// Consumer settings a scenario chooses; each side maps them onto its
/// adapter's configuration and adds what its broker needs.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Messages in flight per consumer (Kafka's `max_in_flight`,
    /// RabbitMQ's `prefetch`).
    pub in_flight: u16,
    /// Handler attempts per message before it is dead-lettered.
    pub max_attempts: u32,
    /// First backoff after a failure.
    pub retry_base_delay: Duration,
    /// Longest backoff.
    pub retry_max_delay: Duration,
    /// Messages per inbox transaction (the adapters' `batch_size`); 1 runs
    /// each on its own.
    pub batch_size: usize,
}

/// How long a batch waits to fill in the scenarios that batch.
pub const BATCH_WAIT: Duration = Duration::from_millis(20);

impl Default for Settings {
    fn default() -> Self {
        Settings {
            in_flight: 8,
            max_attempts: 5,
            retry_base_delay: Duration::from_millis(50),
            retry_max_delay: Duration::from_millis(200),
            batch_size: 1,
        }
    }
}

/// A broker with a topic or queue of the test's own, and the inbox adapter
/// that consumes it. Names carry a random suffix; what a side creates on
/// the broker is deleted when it is dropped.
pub trait BrokerSide: Sized + Send + Sync + 'static {
    /// The adapter's name, for failure messages.
    const ADAPTER: &'static str;

    /// Whether the adapter applies the events of one key strictly in the
    /// order they were published (Kafka: per partition and key).
    const ORDERS_BY_KEY: bool;

    /// Whether a dead letter carries the attempts made
    /// ([`DeadLetter::attempts`]).
    const COUNTS_ATTEMPTS: bool;

    /// Whether the consumer handles messages in batches: a failing
    /// handler then runs once more, in its batch, before the batch's
    /// messages run again one at a time (and are decoded again).
    const BATCHES: bool = false;

    /// Whether the copies of one key go to one lane of a consumer whatever
    /// partition they were published to (NATS: one stream, lanes by
    /// aggregate): a consumer then handles them one after another.
    const KEY_IS_ONE_LANE: bool = false;

    /// A new topic (with `partitions` partitions; RabbitMQ: a queue bound
    /// to an exchange) named after `prefix`, and a consumer group for it.
    fn create(prefix: &str, partitions: i32) -> impl Future<Output = Self> + Send;

    /// Publish `messages` in order, each confirmed by the broker.
    fn publish(&self, messages: &[Message]) -> impl Future<Output = ()> + Send;

    /// Messages published so far.
    fn published(&self) -> u64;

    /// Start a consumer (of the side's one group or queue) with `settings`.
    fn start<DB: InboxBackend, H: Handler<DB>>(
        &self,
        inbox: Inbox<DB>,
        handler: H,
        settings: Settings,
    ) -> Running;

    /// Messages acknowledged (RabbitMQ) or committed (Kafka) so far.
    fn acknowledged(&self) -> impl Future<Output = u64> + Send;

    /// Messages in the dead-letter destination.
    fn dead_letter_count(&self) -> impl Future<Output = u64> + Send;

    /// Read the first `count` dead letters.
    fn dead_letters(&self, count: usize) -> impl Future<Output = Vec<DeadLetter>> + Send;

    /// The [`DeadLetter::origin`] of the `index`-th message published (from
    /// 0), when it went to partition 0 or to the side's queue.
    fn origin_of(&self, index: u64) -> String;
}

/// A running consumer.
pub struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<ConsumerStats, outbox_inbox::Error>>,
}

impl Running {
    /// Run the consumer `run` makes with a stop token of its own.
    pub fn spawn<F>(run: impl FnOnce(CancellationToken) -> F) -> Running
    where
        F: Future<Output = Result<ConsumerStats, outbox_inbox::Error>> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(stop.clone()));
        Running { stop, task }
    }

    /// Stop the consumer and return what it did.
    pub async fn stop(self) -> ConsumerStats {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the consumer stops")
            .expect("consumer task")
            .expect("consumer run")
    }

    /// End the consumer as a crash would: no stop, no last commit.
    pub async fn crash(self) {
        self.task.abort();
        let aborted = self.task.await;
        assert!(
            aborted.as_ref().is_err_and(|error| error.is_cancelled()),
            "{aborted:?}"
        );
    }
}

/// A side whose consumer batches: twice the scenario's messages in flight,
/// and as many as it asked for per inbox transaction, so every scenario
/// written for one message at a time runs on batches too. Everything else
/// is the wrapped side's.
pub struct Batched<S>(S);

impl<S: BrokerSide> BrokerSide for Batched<S> {
    const ADAPTER: &'static str = S::ADAPTER;
    const ORDERS_BY_KEY: bool = S::ORDERS_BY_KEY;
    const COUNTS_ATTEMPTS: bool = S::COUNTS_ATTEMPTS;
    const BATCHES: bool = true;
    const KEY_IS_ONE_LANE: bool = S::KEY_IS_ONE_LANE;

    async fn create(prefix: &str, partitions: i32) -> Self {
        Batched(S::create(prefix, partitions).await)
    }

    async fn publish(&self, messages: &[Message]) {
        self.0.publish(messages).await;
    }

    fn published(&self) -> u64 {
        self.0.published()
    }

    fn start<DB: InboxBackend, H: Handler<DB>>(
        &self,
        inbox: Inbox<DB>,
        handler: H,
        settings: Settings,
    ) -> Running {
        let batched = Settings {
            in_flight: settings.in_flight.saturating_mul(2),
            batch_size: usize::from(settings.in_flight),
            ..settings
        };
        self.0.start(inbox, handler, batched)
    }

    async fn acknowledged(&self) -> u64 {
        self.0.acknowledged().await
    }

    async fn dead_letter_count(&self) -> u64 {
        self.0.dead_letter_count().await
    }

    async fn dead_letters(&self, count: usize) -> Vec<DeadLetter> {
        self.0.dead_letters(count).await
    }

    fn origin_of(&self, index: u64) -> String {
        self.0.origin_of(index)
    }
}
