//! W3C trace context from the producer's span to the consumer's, end to end
//! on real PostgreSQL and RabbitMQ: an event enqueued inside a producer span
//! carries its `traceparent`; the relay publishes it in the AMQP headers
//! table (`cloudEvents:traceparent` and plain `traceparent`); the RabbitMQ
//! inbox adapter handles it in an `inbox.handle` span that the OpenTelemetry
//! SDK exports with the producer's trace id and the producer span as parent.
//!
//! RabbitMQ is found through `OUTBOX_TEST_AMQP_URL` (default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`); a broker that cannot be reached
//! fails the test with a message naming it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox::{Event, OutboxMessage, OutboxWriter};
use outbox_inbox::rabbitmq::{RabbitMqConsumerConfig, RabbitMqInboxConsumer};
use outbox_inbox::{BoxError, Inbox};
use outbox_relay::publish::rabbitmq::{RabbitMqPublisher, RabbitMqPublisherConfig};
use outbox_relay::store::PostgresStore;
use outbox_relay::{Relay, RelayConfig};
use serde::{Deserialize, Serialize};
use sqlx::Transaction;
use tokio_util::sync::CancellationToken;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// How long any one wait may last before the test fails; no test asserts a
/// duration.
const WAIT: Duration = Duration::from_secs(30);
const CONSUMER: &str = "dispatch";

#[derive(Debug, Serialize, Deserialize, Event)]
#[event(
    type = "parcel.shipped",
    aggregate = "parcel",
    topic = "parcels",
    source = "/parcels"
)]
struct ParcelShipped {
    #[event(aggregate_id)]
    parcel_id: String,
}

fn amqp_url() -> String {
    std::env::var("OUTBOX_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

fn unique_name(prefix: &str) -> String {
    format!("outbox-trace-{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// The exchange the relay publishes to, with the inbox's queue and a
/// second queue to read the published message from, both bound with `#`.
struct Topology {
    connection: Connection,
    channel: Channel,
    exchange: String,
    inbox_queue: String,
    inspect_queue: String,
}

impl Topology {
    async fn declare() -> Topology {
        let url = amqp_url();
        let connected = tokio::time::timeout(
            Duration::from_secs(10),
            Connection::connect(&url, ConnectionProperties::default()),
        )
        .await;
        let connection = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => panic!(
                "RabbitMQ is not reachable at {url}: {error}; start the test services with `scripts/test.sh --services-only`"
            ),
            Err(_) => panic!(
                "RabbitMQ at {url} did not answer within 10 s; start the test services with `scripts/test.sh --services-only`"
            ),
        };
        let channel = connection.create_channel().await.expect("channel");
        let exchange = unique_name("x");
        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("declare exchange");
        let topology = Topology {
            connection,
            channel,
            exchange,
            inbox_queue: unique_name("inbox"),
            inspect_queue: unique_name("inspect"),
        };
        for queue in [&topology.inbox_queue, &topology.inspect_queue] {
            topology
                .channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .expect("declare queue");
            topology
                .channel
                .queue_bind(
                    queue.as_str().into(),
                    topology.exchange.as_str().into(),
                    "#".into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .expect("bind queue");
        }
        topology
    }

    /// The text headers of the first message of the inspection queue,
    /// waiting for it to arrive.
    async fn published_headers(&self) -> HashMap<String, String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let message = self
                .channel
                .basic_get(
                    self.inspect_queue.as_str().into(),
                    BasicGetOptions { no_ack: true },
                )
                .await
                .expect("basic_get");
            if let Some(message) = message {
                return message
                    .delivery
                    .properties
                    .headers()
                    .as_ref()
                    .map(|table| {
                        table
                            .inner()
                            .iter()
                            .filter_map(|(name, value)| match value {
                                AMQPValue::LongString(text) => {
                                    Some((name.to_string(), text.to_string()))
                                }
                                _ => None,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
            }
            assert!(
                Instant::now() < deadline,
                "the relay published nothing to {}",
                self.exchange
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn delete(self) {
        let dead_letter_queue = format!("{}.dlq", self.inbox_queue);
        for queue in [&self.inbox_queue, &self.inspect_queue, &dead_letter_queue] {
            let _ = self
                .channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        let dead_letter_exchange = format!("{}.dlx", self.inbox_queue);
        for exchange in [&self.exchange, &dead_letter_exchange] {
            let _ = self
                .channel
                .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
        let _ = self.connection.close(200, "OK".into()).await;
    }
}

/// Wait until `spans` holds a finished span named `name` whose `event_id`
/// attribute is `event_id`.
async fn exported_span(
    provider: &SdkTracerProvider,
    exporter: &InMemorySpanExporter,
    name: &str,
    event_id: &str,
) -> SpanData {
    let deadline = Instant::now() + WAIT;
    loop {
        provider.force_flush().expect("flush spans");
        let spans = exporter.get_finished_spans().expect("finished spans");
        let found = spans.into_iter().find(|span| {
            span.name == name
                && span.attributes.iter().any(|attribute| {
                    attribute.key.as_str() == "event_id" && attribute.value.as_str() == event_id
                })
        });
        if let Some(span) = found {
            return span;
        }
        assert!(
            Instant::now() < deadline,
            "no `{name}` span was exported for event {event_id}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_span_continues_the_producers_trace() {
    // Every span of this test binary goes to the in-memory exporter; the
    // consumer's tasks run on the runtime's threads, so the subscriber is
    // global (this binary has this one test).
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-test")));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let topology = Topology::declare().await;

    // The producer: enqueue inside its span.
    let producer_span = tracing::info_span!("ship_parcel");
    let producer = producer_span.context().span().span_context().clone();
    assert!(producer.is_valid(), "the producer span has a valid context");
    let traceparent = format!("00-{}-{}-01", producer.trace_id(), producer.span_id());
    let payload =
        serde_json::value::to_raw_value(&serde_json::json!({ "parcel_id": "p-1" })).expect("json");
    let message = OutboxMessage::new(
        ParcelShipped::EVENT_TYPE,
        ParcelShipped::SOURCE,
        ParcelShipped::AGGREGATE_TYPE,
        "p-1",
        topology.exchange.as_str(),
        payload,
    );
    let event_id = message.event_id().to_string();
    let enqueue = async {
        let mut tx = db.pool().begin().await.expect("begin");
        OutboxWriter::new()
            .enqueue_messages(&mut tx, vec![message])
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
    };
    tracing::Instrument::instrument(enqueue, producer_span).await;

    // The relay, in-process, publishing to the real RabbitMQ.
    let relay_config = RelayConfig {
        poll_interval_max: Duration::from_millis(50),
        ..RelayConfig::default()
    };
    let publisher = RabbitMqPublisher::new(RabbitMqPublisherConfig::new(amqp_url()))
        .expect("rabbitmq publisher");
    let relay = Relay::new(
        Arc::new(PostgresStore::new(db.pool().clone())),
        Arc::new(publisher),
        outbox_relay::commands::relay_settings(unique_name("relay"), &relay_config),
    );
    let stop_relay = CancellationToken::new();
    let relay_task = tokio::spawn(relay.run(stop_relay.clone()));

    // The real message carries the producer's traceparent both ways.
    let headers = topology.published_headers().await;
    assert_eq!(
        headers.get("cloudEvents:traceparent"),
        Some(&traceparent),
        "{headers:?}"
    );
    assert_eq!(
        headers.get("traceparent"),
        Some(&traceparent),
        "{headers:?}"
    );
    assert_eq!(
        headers.get("cloudEvents:id"),
        Some(&event_id),
        "{headers:?}"
    );

    // The consumer: the RabbitMQ inbox adapter.
    let handled = Arc::new(tokio::sync::Notify::new());
    let handled_in_handler = Arc::clone(&handled);
    let handler = outbox_inbox::typed::<ParcelShipped, _, sqlx::Postgres>(
        move |_tx: &mut Transaction<'static, sqlx::Postgres>, _parcel: &ParcelShipped| {
            let handled = Arc::clone(&handled_in_handler);
            let future: BoxFuture<'_, Result<(), BoxError>> = Box::pin(async move {
                tracing::info!("parcel handled");
                handled.notify_one();
                Ok(())
            });
            future
        },
    );
    let inbox = Inbox::new(db.pool().clone(), CONSUMER).expect("inbox");
    let consumer = RabbitMqInboxConsumer::new(
        inbox,
        handler,
        RabbitMqConsumerConfig::new(amqp_url(), topology.inbox_queue.clone()),
    )
    .expect("consumer");
    let stop_consumer = CancellationToken::new();
    let consumer_task = tokio::spawn(consumer.run(stop_consumer.clone()));
    tokio::time::timeout(WAIT, handled.notified())
        .await
        .expect("the inbox handled the event");

    let handler_span = exported_span(&provider, &exporter, "inbox.handle", &event_id).await;
    let producer_exported = exported_span_named(&exporter, "ship_parcel");

    stop_consumer.cancel();
    let stats = consumer_task
        .await
        .expect("consumer task")
        .expect("consumer run");
    stop_relay.cancel();
    relay_task.await.expect("relay task").expect("relay run");
    topology.delete().await;

    assert_eq!(stats.processed, 1);
    assert_ne!(producer.trace_id(), TraceId::INVALID);
    assert_eq!(
        handler_span.span_context.trace_id(),
        producer.trace_id(),
        "the handler span is in the producer's trace"
    );
    assert_eq!(
        handler_span.parent_span_id,
        producer.span_id(),
        "the producer span is the handler span's parent"
    );
    assert_ne!(handler_span.span_context.span_id(), SpanId::INVALID);
    assert_ne!(handler_span.span_context.span_id(), producer.span_id());
    assert_eq!(
        producer_exported.span_context.span_id(),
        producer.span_id(),
        "the parent is the exported producer span"
    );
    let attribute = |key: &str| {
        handler_span
            .attributes
            .iter()
            .find(|attribute| attribute.key.as_str() == key)
            .map(|attribute| attribute.value.as_str().into_owned())
    };
    assert_eq!(attribute("consumer").as_deref(), Some(CONSUMER));
    assert_eq!(
        attribute("event_type").as_deref(),
        Some(ParcelShipped::EVENT_TYPE)
    );
}

/// The finished span named `name`; the producer span closed before the
/// relay started.
fn exported_span_named(exporter: &InMemorySpanExporter, name: &str) -> SpanData {
    exporter
        .get_finished_spans()
        .expect("finished spans")
        .into_iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no `{name}` span was exported"))
}
