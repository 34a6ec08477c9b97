//! W3C trace context of the caller's current OpenTelemetry span, stored in
//! each event's `headers` so a consumer's span links back to the producer's
//! (feature `opentelemetry`).
//!
//! When an event is enqueued without a `traceparent` header and the caller
//! has a current, valid span context, the writer stores it as
//! `traceparent` (`00-<trace id>-<span id>-<flags>`) and, when not empty,
//! `tracestate`. The relay publishes both as CloudEvents extension
//! attributes (Kafka `ce_traceparent`, AMQP `cloudEvents:traceparent`) and
//! as the plain W3C headers. A `traceparent` the caller sets itself wins:
//! the writer then adds neither header.
//!
//! The current span is looked up in this order:
//!
//! 1. the current `tracing` span, when it is bridged to OpenTelemetry by a
//!    `tracing-opentelemetry` layer ([`OpenTelemetrySpanExt::context`]);
//! 2. the current OpenTelemetry context ([`Context::current`]), for
//!    applications that use the OpenTelemetry API directly.
//!
//! The application must use the same `opentelemetry` (0.31) and
//! `tracing-opentelemetry` (0.32) versions as this crate; spans of other
//! versions are not visible to it.
//!
//! ```
//! use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider};
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//! use outbox::Event;
//! use serde::Serialize;
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! #[derive(Serialize, Event)]
//! #[event(type = "order.created", aggregate = "order", topic = "orders", source = "/orders")]
//! struct OrderCreated { #[event(aggregate_id)] order_id: i64, total_cents: i64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The application's tracer, bridged into `tracing`.
//! let provider = SdkTracerProvider::builder().build();
//! let tracer = provider.tracer("orders");
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_opentelemetry::layer().with_tracer(tracer.clone()));
//! let _guard = tracing::subscriber::set_default(subscriber);
//!
//! let pool = sqlx::sqlite::SqlitePoolOptions::new()
//!     .max_connections(1)
//!     .connect("sqlite::memory:")
//!     .await?;
//! outbox::migrate(&pool).await?;
//!
//! // Enqueue inside a span: the event carries its trace context.
//! let span = tracing::info_span!("place_order");
//! let _entered = span.enter();
//! let expected = outbox::trace_context::TraceContext::current().expect("a current span");
//! let mut tx = pool.begin().await?;
//! outbox::enqueue(&mut tx, &OrderCreated { order_id: 7, total_cents: 1250 }).await?;
//! tx.commit().await?;
//!
//! let headers: String = sqlx::query_scalar("SELECT headers FROM outbox_events")
//!     .fetch_one(&pool)
//!     .await?;
//! assert!(headers.contains(&expected.traceparent));
//!
//! // The OpenTelemetry API alone works as well.
//! drop(_entered);
//! tracer.in_span("ship_order", |cx| {
//!     let traceparent = outbox::trace_context::TraceContext::current()
//!         .expect("a current span")
//!         .traceparent;
//!     let trace_id = cx.span().span_context().trace_id().to_string();
//!     assert!(traceparent.contains(&trace_id));
//! });
//! # Ok(()) }
//! ```
//!
//! [`OpenTelemetrySpanExt::context`]: tracing_opentelemetry::OpenTelemetrySpanExt::context
//! [`Context::current`]: opentelemetry::Context::current

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::OutboxMessage;

/// The header carrying the W3C `traceparent`.
pub const TRACEPARENT_HEADER: &str = crate::wire::TRACEPARENT_ATTRIBUTE;
/// The header carrying the W3C `tracestate`.
pub const TRACESTATE_HEADER: &str = crate::wire::TRACESTATE_ATTRIBUTE;

/// The W3C trace context of one span, as it is stored in `headers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`.
    pub traceparent: String,
    /// The vendor-specific `tracestate`; `None` when empty.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The trace context of the caller's current span: the current `tracing`
    /// span bridged to OpenTelemetry first, then the current OpenTelemetry
    /// context. `None` when neither holds a valid span context.
    pub fn current() -> Option<TraceContext> {
        let tracing_context = tracing::Span::current().context();
        TraceContext::of(tracing_context.span().span_context())
            .or_else(|| TraceContext::of(Context::current().span().span_context()))
    }

    /// The trace context of `span_context`; `None` when it is not valid.
    pub fn of(span_context: &SpanContext) -> Option<TraceContext> {
        if !span_context.is_valid() {
            return None;
        }
        // Version 00 defines only the sampled flag.
        let flags = span_context.trace_flags() & TraceFlags::SAMPLED;
        let traceparent = format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            flags.to_u8()
        );
        let tracestate =
            Some(span_context.trace_state().header()).filter(|state| !state.is_empty());
        Some(TraceContext {
            traceparent,
            tracestate,
        })
    }

    /// Store the context in `message`'s headers unless the message already
    /// has a `traceparent`, which then wins with its own `tracestate`. A
    /// `tracestate` the caller set is kept as well.
    pub(crate) fn fill(&self, message: OutboxMessage) -> OutboxMessage {
        if message.headers().contains_key(TRACEPARENT_HEADER) {
            return message;
        }
        let keeps_own_state = message.headers().contains_key(TRACESTATE_HEADER);
        let message = message.with_header(TRACEPARENT_HEADER, self.traceparent.as_str());
        match &self.tracestate {
            Some(tracestate) if !keeps_own_state => {
                message.with_header(TRACESTATE_HEADER, tracestate.as_str())
            }
            _ => message,
        }
    }
}

/// Add the caller's current trace context to every message that has no
/// `traceparent` of its own.
pub(crate) fn fill_current(messages: Vec<OutboxMessage>) -> Vec<OutboxMessage> {
    match TraceContext::current() {
        Some(context) => messages
            .into_iter()
            .map(|message| context.fill(message))
            .collect(),
        None => messages,
    }
}
