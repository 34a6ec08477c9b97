//! [`KafkaPublisher`]: publishes outbox events to Kafka as CloudEvents in
//! binary content mode (`docs/wire-format.md`).
//!
//! One record per event: topic = `topic`, key = `aggregate_id`, value = the
//! payload's JSON bytes, headers `ce_specversion`, `ce_id`, `ce_source`,
//! `ce_type`, `ce_time`, `content-type: application/json` and `ce_<name>`
//! for every extension attribute (see [`crate::publish::cloudevent`]). When
//! the `headers` column carries W3C trace context (`traceparent`,
//! `tracestate`), it is also sent as plain `traceparent` / `tracestate`
//! headers, where Kafka tracing instrumentations look for it.
//!
//! The producer is idempotent with `acks=all`, so librdkafka's own retries
//! neither duplicate nor reorder the records of one partition, and records
//! with one key (one aggregate) land on one partition in send order.
//!
//! A producer whose state is broken is replaced by a fresh one: after a
//! librdkafka fatal error, and after the broker answers that the producer's
//! id, epoch or sequence is no longer valid (fenced, out of sequence,
//! unknown producer id). librdkafka never leaves those states by itself;
//! the events of the failed records are reported unavailable and go out
//! again through the new producer, under their own ids.
//!
//! A topic is checked for existence (one metadata request, cached) before
//! the first record is sent to it. librdkafka would otherwise hold records
//! for a missing topic until `message.timeout.ms` runs out and report a
//! timeout, which says nothing about the cause; instead such events fail at
//! once with [`PublishFailure::Rejected`] naming the topic, or the topic is
//! created first when [`KafkaPublisherConfig::create_missing_topics`] is on.
//!
//! The guarantee is kept by the publisher itself: [`KafkaPublisher::new`]
//! refuses client options that would turn idempotence off, weaken `acks`
//! or spread one key over partitions, whoever calls it.
//!
//! The parts: `config` (settings and the librdkafka client configurations),
//! `guarantee` (the client options refused), `client` (the producer and
//! admin client, rebuilt when broken), `topics`
//! (lookup and creation), `send` (the batch's send-and-await), `classify`
//! (what a Kafka error means) and `headers` (the CloudEvents headers).

mod classify;
mod client;
mod config;
mod guarantee;
mod headers;
mod send;
mod topics;

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

pub use config::KafkaPublisherConfig;
pub(crate) use guarantee::check_client_option;

use crate::event::OutboundEvent;
use crate::publish::send_order::SendOrder;
use crate::publish::{Broker, PublishFailure};
use crate::tasks::Tasks;
use client::{CurrentProducer, create_producer};
use send::{Batch, DELIVERY_GRACE};

/// Publishes outbox events to Kafka (see the module documentation).
pub struct KafkaPublisher {
    config: KafkaPublisherConfig,
    producer_config: ClientConfig,
    /// Replaced when librdkafka reports a fatal error: an idempotent
    /// producer cannot be used after one.
    producer: RwLock<CurrentProducer>,
    admin: Mutex<Option<Arc<AdminClient<DefaultClientContext>>>>,
    /// Topics found to exist. A missing topic is not remembered: the next
    /// publish that names it looks it up again, so an event retried after
    /// the topic was created is not rejected from memory.
    topics: Mutex<HashSet<String>>,
    connected: Arc<AtomicBool>,
    /// How long a batch waits for its delivery reports: librdkafka's
    /// effective `message.timeout.ms` plus a grace period.
    delivery_wait: Duration,
    /// Set when the broker said the producer's state is broken; the
    /// producer is replaced once the batch in hand is done.
    broken: AtomicBool,
    /// Producers replaced because their state was broken.
    rebuilds: AtomicU64,
    /// Sends whose delivery reports are still to come, per producer: a send
    /// on a new producer waits until those of the replaced one are settled.
    send_order: Arc<SendOrder>,
    /// Where a replaced producer is dropped.
    tasks: Tasks,
}

impl std::fmt::Debug for KafkaPublisher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("KafkaPublisher")
            .field("brokers", &self.config.brokers)
            .field("connected", &self.connected.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl KafkaPublisher {
    /// Create the producer. Does not contact the brokers (see
    /// [`KafkaPublisher::check_connection`]), but fails at once on a setting
    /// librdkafka does not accept, such as an unknown client option.
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidBrokerUrl`] without brokers,
    /// [`crate::error::Error::Config`] for a setting out of range or a client
    /// option that would weaken the guarantee (`acks` other than `all`,
    /// `enable.idempotence` other than `true`, `partitioner = "random"`),
    /// and [`crate::error::Error::Kafka`] for a client option librdkafka refuses,
    /// such as `max.in.flight` above 5 under idempotence.
    pub fn new(config: KafkaPublisherConfig) -> Result<Self, crate::error::Error> {
        config.validate()?;
        let producer_config = config.producer_config();
        let connected = Arc::new(AtomicBool::new(false));
        let producer = create_producer(&producer_config, &connected)?;
        let delivery_wait = config.effective_message_timeout() + DELIVERY_GRACE;
        Ok(Self {
            config,
            producer_config,
            producer: RwLock::new(CurrentProducer {
                producer,
                generation: 1,
            }),
            admin: Mutex::new(None),
            topics: Mutex::new(HashSet::new()),
            connected,
            delivery_wait,
            broken: AtomicBool::new(false),
            rebuilds: AtomicU64::new(0),
            send_order: SendOrder::new(),
            tasks: Tasks::new(),
        })
    }

    /// Run this publisher's background work (dropping a replaced producer)
    /// on `tasks`, the relay's, rather than on a tracker of its own.
    pub fn with_tasks(mut self, tasks: Tasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// The settings this publisher was created with.
    pub fn config(&self) -> &KafkaPublisherConfig {
        &self.config
    }
}

impl Broker for KafkaPublisher {
    type HandedOver = Batch;

    fn hand_over(&self, events: &[OutboundEvent]) -> impl Future<Output = Batch> + Send {
        self.hand_over_records(events)
    }

    fn acknowledgements(
        &self,
        batch: Batch,
        events: &[OutboundEvent],
    ) -> impl Future<Output = Vec<Result<(), PublishFailure>>> + Send {
        self.await_reports(batch, events)
    }

    /// Never: a record that times out in flight (`message.timeout.ms`, a
    /// broker that stalls) fails while the records behind it may still
    /// land, since librdkafka bumps the producer's epoch and carries on;
    /// librdkafka documents the gap ("Message timeout considerations"). A
    /// later send holding the next event of an aggregate would then reach
    /// the broker first, so the relay lands each wave before it sends the
    /// next.
    fn in_order_in_flight(&self, _batch: &Batch) -> bool {
        false
    }

    fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// The records of one aggregate share a key, hence a partition, and the
    /// idempotent producer keeps their order within it, retries included.
    fn keeps_order(&self) -> bool {
        true
    }

    fn recover(&self) -> BoxFuture<'_, Result<(), PublishFailure>> {
        Box::pin(async move {
            self.recreate_producer("every publish failed for a long while")
                .map_err(|error| {
                    PublishFailure::Unavailable(format!("cannot create a kafka producer: {error}"))
                })?;
            self.check_connection().await.map_err(|error| {
                PublishFailure::Unavailable(format!("kafka brokers do not answer: {error}"))
            })
        })
    }

    fn client_rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event of aggregate `order` 42 for topic `orders`, for the tests
    /// of the publisher's parts.
    pub(super) fn order_event() -> OutboundEvent {
        OutboundEvent {
            id: 1,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".to_owned(),
            event_version: 1,
            source: "/orders".to_owned(),
            aggregate_type: "order".to_owned(),
            aggregate_id: "42".to_owned(),
            topic: "orders".to_owned(),
            payload: "{}".into(),
            headers: Default::default(),
            created_at: chrono::Utc::now(),
            attempts: 0,
            replay: false,
        }
    }

    #[test]
    fn unknown_client_option_fails_creation() {
        let mut config = KafkaPublisherConfig::new(vec!["127.0.0.1:9092".to_owned()]);
        config
            .client_options
            .insert("no.such.option".to_owned(), "1".to_owned());
        let error = KafkaPublisher::new(config).expect_err("unknown option must fail");
        assert!(error.to_string().contains("no.such.option"), "{error}");
    }

    #[test]
    fn empty_broker_list_fails_creation() {
        let error = KafkaPublisher::new(KafkaPublisherConfig::new(Vec::new()))
            .expect_err("no brokers must fail");
        assert!(error.to_string().contains("no Kafka broker"), "{error}");
    }
}
