//! The workload, loaded before any consumer starts: `events` unique
//! `order.created` events, each published twice, in a shuffled order (the
//! second copy of an event lands anywhere after or before the first), by
//! the relay's own publishers: CloudEvents in binary mode, persistent, as
//! `outbox-relay` sends them. A RabbitMQ run gets a durable exchange and a
//! durable queue of its own, a Kafka run a topic of its own; both are
//! deleted when the [`RabbitQueue`] / [`KafkaTopic`] is dropped, with the
//! dead-letter objects the inbox consumers declare. A Redis run's stream
//! and a NATS run's JetStream stream are loaded in the relay's wire format
//! by the bench itself (see [`RedisStream`] and [`NatsStream`]).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use outbox::wire;
use outbox_relay::OutboundEvent;
use outbox_relay::publish::{
    KafkaPublisher, KafkaPublisherConfig, Publisher, RabbitMqPublisher, RabbitMqPublisherConfig,
};
use outbox_testkit::nats::TestStream;
use outbox_testkit::{kafka, rabbitmq, shuffled, unique_name};
use uuid::Uuid;

/// The event type, and the queue's binding key.
pub(crate) const ORDER_CREATED: &str = "order.created";
/// Events per publish call.
const PUBLISH_CHUNK: usize = 1_000;
/// Partitions of a Kafka run's topic.
pub(crate) const KAFKA_PARTITIONS: i32 = 4;
/// librdkafka options of every Kafka consumer of the bench: groups on tansu
/// form slowly with the default session timeout (as in the adapter tests).
pub(crate) const KAFKA_GROUP_OPTIONS: [(&str, &str); 2] = [
    ("session.timeout.ms", "6000"),
    ("heartbeat.interval.ms", "500"),
];
/// Longest wait for a Kafka consumer's offsets to be committed.
const COMMIT_LIMIT: Duration = Duration::from_secs(30);
/// The shuffle's seed: every run delivers in the same order pattern.
const SEED: u64 = 28;

/// The deliveries of one run: `events` events, each twice, shuffled, to
/// `topic` (the exchange or the Kafka topic). The payload is the event's
/// JSON: `{"order_id": "<uuid>", "amount_cents": <n>}`.
pub(crate) fn deliveries(events: usize, topic: &str) -> Vec<OutboundEvent> {
    let once: Vec<OutboundEvent> = (0..events)
        .map(|number| {
            let order_id = Uuid::now_v7();
            let amount_cents = 1_000 + (number as i64 * 7_919) % 90_000;
            let payload = format!(r#"{{"order_id":"{order_id}","amount_cents":{amount_cents}}}"#);
            OutboundEvent {
                id: number as i64 + 1,
                event_id: Uuid::now_v7(),
                event_type: ORDER_CREATED.to_owned(),
                event_version: 1,
                source: "/orders".to_owned(),
                aggregate_type: "order".to_owned(),
                aggregate_id: order_id.to_string(),
                topic: topic.to_owned(),
                payload: Arc::from(payload),
                headers: BTreeMap::new(),
                created_at: chrono::Utc::now(),
                attempts: 0,
                replay: false,
            }
        })
        .collect();
    let twice: Vec<OutboundEvent> = once.iter().chain(once.iter()).cloned().collect();
    shuffled(twice, SEED)
}

/// Publish `events` with `publisher`, `PUBLISH_CHUNK` at a time; panics
/// naming the first failure.
async fn publish_all(publisher: &impl Publisher, events: &[OutboundEvent], broker: &str) {
    for chunk in events.chunks(PUBLISH_CHUNK) {
        let outcomes = publisher.publish(chunk).await;
        if let Some(failure) = outcomes.into_iter().find_map(Result::err) {
            panic!("loading {broker}: the relay's publisher failed: {failure}");
        }
    }
}

/// A durable topic exchange and a durable queue bound to it for
/// `order.created`, of one run.
pub(crate) struct RabbitQueue {
    pub(crate) exchange: String,
    pub(crate) queue: String,
    /// Keeps `channel`'s connection open for the run.
    _connection: Connection,
    channel: Channel,
}

impl RabbitQueue {
    /// Declare the run's exchange and queue and publish `events` deliveries
    /// (each event twice) through the relay's `RabbitMqPublisher`; returns
    /// once the queue holds every one. Panics naming RabbitMQ when it
    /// cannot be reached.
    pub(crate) async fn load(events: usize) -> RabbitQueue {
        let connection = rabbitmq::require_rabbitmq().await;
        let channel = connection
            .create_channel()
            .await
            .expect("open a channel to RabbitMQ");
        let exchange = unique_name("peers-orders");
        let queue = unique_name("peers-billing");
        rabbitmq::declare_topic_exchange(&channel, &exchange).await;
        rabbitmq::declare_queue_bound_with(&channel, &exchange, &queue, ORDER_CREATED).await;
        let loaded = RabbitQueue {
            exchange,
            queue,
            _connection: connection,
            channel,
        };
        let publisher = RabbitMqPublisher::new(RabbitMqPublisherConfig::new(rabbitmq::amqp_url()))
            .expect("the relay's RabbitMQ publisher");
        let deliveries = deliveries(events, &loaded.exchange);
        publish_all(&publisher, &deliveries, "RabbitMQ").await;
        let expected = deliveries.len() as u32;
        let ready = loaded.ready().await;
        assert_eq!(
            ready, expected,
            "RabbitMQ queue {} holds {ready} messages after publishing {expected}",
            loaded.queue
        );
        loaded
    }

    /// Messages ready in the queue (not delivered, or requeued), by a
    /// passive `queue.declare`: unacknowledged deliveries are not counted.
    pub(crate) async fn ready(&self) -> u32 {
        self.channel
            .queue_declare(
                self.queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|error| panic!("passive declare of {}: {error}", self.queue))
            .message_count()
    }

    /// Messages in the queue, ready or delivered and not acknowledged, as
    /// `rabbitmqctl list_queues` counts them (it takes most of a second).
    pub(crate) async fn depth(&self) -> u64 {
        let queue = self.queue.clone();
        tokio::task::spawn_blocking(move || rabbitmq::queue_depth(&queue))
            .await
            .expect("rabbitmqctl list_queues")
    }
}

impl Drop for RabbitQueue {
    fn drop(&mut self) {
        let queues = vec![self.queue.clone(), format!("{}.dlq", self.queue)];
        let exchanges = vec![self.exchange.clone(), format!("{}.dlx", self.queue)];
        rabbitmq::delete_topology_blocking(queues, exchanges);
    }
}

/// A topic of one run, with `KAFKA_PARTITIONS` partitions.
pub(crate) struct KafkaTopic {
    pub(crate) brokers: String,
    pub(crate) topic: String,
    /// Whether a consumer made `<topic>.dlq`, deleted with the topic.
    dead_letter_topic: Cell<bool>,
}

impl KafkaTopic {
    /// Create the run's topic and publish `events` deliveries (each event
    /// twice) through the relay's `KafkaPublisher`. Panics naming the Kafka
    /// broker when it cannot be reached.
    pub(crate) async fn load(events: usize) -> KafkaTopic {
        let brokers = kafka::require_kafka().await;
        let topic = unique_name("peers-orders");
        kafka::create_topic(&brokers, &topic, KAFKA_PARTITIONS).await;
        let loaded = KafkaTopic {
            brokers,
            topic,
            dead_letter_topic: Cell::new(false),
        };
        let publisher = KafkaPublisher::new(KafkaPublisherConfig::new(
            loaded.brokers.split(',').map(str::to_owned).collect(),
        ))
        .expect("the relay's Kafka publisher");
        publish_all(&publisher, &deliveries(events, &loaded.topic), "Kafka").await;
        loaded
    }

    /// Note that a consumer (the inbox's) creates `<topic>.dlq`, to be
    /// deleted with the topic.
    pub(crate) fn has_dead_letter_topic(&self) {
        self.dead_letter_topic.set(true);
    }

    /// Wait until consumer `group` committed every one of `deliveries`
    /// messages: the sum of its committed offsets (each partition starts
    /// at 0). The high watermarks tansu reports stop short of the last
    /// record batch of each partition, so they cannot be the measure.
    /// Panics when that does not happen within [`COMMIT_LIMIT`].
    pub(crate) async fn wait_until_committed(&self, group: &str, deliveries: u64) {
        let deadline = tokio::time::Instant::now() + COMMIT_LIMIT;
        loop {
            let committed =
                kafka::committed_messages(&self.brokers, group, &self.topic, KAFKA_PARTITIONS)
                    .await;
            if committed == deliveries {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "Kafka group {group} committed {committed} of {deliveries} messages of {} \
                 within {COMMIT_LIMIT:?}",
                self.topic
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for KafkaTopic {
    fn drop(&mut self) {
        let mut topics = vec![self.topic.clone()];
        if self.dead_letter_topic.get() {
            topics.push(format!("{}.dlq", self.topic));
        }
        kafka::delete_topics_blocking(self.brokers.clone(), topics);
    }
}

/// A stream of one run, loaded with `XADD`s of the relay's wire format
/// (`outbox_testkit::redis::RelayEntry`), not through the relay.
pub(crate) struct RedisStream {
    pub(crate) stream: String,
    connection: redis::aio::MultiplexedConnection,
}

impl RedisStream {
    /// Add `events` deliveries (each event twice) to a stream of the run's
    /// own, `PUBLISH_CHUNK` per pipeline. Panics naming Redis when it
    /// cannot be reached.
    pub(crate) async fn load(events: usize) -> RedisStream {
        let mut connection = outbox_testkit::redis::require_redis().await;
        let stream = unique_name("peers-orders");
        let entries: Vec<outbox_testkit::redis::RelayEntry> = deliveries(events, &stream)
            .iter()
            .map(|event| outbox_testkit::redis::RelayEntry {
                id: Some(event.event_id.to_string()),
                event_type: event.event_type.clone(),
                source: event.source.clone(),
                aggregate_type: event.aggregate_type.clone(),
                aggregate_id: event.aggregate_id.clone(),
                event_version: event.event_version.to_string(),
                headers: Vec::new(),
                traceparent: None,
                tracestate: None,
                data: event.payload.as_bytes().to_vec(),
            })
            .collect();
        for chunk in entries.chunks(PUBLISH_CHUNK) {
            outbox_testkit::redis::add_entries(&mut connection, &stream, chunk).await;
        }
        let length = outbox_testkit::redis::stream_length(&mut connection, &stream).await;
        assert_eq!(
            length,
            entries.len(),
            "Redis stream {stream} holds {length} entries after adding {}",
            entries.len()
        );
        RedisStream { stream, connection }
    }

    /// Entries of `group` still pending (read and not acknowledged).
    pub(crate) async fn pending(&self, group: &str) -> u64 {
        let summary: (u64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
            .arg(&self.stream)
            .arg(group)
            .query_async(&mut self.connection.clone())
            .await
            .unwrap_or_else(|error| panic!("XPENDING {} {group}: {error}", self.stream));
        summary.0
    }
}

impl Drop for RedisStream {
    fn drop(&mut self) {
        let keys = vec![self.stream.clone(), format!("{}.dlq", self.stream)];
        let deleting = std::thread::spawn(move || {
            let client = redis::Client::open(outbox_testkit::redis::redis_url())?;
            let mut connection = client.get_connection()?;
            redis::cmd("DEL").arg(&keys).query::<u64>(&mut connection)
        });
        if let Ok(Err(error)) = deleting.join() {
            eprintln!("cannot delete the run's stream: {error}");
        }
    }
}

/// A JetStream stream of one run (file storage) taking the run's subject,
/// and a dead-letter stream taking `<subject>.dlq`, loaded with messages in
/// the relay's wire format (`ce-` headers, `Content-Type`, the payload),
/// published by the bench, not through the relay, and without
/// `Nats-Msg-Id`: the stream's duplicate window would drop the second copy
/// of each event, which the inbox is there to skip.
pub(crate) struct NatsStream {
    pub(crate) jetstream: jetstream::Context,
    pub(crate) stream: String,
    pub(crate) subject: String,
    dead_letter_stream: String,
}

impl NatsStream {
    /// Make the run's streams and publish `events` deliveries (each event
    /// twice), `PUBLISH_CHUNK` acknowledgements outstanding at most.
    /// Panics naming NATS when it cannot be reached.
    pub(crate) async fn load(events: usize) -> NatsStream {
        let jetstream = outbox_testkit::nats::require_nats().await;
        let stream = unique_name("peers-orders");
        let subject = stream.clone();
        let dead_letter_stream = format!("{stream}-dlq");
        let storage = |name: &str, subject: String| stream::Config {
            name: name.to_owned(),
            subjects: vec![subject],
            storage: stream::StorageType::File,
            ..stream::Config::default()
        };
        TestStream::create_with(&jetstream, storage(&stream, subject.clone())).await;
        TestStream::create_with(
            &jetstream,
            storage(
                &dead_letter_stream,
                format!("{subject}{}", outbox_inbox::nats::DEAD_LETTER_SUFFIX),
            ),
        )
        .await;
        let loaded = NatsStream {
            jetstream,
            stream,
            subject,
            dead_letter_stream,
        };
        let deliveries = deliveries(events, &loaded.subject);
        for chunk in deliveries.chunks(PUBLISH_CHUNK) {
            let mut acknowledgements = Vec::with_capacity(chunk.len());
            for event in chunk {
                let acknowledgement = loaded
                    .jetstream
                    .publish_with_headers(
                        loaded.subject.clone(),
                        relay_headers(event),
                        event.payload.as_bytes().to_vec().into(),
                    )
                    .await
                    .unwrap_or_else(|error| panic!("loading NATS: publish: {error}"));
                acknowledgements.push(acknowledgement);
            }
            for acknowledgement in acknowledgements {
                acknowledgement.await.unwrap_or_else(|error| {
                    panic!("loading NATS: a publish was not acknowledged: {error}")
                });
            }
        }
        let held = TestStream::existing(&loaded.jetstream, &loaded.stream)
            .message_count()
            .await;
        assert_eq!(
            held,
            deliveries.len() as u64,
            "JetStream stream {} holds {held} messages after publishing {}",
            loaded.stream,
            deliveries.len()
        );
        loaded
    }

    /// Messages durable consumer `durable` has not settled: not yet
    /// delivered, or delivered and not acknowledged.
    pub(crate) async fn unsettled(&self, durable: &str) -> u64 {
        let mut consumer: jetstream::consumer::PullConsumer = self
            .jetstream
            .get_stream(&self.stream)
            .await
            .unwrap_or_else(|error| panic!("stream {}: {error}", self.stream))
            .get_consumer(durable)
            .await
            .unwrap_or_else(|error| panic!("consumer {durable} of {}: {error}", self.stream));
        let info = consumer
            .info()
            .await
            .unwrap_or_else(|error| panic!("consumer {durable} of {}: {error}", self.stream));
        info.num_pending + info.num_ack_pending as u64
    }
}

/// `event`'s headers as the relay writes them on NATS, but for
/// `Nats-Msg-Id`: every attribute as a percent-encoded `ce-` header and
/// `Content-Type`.
fn relay_headers(event: &OutboundEvent) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let time = event
        .created_at
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let version = event.event_version.to_string();
    let event_id = event.event_id.to_string();
    let attributes = [
        (wire::SPECVERSION_ATTRIBUTE, wire::SPEC_VERSION),
        (wire::ID_ATTRIBUTE, event_id.as_str()),
        (wire::SOURCE_ATTRIBUTE, event.source.as_str()),
        (wire::TYPE_ATTRIBUTE, event.event_type.as_str()),
        (wire::TIME_ATTRIBUTE, time.as_str()),
        (
            wire::AGGREGATE_TYPE_ATTRIBUTE,
            event.aggregate_type.as_str(),
        ),
        (wire::EVENT_VERSION_ATTRIBUTE, version.as_str()),
        (wire::PARTITION_KEY_ATTRIBUTE, event.aggregate_id.as_str()),
    ];
    for (name, value) in attributes {
        headers.insert(
            wire::nats_header_name(name).as_str(),
            wire::percent_encode_header_value(value).as_str(),
        );
    }
    headers.insert(wire::NATS_CONTENT_TYPE_HEADER, "application/json");
    headers
}

impl Drop for NatsStream {
    fn drop(&mut self) {
        let jetstream = self.jetstream.clone();
        let streams = [self.stream.clone(), self.dead_letter_stream.clone()];
        let deleting = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                for name in &streams {
                    TestStream::existing(&jetstream, name).delete().await;
                }
            });
            Ok::<(), std::io::Error>(())
        });
        if let Ok(Err(error)) = deleting.join() {
            eprintln!("cannot delete the run's streams: {error}");
        }
    }
}
