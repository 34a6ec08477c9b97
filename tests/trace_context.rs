//! The write side stores the W3C trace context of the caller's current
//! OpenTelemetry span in `headers` (feature `opentelemetry`), on real
//! PostgreSQL and SQLite: from a `tracing` span bridged with
//! `tracing-opentelemetry`, from the OpenTelemetry context alone, never
//! without a span, and never over a `traceparent` the caller set.

use std::collections::BTreeMap;

use opentelemetry::Context;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer, TracerProvider,
};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use outbox::trace_context::TraceContext;
use outbox::{EnqueueOptions, Event, OutboxWriter};
use outbox_testkit::{TestBackend, TestDatabase};
use serde::Serialize;
use tracing::instrument::WithSubscriber as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

#[derive(Serialize, Event)]
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

fn parcel(id: &str) -> ParcelShipped {
    ParcelShipped {
        parcel_id: id.to_owned(),
    }
}

const CALLER_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn tracer() -> (SdkTracerProvider, SdkTracer) {
    let provider = SdkTracerProvider::builder().build();
    let tracer = provider.tracer("outbox-test");
    (provider, tracer)
}

/// The traceparent a span context must be stored as, spelled out here
/// rather than through the crate's own formatting.
fn expected_traceparent(span_context: &SpanContext) -> String {
    assert!(span_context.is_valid(), "the test span has a valid context");
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        u128::from_be_bytes(span_context.trace_id().to_bytes()),
        u64::from_be_bytes(span_context.span_id().to_bytes()),
        span_context.trace_flags().to_u8() & 1
    )
}

/// Every row's headers, by aggregate id.
async fn stored_headers<DB: TestBackend>(
    db: &TestDatabase<DB>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut connection = db.pool().acquire().await.expect("acquire");
    let rows = DB::fetch_strings(
        &mut connection,
        "SELECT aggregate_id || ' ' || CAST(headers AS TEXT) FROM outbox_events",
    )
    .await
    .unwrap_or_else(|error| panic!("{}: read headers: {error}", DB::LABEL));
    rows.into_iter()
        .map(|row| {
            let (aggregate_id, headers) = row.split_once(' ').expect("id and headers");
            let headers: BTreeMap<String, String> =
                serde_json::from_str(headers).expect("headers are a JSON object of strings");
            (aggregate_id.to_owned(), headers)
        })
        .collect()
}

/// Enqueue `single` alone and `batch` in one batch, in one transaction.
async fn enqueue_single_and_batch<DB: outbox::Backend>(
    db: &TestDatabase<DB>,
    single: &str,
    batch: &[&str],
) {
    let mut tx = db.pool().begin().await.expect("begin");
    outbox::enqueue(&mut tx, &parcel(single))
        .await
        .expect("enqueue");
    let events: Vec<ParcelShipped> = batch.iter().map(|id| parcel(id)).collect();
    outbox::enqueue_batch(&mut tx, &events)
        .await
        .expect("enqueue batch");
    tx.commit().await.expect("commit");
}

async fn a_bridged_tracing_span_is_stored<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let (_provider, tracer) = tracer();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));

    let work = async {
        let span = tracing::info_span!("ship_parcels");
        let expected = expected_traceparent(span.context().span().span_context());
        let enqueue = async {
            enqueue_single_and_batch(db, "single", &["batch-1", "batch-2"]).await;
        };
        tracing::Instrument::instrument(enqueue, span).await;
        expected
    };
    let expected = work.with_subscriber(subscriber).await;

    let stored = stored_headers(db).await;
    assert_eq!(stored.len(), 3, "{stored:?}");
    for (aggregate_id, headers) in &stored {
        assert_eq!(
            headers.get("traceparent"),
            Some(&expected),
            "{}: {aggregate_id} carries the span's traceparent",
            DB::LABEL
        );
        assert_eq!(
            headers.get("tracestate"),
            None,
            "{}: an empty tracestate is not stored",
            DB::LABEL
        );
    }
}

async fn an_opentelemetry_context_with_tracestate_is_stored<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let (_provider, tracer) = tracer();
    // A remote parent with vendor state, as an HTTP server would extract it;
    // the application's span inherits its trace id and tracestate.
    let remote = SpanContext::new(
        TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").expect("trace id"),
        SpanId::from_hex("b7ad6b7169203331").expect("span id"),
        TraceFlags::SAMPLED,
        true,
        TraceState::from_key_value([("vendor", "opaque")]).expect("tracestate"),
    );
    let parent = Context::new().with_remote_span_context(remote);
    let span = tracer.start_with_context("ship_parcel", &parent);
    let context = parent.with_span(span);
    let expected = expected_traceparent(context.span().span_context());
    assert!(expected.contains("0af7651916cd43dd8448eb211c80319c"));
    assert!(!expected.contains("b7ad6b7169203331"), "a span of its own");

    enqueue_single_and_batch(db, "single", &["batch-1"])
        .with_context(context)
        .await;

    let stored = stored_headers(db).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    for (aggregate_id, headers) in &stored {
        assert_eq!(
            headers.get("traceparent"),
            Some(&expected),
            "{}: {aggregate_id}",
            DB::LABEL
        );
        assert_eq!(
            headers.get("tracestate").map(String::as_str),
            Some("vendor=opaque"),
            "{}: {aggregate_id}",
            DB::LABEL
        );
    }
}

async fn the_tracing_span_comes_before_the_opentelemetry_context<
    DB: outbox::Backend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let (_provider, tracer) = tracer();
    let outer = Context::new().with_span(tracer.start("otel_only"));
    let outer_traceparent = expected_traceparent(outer.span().span_context());
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));

    let work = async {
        // A root tracing span, unrelated to `outer`. Entering it makes it
        // the current OpenTelemetry context too; the OpenTelemetry context
        // attached inside it then differs from the current tracing span.
        let span = tracing::info_span!("bridged");
        let expected = expected_traceparent(span.context().span().span_context());
        let enqueue = async {
            assert_eq!(
                TraceContext::of(Context::current().span().span_context())
                    .map(|context| context.traceparent),
                Some(outer_traceparent.clone()),
                "the OpenTelemetry context is the other span"
            );
            enqueue_single_and_batch(db, "single", &[]).await;
        };
        tracing::Instrument::instrument(enqueue.with_context(outer), span).await;
        expected
    };
    let expected = work.with_subscriber(subscriber).await;
    assert_ne!(expected, outer_traceparent);

    let stored = stored_headers(db).await;
    assert_eq!(
        stored["single"].get("traceparent"),
        Some(&expected),
        "{}: the bridged tracing span is the one stored",
        DB::LABEL
    );
}

async fn without_a_span_nothing_is_stored<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let (_provider, tracer) = tracer();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
    assert_eq!(TraceContext::current(), None);
    enqueue_single_and_batch(db, "no-subscriber", &["no-subscriber-batch"]).await;
    // A subscriber with the layer, but no span entered.
    enqueue_single_and_batch(db, "no-span", &[])
        .with_subscriber(subscriber)
        .await;

    let stored = stored_headers(db).await;
    assert_eq!(stored.len(), 3, "{stored:?}");
    for (aggregate_id, headers) in &stored {
        assert!(
            headers.is_empty(),
            "{}: {aggregate_id} has no headers: {headers:?}",
            DB::LABEL
        );
    }
}

async fn the_callers_traceparent_wins<DB: outbox::Backend + TestBackend>(db: &TestDatabase<DB>) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let (_provider, tracer) = tracer();
    let remote = SpanContext::new(
        TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").expect("trace id"),
        SpanId::from_hex("b7ad6b7169203331").expect("span id"),
        TraceFlags::SAMPLED,
        true,
        TraceState::from_key_value([("vendor", "opaque")]).expect("tracestate"),
    );
    let parent = Context::new().with_remote_span_context(remote);
    let context = parent.with_span(tracer.start_with_context("ship_parcel", &parent));
    let current = expected_traceparent(context.span().span_context());

    let enqueue = async {
        let mut tx = db.pool().begin().await.expect("begin");
        let writer = OutboxWriter::new();
        writer
            .enqueue_with(
                &mut tx,
                &parcel("explicit"),
                EnqueueOptions::new().header("traceparent", CALLER_TRACEPARENT),
            )
            .await
            .expect("enqueue with a traceparent");
        writer
            .enqueue_with(
                &mut tx,
                &parcel("own-state"),
                EnqueueOptions::new().header("tracestate", "mine=1"),
            )
            .await
            .expect("enqueue with a tracestate");
        tx.commit().await.expect("commit");
    };
    enqueue.with_context(context).await;

    let stored = stored_headers(db).await;
    assert_eq!(
        stored["explicit"],
        BTreeMap::from([("traceparent".to_owned(), CALLER_TRACEPARENT.to_owned())]),
        "{}: the caller's traceparent stays, with no tracestate added",
        DB::LABEL
    );
    assert_eq!(
        stored["own-state"],
        BTreeMap::from([
            ("traceparent".to_owned(), current),
            ("tracestate".to_owned(), "mine=1".to_owned()),
        ]),
        "{}: the caller's tracestate stays",
        DB::LABEL
    );
}

outbox_testkit::test_on_backends!(
    [postgres, sqlite]
    a_bridged_tracing_span_is_stored,
    an_opentelemetry_context_with_tracestate_is_stored,
    the_tracing_span_comes_before_the_opentelemetry_context,
    without_a_span_nothing_is_stored,
    the_callers_traceparent_wins,
);
