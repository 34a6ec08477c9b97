//! The pieces of an end-to-end trace test that do not depend on the broker:
//! an OpenTelemetry SDK exporting to memory, a producer that enqueues inside
//! its own span, an inbox handler that signals each event, and the checks
//! that the handler span continues the producer's trace.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceId, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox::{Event, EventType, OutboxMessage, OutboxWriter};
use outbox_inbox::BoxError;
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// How long any one wait may last before the test fails; no test asserts a
/// duration.
pub const WAIT: Duration = Duration::from_secs(30);
/// The inbox's consumer name.
pub const CONSUMER: &str = "dispatch";
/// The name of the producer's span.
pub const PRODUCER_SPAN: &str = "ship_parcel";

#[derive(Debug, Serialize, Deserialize, Event)]
#[event(
    type = "parcel.shipped",
    aggregate = "parcel",
    topic = "parcels",
    source = "/parcels"
)]
pub struct ParcelShipped {
    #[event(aggregate_id)]
    pub parcel_id: String,
}

/// Every span of the test binary goes to an in-memory exporter. The
/// consumer's tasks run on the runtime's threads, so the subscriber is
/// global: a binary using this holds one test.
pub fn export_spans_to_memory() -> (SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-test")));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    (provider, exporter)
}

/// What the producer enqueued.
pub struct Produced {
    /// The producer span's context.
    pub producer: SpanContext,
    /// Its W3C `traceparent`.
    pub traceparent: String,
    /// The event's id.
    pub event_id: String,
}

/// Enqueue one `parcel.shipped` event for `topic` inside the producer's span.
pub async fn enqueue_in_producer_span(pool: &sqlx::PgPool, topic: &str) -> Produced {
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
        topic,
        payload,
    );
    let event_id = message.event_id().to_string();
    let enqueue = async {
        let mut tx = pool.begin().await.expect("begin");
        OutboxWriter::new()
            .enqueue_messages(&mut tx, vec![message])
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
    };
    tracing::Instrument::instrument(enqueue, producer_span).await;
    Produced {
        producer,
        traceparent,
        event_id,
    }
}

/// An inbox handler of `ParcelShipped` that logs inside its span and
/// notifies `handled`.
pub fn parcel_handler(
    handled: Arc<tokio::sync::Notify>,
) -> impl outbox_inbox::Handler<sqlx::Postgres> {
    ParcelHandler { handled }
}

/// See [`parcel_handler`].
struct ParcelHandler {
    handled: Arc<tokio::sync::Notify>,
}

impl outbox_inbox::Handler<sqlx::Postgres> for ParcelHandler {
    type Event = ParcelShipped;

    async fn handle(
        &self,
        _tx: &mut sqlx::PgConnection,
        _parcel: &ParcelShipped,
        _delivery: &outbox_inbox::Delivery<'_>,
    ) -> Result<(), BoxError> {
        tracing::info!("parcel handled");
        self.handled.notify_one();
        Ok(())
    }
}

/// Wait until the exporter holds a finished span named `name` whose
/// `event_id` attribute is `event_id`.
pub async fn exported_span(
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

/// Wait for the handler to run, then for the spans it exported: the
/// `inbox.handle` span of `event_id`, and the producer's span.
pub async fn handled_spans(
    provider: &SdkTracerProvider,
    exporter: &InMemorySpanExporter,
    handled: &tokio::sync::Notify,
    event_id: &str,
) -> (SpanData, SpanData) {
    tokio::time::timeout(WAIT * 2, handled.notified())
        .await
        .expect("the inbox handled the event");
    let handler_span = exported_span(provider, exporter, "inbox.handle", event_id).await;
    (handler_span, exported_span_named(exporter, PRODUCER_SPAN))
}

/// Stop the consumer, then the relay, each after its work; returns the
/// consumer's statistics.
pub async fn stop_consumer_then_relay<Stats, ConsumerError, Totals, RelayError>(
    stop_consumer: tokio_util::sync::CancellationToken,
    consumer_task: tokio::task::JoinHandle<Result<Stats, ConsumerError>>,
    stop_relay: tokio_util::sync::CancellationToken,
    relay_task: tokio::task::JoinHandle<Result<Totals, RelayError>>,
) -> Stats
where
    ConsumerError: std::fmt::Debug,
    RelayError: std::fmt::Debug,
{
    stop_consumer.cancel();
    let stats = consumer_task
        .await
        .expect("consumer task")
        .expect("consumer run");
    stop_relay.cancel();
    relay_task.await.expect("relay task").expect("relay run");
    stats
}

/// The finished span named `name`; the producer span closed before the
/// relay started.
pub fn exported_span_named(exporter: &InMemorySpanExporter, name: &str) -> SpanData {
    exporter
        .get_finished_spans()
        .expect("finished spans")
        .into_iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no `{name}` span was exported"))
}

/// The handler span is a child of the exported producer span, in its
/// trace, and names the consumer and the event type.
pub fn assert_handler_continues_the_producer(
    handler_span: &SpanData,
    producer: &SpanContext,
    producer_exported: &SpanData,
) {
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
