//! Raw producer rates: the broker clients alone, with the relay's producer
//! settings and records as large as the relay's, on the same broker.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishAckFuture};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use outbox::wire;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use redis::Value;
use redis::aio::MultiplexedConnection;
use uuid::Uuid;

use super::cpu;
use super::events::{EVENT_TYPE, attributes};

/// One record of a raw run: its key (the aggregate id) and JSON payload.
#[derive(Debug, Clone)]
pub struct RawRecord {
    pub key: String,
    pub payload: String,
}

/// What a raw run measured.
pub struct RawRate {
    /// Acknowledged messages per second.
    pub rate: f64,
    /// Acknowledged messages.
    pub acknowledged: u64,
    /// CPU of this process (the client), PostgreSQL and the broker.
    pub cpu: cpu::CpuSpent,
}

/// A FutureProducer with the relay's producer settings:
/// `enable.idempotence=true`, `acks=all`, `linger.ms=1`,
/// `partitioner=murmur2_random`.
pub fn kafka_producer(brokers: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("client.id", "outbox-bench-raw")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "30000")
        .set("partitioner", "murmur2_random")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("kafka producer")
}

/// The relay's `ce_*` headers (Kafka) or fields (Redis Streams) and
/// content type, in the order it writes them.
pub fn ce_fields(event_id: &Uuid, key: &str) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = attributes(event_id, key)
        .into_iter()
        .map(|(name, value)| (format!("ce_{name}"), value))
        .collect();
    fields.push(("content-type".to_owned(), "application/json".to_owned()));
    fields
}

/// The relay's NATS headers of one event: `Nats-Msg-Id` (the event id),
/// every attribute as a percent-encoded `ce-` header, and `Content-Type`.
pub fn nats_headers(event_id: &Uuid, key: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(wire::NATS_MSG_ID_HEADER, event_id.to_string().as_str());
    for (name, value) in attributes(event_id, key) {
        headers.insert(
            wire::nats_header_name(name).as_str(),
            wire::percent_encode_header_value(&value).as_str(),
        );
    }
    headers.insert(wire::NATS_CONTENT_TYPE_HEADER, "application/json");
    headers
}

/// The relay's `ce_*` headers and content type, for a raw Kafka record.
pub fn kafka_headers(event_id: &Uuid, key: &str) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(10);
    for (name, value) in ce_fields(event_id, key) {
        headers = headers.insert(Header {
            key: name.as_str(),
            value: Some(value.as_str()),
        });
    }
    headers
}

/// Send one record and await its delivery: producer id, connection and
/// topic metadata are in place afterwards.
pub async fn warm_up_kafka(producer: &FutureProducer, topic: &str) -> Uuid {
    let warm_id = Uuid::now_v7();
    producer
        .send(
            FutureRecord::to(topic)
                .key("warm-up")
                .payload("{}")
                .headers(kafka_headers(&warm_id, "warm-up")),
            Duration::from_secs(30),
        )
        .await
        .expect("warm-up record");
    warm_id
}

/// Plain rdkafka: every record sent (pipelined), then every delivery report
/// awaited; when librdkafka's queue is full, the oldest report is awaited.
pub async fn raw_rdkafka(
    brokers: &str,
    topic: &str,
    records: &[RawRecord],
    broker_processes: &[&str],
) -> RawRate {
    let producer = kafka_producer(brokers);
    warm_up_kafka(&producer, topic).await;
    let ids: Vec<Uuid> = records.iter().map(|_| Uuid::now_v7()).collect();

    let cpu_before = cpu::sample(std::process::id(), broker_processes);
    let started = Instant::now();
    let mut in_flight: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut delivered = 0u64;
    let mut failed = 0u64;
    let mut settle = |outcome: Result<Result<_, _>, _>| match outcome {
        Ok(Ok(_)) => delivered += 1,
        _ => failed += 1,
    };
    for (record, event_id) in records.iter().zip(&ids) {
        let mut future_record = FutureRecord::to(topic)
            .key(record.key.as_str())
            .payload(record.payload.as_str())
            .headers(kafka_headers(event_id, &record.key));
        loop {
            match producer.send_result(future_record) {
                Ok(delivery) => {
                    in_flight.push_back(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    future_record = returned;
                    match in_flight.pop_front() {
                        Some(delivery) => settle(delivery.await),
                        None => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
                Err((error, _)) => panic!("send failed: {error}"),
            }
        }
    }
    while let Some(delivery) = in_flight.pop_front() {
        settle(delivery.await);
    }
    let elapsed = started.elapsed();
    let spent = cpu_before.until(&cpu::sample(std::process::id(), broker_processes));
    assert_eq!(failed, 0, "raw rdkafka: {failed} records failed");
    RawRate {
        rate: delivered as f64 / elapsed.as_secs_f64(),
        acknowledged: delivered,
        cpu: spent,
    }
}

/// The relay's AMQP publish options: `mandatory`.
pub const AMQP_PUBLISH: BasicPublishOptions = BasicPublishOptions {
    mandatory: true,
    immediate: false,
};

/// The relay's AMQP properties and `cloudEvents:*` headers, persistent.
pub fn amqp_properties(event_id: &Uuid, key: &str) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (name, value) in attributes(event_id, key) {
        headers.insert(
            ShortString::from(format!("cloudEvents:{name}")),
            AMQPValue::LongString(LongString::from(value)),
        );
    }
    headers.insert(
        ShortString::from("cloudEvents:datacontenttype"),
        AMQPValue::LongString(LongString::from("application/json")),
    );
    BasicProperties::default()
        .with_content_type(ShortString::from("application/json"))
        .with_delivery_mode(2)
        .with_message_id(ShortString::from(event_id.to_string()))
        .with_type(ShortString::from(EVENT_TYPE))
        .with_timestamp(chrono::Utc::now().timestamp() as u64)
        .with_headers(headers)
}

/// A connection and a channel in confirm mode, warmed up with one confirmed
/// message to `exchange`; returns the warm-up message's id too.
pub async fn amqp_confirm_channel(amqp_url: &str, exchange: &str) -> (Connection, Channel, Uuid) {
    let connection = Connection::connect(amqp_url, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    let warm_id = Uuid::now_v7();
    channel
        .basic_publish(
            exchange.into(),
            EVENT_TYPE.into(),
            AMQP_PUBLISH,
            b"{}",
            amqp_properties(&warm_id, "warm-up"),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    (connection, channel, warm_id)
}

/// What each AMQP message carries beside its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Properties {
    /// The relay's: persistent, its properties and `cloudEvents:*` headers.
    Relay,
    /// Persistent, with a `message_id` and nothing else, as mq-bridge sends.
    Bare,
}

impl Properties {
    fn of(self, event_id: &Uuid, key: &str) -> BasicProperties {
        match self {
            Properties::Relay => amqp_properties(event_id, key),
            Properties::Bare => BasicProperties::default()
                .with_delivery_mode(2)
                .with_message_id(ShortString::from(event_id.to_string())),
        }
    }
}

/// Plain lapin: publisher confirms, mandatory, persistent, the relay's
/// properties and headers; at most `window` confirms outstanding.
pub async fn raw_lapin(
    amqp_url: &str,
    exchange: &str,
    records: &[RawRecord],
    window: usize,
    broker_processes: &[&str],
) -> RawRate {
    let (connection, channel, _) = amqp_confirm_channel(amqp_url, exchange).await;
    let ids: Vec<Uuid> = records.iter().map(|_| Uuid::now_v7()).collect();

    let cpu_before = cpu::sample(std::process::id(), broker_processes);
    let started = Instant::now();
    let acknowledged =
        publish_confirmed(&channel, exchange, records, &ids, window, Properties::Relay).await;
    let elapsed = started.elapsed();
    let spent = cpu_before.until(&cpu::sample(std::process::id(), broker_processes));
    let _ = connection.close(200, "bye".into()).await;
    RawRate {
        rate: acknowledged as f64 / elapsed.as_secs_f64(),
        acknowledged,
        cpu: spent,
    }
}

/// Publish `records` (with `ids`, their event ids) on `channel`, in order,
/// with `properties`, at most `window` confirms outstanding; returns how
/// many were acknowledged. A nack or a returned message panics.
pub async fn publish_confirmed(
    channel: &Channel,
    exchange: &str,
    records: &[RawRecord],
    ids: &[Uuid],
    window: usize,
    properties: Properties,
) -> u64 {
    let mut confirms = VecDeque::new();
    let mut acknowledged = 0u64;
    let mut check = |confirmation: lapin::Confirmation| {
        assert!(
            !confirmation.is_nack() && confirmation.take_message().is_none(),
            "raw lapin: message nacked or returned"
        );
        acknowledged += 1;
    };
    for (record, event_id) in records.iter().zip(ids) {
        let confirm = channel
            .basic_publish(
                exchange.into(),
                EVENT_TYPE.into(),
                AMQP_PUBLISH,
                record.payload.as_bytes(),
                properties.of(event_id, &record.key),
            )
            .await
            .expect("publish");
        confirms.push_back(confirm);
        if confirms.len() > window
            && let Some(confirm) = confirms.pop_front()
        {
            check(confirm.await.expect("confirm"));
        }
    }
    while let Some(confirm) = confirms.pop_front() {
        check(confirm.await.expect("confirm"));
    }
    acknowledged
}

/// The `XADD` of one event to `stream` as the relay writes it: an entry
/// id chosen by Redis, the relay's `ce_*` fields, `content-type`, and
/// `data` holding the payload.
pub fn redis_xadd(stream: &str, event_id: &Uuid, key: &str, payload: &[u8]) -> redis::Cmd {
    let mut command = redis::cmd("XADD");
    command.arg(stream).arg("*");
    for (name, value) in ce_fields(event_id, key) {
        command.arg(name).arg(value);
    }
    command.arg("data").arg(payload);
    command
}

/// A multiplexed connection to the Redis server at `url`, warmed up with
/// one acknowledged `XADD` to `stream`; returns the warm-up entry's event
/// id too.
pub async fn redis_connection(url: &str, stream: &str) -> (MultiplexedConnection, Uuid) {
    let mut connection = outbox_testkit::redis::connect_to(url, "OUTBOX_TEST_REDIS_URL").await;
    let warm_id = Uuid::now_v7();
    let _: String = redis_xadd(stream, &warm_id, "warm-up", b"{}")
        .query_async(&mut connection)
        .await
        .expect("warm-up XADD");
    (connection, warm_id)
}

/// The reply to one pipeline, once handed to the connection.
type PipelineReply = Pin<Box<dyn Future<Output = redis::RedisResult<Vec<Value>>> + Send>>;

/// Hand `pipeline` to `connection`: the first poll writes it into the
/// connection's queue, so a pipeline handed over later is written, run
/// and answered after it; the reply is awaited later. Polled without the
/// task's cooperative budget, so that first poll always gets that far.
async fn hand_over(connection: &MultiplexedConnection, pipeline: redis::Pipeline) -> PipelineReply {
    let mut connection = connection.clone();
    let mut reply: PipelineReply = Box::pin(tokio::task::unconstrained(async move {
        pipeline.query_async::<Vec<Value>>(&mut connection).await
    }));
    if let Poll::Ready(answered) = futures::poll!(&mut reply) {
        reply = Box::pin(std::future::ready(answered));
    }
    reply
}

/// Payload bytes a pipeline of raw redis-rs holds at most: a quarter of
/// the relay's default `max_batch_bytes` (32 MiB), whose batches in flight
/// hold half of it.
const REDIS_PIPELINE_BYTES: usize = 8 << 20;

/// The records of each pipeline: `pipeline_size` at most, and no more
/// than [`REDIS_PIPELINE_BYTES`] of payload unless one record alone is.
fn pipeline_ranges(records: &[RawRecord], pipeline_size: usize) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, record) in records.iter().enumerate() {
        let full = index - start >= pipeline_size.max(1)
            || (index > start && bytes + record.payload.len() > REDIS_PIPELINE_BYTES);
        if full {
            ranges.push(start..index);
            (start, bytes) = (index, 0);
        }
        bytes += record.payload.len();
    }
    if start < records.len() {
        ranges.push(start..records.len());
    }
    ranges
}

/// Plain redis-rs on one multiplexed connection: the relay's `XADD`s, in
/// pipelines of `pipeline_size` (fewer for large payloads), each handed to the connection before the
/// reply to the one before is awaited, at most `window` handed over and
/// unanswered (the oldest is awaited before the pipeline built next is
/// handed over); every reply must be an entry id.
pub async fn raw_redis(
    url: &str,
    stream: &str,
    records: &[RawRecord],
    pipeline_size: usize,
    window: usize,
    broker_processes: &[&str],
) -> RawRate {
    let (connection, _) = redis_connection(url, stream).await;
    let ids: Vec<Uuid> = records.iter().map(|_| Uuid::now_v7()).collect();
    // The commands are built as the pipelines are sent, as the relay
    // builds them from each fetched batch.
    let cpu_before = cpu::sample(std::process::id(), broker_processes);
    let started = Instant::now();
    let mut in_flight: VecDeque<(usize, PipelineReply)> = VecDeque::new();
    let mut acknowledged = 0u64;
    let mut settle = |sent: usize, reply: redis::RedisResult<Vec<Value>>| {
        let replies = reply.unwrap_or_else(|error| panic!("raw redis: a pipeline failed: {error}"));
        assert_eq!(replies.len(), sent, "raw redis: replies to a pipeline");
        for reply in &replies {
            assert!(
                matches!(reply, Value::BulkString(_) | Value::SimpleString(_)),
                "raw redis: an XADD answered without an entry id: {reply:?}"
            );
        }
        acknowledged += sent as u64;
    };
    for range in pipeline_ranges(records, pipeline_size) {
        let (chunk, chunk_ids) = (&records[range.clone()], &ids[range]);
        let mut pipeline = redis::pipe();
        for (record, event_id) in chunk.iter().zip(chunk_ids) {
            pipeline.add_command(redis_xadd(
                stream,
                event_id,
                &record.key,
                record.payload.as_bytes(),
            ));
        }
        if in_flight.len() >= window.max(1)
            && let Some((sent, reply)) = in_flight.pop_front()
        {
            settle(sent, reply.await);
        }
        in_flight.push_back((chunk.len(), hand_over(&connection, pipeline).await));
    }
    while let Some((sent, reply)) = in_flight.pop_front() {
        settle(sent, reply.await);
    }
    let elapsed = started.elapsed();
    let spent = cpu_before.until(&cpu::sample(std::process::id(), broker_processes));
    RawRate {
        rate: acknowledged as f64 / elapsed.as_secs_f64(),
        acknowledged,
        cpu: spent,
    }
}

/// A JetStream context on the NATS server at `url`. Panics, naming the
/// server and how to start it, when it does not answer within 10 s.
pub async fn nats_jetstream(url: &str) -> jetstream::Context {
    let connecting = async_nats::ConnectOptions::new()
        .max_reconnects(Some(1))
        .connect(url);
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(Ok(client)) => jetstream::new(client),
        Ok(Err(error)) => panic!(
            "NATS is not reachable at {url} ({error}); start it with `bash scripts/test.sh \
             --services-only` or point OUTBOX_TEST_NATS_URL at one"
        ),
        Err(_) => panic!(
            "NATS did not answer at {url} within 10 s; start it with `bash scripts/test.sh \
             --services-only` or point OUTBOX_TEST_NATS_URL at one"
        ),
    }
}

/// A JetStream context on the server at `url`, warmed up with one
/// acknowledged publish to `subject` (which a stream must take); returns
/// the warm-up message's event id too.
pub async fn nats_context(url: &str, subject: &str) -> (jetstream::Context, Uuid) {
    let jetstream = nats_jetstream(url).await;
    let warm_id = Uuid::now_v7();
    jetstream
        .publish_with_headers(
            subject.to_owned(),
            nats_headers(&warm_id, "warm-up"),
            "{}".into(),
        )
        .await
        .expect("warm-up publish to NATS")
        .await
        .expect("warm-up publish acknowledged by JetStream");
    (jetstream, warm_id)
}

/// Plain async-nats on one connection: the relay's messages (subject,
/// headers, payload) published to `subject` in order, at most `window`
/// acknowledgements (`PublishAckFuture`s) outstanding: the oldest is
/// awaited before the next message is published, every acknowledgement
/// must come.
pub async fn raw_nats(
    url: &str,
    subject: &str,
    records: &[RawRecord],
    window: usize,
    broker_processes: &[&str],
) -> RawRate {
    let (jetstream, _) = nats_context(url, subject).await;
    let ids: Vec<Uuid> = records.iter().map(|_| Uuid::now_v7()).collect();
    // The messages are built as they are published, as the relay builds
    // them from each fetched batch.
    let cpu_before = cpu::sample(std::process::id(), broker_processes);
    let started = Instant::now();
    let mut in_flight: VecDeque<PublishAckFuture> = VecDeque::new();
    let mut acknowledged = 0u64;
    let settle = |acknowledgement: PublishAckFuture| async move {
        acknowledgement.await.unwrap_or_else(|error| {
            panic!("raw async-nats: a publish was not acknowledged: {error}")
        });
    };
    for (record, event_id) in records.iter().zip(&ids) {
        if in_flight.len() >= window.max(1)
            && let Some(oldest) = in_flight.pop_front()
        {
            settle(oldest).await;
            acknowledged += 1;
        }
        let acknowledgement = jetstream
            .publish_with_headers(
                subject.to_owned(),
                nats_headers(event_id, &record.key),
                record.payload.clone().into(),
            )
            .await
            .unwrap_or_else(|error| panic!("raw async-nats: publish: {error}"));
        in_flight.push_back(acknowledgement);
    }
    while let Some(oldest) = in_flight.pop_front() {
        settle(oldest).await;
        acknowledged += 1;
    }
    let elapsed = started.elapsed();
    let spent = cpu_before.until(&cpu::sample(std::process::id(), broker_processes));
    RawRate {
        rate: acknowledged as f64 / elapsed.as_secs_f64(),
        acknowledged,
        cpu: spent,
    }
}
