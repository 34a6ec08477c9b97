//! The handler span of one delivery, `inbox.handle`: with the
//! `opentelemetry` feature, a child of the producer's span whose W3C trace
//! context the message carries.
//!
//! The relay publishes the `traceparent` / `tracestate` of an event's
//! `headers` as CloudEvents extension attributes (Kafka `ce_traceparent`,
//! AMQP `cloudEvents:traceparent`) and as the plain W3C headers;
//! [`IncomingEvent`] reads either into its `traceparent` / `tracestate`
//! attributes. The adapters run every handler attempt inside
//! [`handler_span`]; a `tracing-opentelemetry` layer then exports it with
//! the producer's trace id and span as parent. A malformed `traceparent` is
//! ignored (logged at debug level): the span then starts a trace of its
//! own, and the message is handled as usual.

use crate::incoming::IncomingEvent;

pub use outbox::wire::{TRACEPARENT_ATTRIBUTE, TRACESTATE_ATTRIBUTE};

/// The span one handler attempt runs in: `inbox.handle`, with the
/// consumer, event id and event type, parented on the message's trace
/// context when it has a valid one (feature `opentelemetry`).
///
/// The Kafka and RabbitMQ adapters use it; a consumer loop of one's own
/// runs [`Inbox::process`](crate::Inbox::process) in it the same way:
///
/// ```no_run
/// use outbox_inbox::{Inbox, IncomingEvent, handler_span};
/// use tracing::Instrument;
///
/// # async fn example(inbox: Inbox<sqlx::Postgres>, incoming: IncomingEvent) -> Result<(), outbox_inbox::Error> {
/// let span = handler_span(inbox.consumer(), &incoming);
/// inbox
///     .process(&incoming.id, async |tx| {
///         sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = 1")
///             .execute(&mut *tx)
///             .await?;
///         Ok(())
///     })
///     .instrument(span)
///     .await?;
/// # Ok(()) }
/// ```
pub fn handler_span(consumer: &str, incoming: &IncomingEvent) -> tracing::Span {
    let span = tracing::info_span!(
        "inbox.handle",
        consumer,
        event_id = %incoming.id,
        event_type = %incoming.event_type,
    );
    #[cfg(feature = "opentelemetry")]
    otel::continue_producer_trace(&span, incoming);
    span
}

/// The `inbox.handle` span of one event of a batch: as
/// [`handler_span`], the consumer named by the batch's span around it.
pub(crate) fn event_span(incoming: &IncomingEvent) -> tracing::Span {
    let span = tracing::info_span!(
        "inbox.handle",
        event_id = %incoming.id,
        event_type = %incoming.event_type,
    );
    #[cfg(feature = "opentelemetry")]
    otel::continue_producer_trace(&span, incoming);
    span
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use std::str::FromStr;

    use opentelemetry::Context;
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::{TRACEPARENT_ATTRIBUTE, TRACESTATE_ATTRIBUTE};
    use crate::incoming::IncomingEvent;

    /// Make `span` a child of the message's remote span, if it names one.
    pub(super) fn continue_producer_trace(span: &tracing::Span, incoming: &IncomingEvent) {
        let Some(traceparent) = incoming.attributes.get(TRACEPARENT_ATTRIBUTE) else {
            return;
        };
        let tracestate = incoming
            .attributes
            .get(TRACESTATE_ATTRIBUTE)
            .map(String::as_str);
        let parent = match remote_parent(traceparent, tracestate) {
            Ok(parent) => parent,
            Err(reason) => {
                tracing::debug!(
                    event_id = %incoming.id,
                    traceparent = %traceparent,
                    reason,
                    "malformed traceparent ignored; the handler span starts its own trace"
                );
                return;
            }
        };
        let context = Context::new().with_remote_span_context(parent);
        if let Err(error) = span.set_parent(context) {
            tracing::debug!(event_id = %incoming.id, %error, "cannot parent the handler span on the producer's");
        }
    }

    /// Parse a W3C `traceparent` (and `tracestate`) into the remote span
    /// context it names, as the W3C Trace Context recommendation reads it.
    pub(super) fn remote_parent(
        traceparent: &str,
        tracestate: Option<&str>,
    ) -> Result<SpanContext, &'static str> {
        let parts: Vec<&str> = traceparent.trim().split('-').collect();
        let [version, trace_id, span_id, flags, rest @ ..] = parts.as_slice() else {
            return Err("not four dash-separated fields");
        };
        if !is_lower_hex(version, 2) || *version == "ff" {
            return Err("invalid version");
        }
        // Version 00 has exactly four fields; later versions may add some.
        if *version == "00" && !rest.is_empty() {
            return Err("version 00 with more than four fields");
        }
        if !is_lower_hex(trace_id, 32) {
            return Err("the trace id is not 32 lowercase hex digits");
        }
        if !is_lower_hex(span_id, 16) {
            return Err("the parent id is not 16 lowercase hex digits");
        }
        if !is_lower_hex(flags, 2) {
            return Err("the flags are not 2 lowercase hex digits");
        }
        let trace_id = TraceId::from_hex(trace_id).map_err(|_| "invalid trace id")?;
        let span_id = SpanId::from_hex(span_id).map_err(|_| "invalid parent id")?;
        let flags = u8::from_str_radix(flags, 16).map_err(|_| "invalid flags")?;
        if trace_id == TraceId::INVALID {
            return Err("the trace id is all zeros");
        }
        if span_id == SpanId::INVALID {
            return Err("the parent id is all zeros");
        }
        // An unparseable tracestate is dropped; the traceparent still holds.
        let trace_state = tracestate
            .and_then(|state| TraceState::from_str(state).ok())
            .unwrap_or_default();
        Ok(SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::new(flags) & TraceFlags::SAMPLED,
            true,
            trace_state,
        ))
    }

    fn is_lower_hex(text: &str, length: usize) -> bool {
        text.len() == length
            && text
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_valid_traceparent_names_its_remote_span() {
            let parent = remote_parent(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Some("congo=t61rcWkgMzE"),
            )
            .expect("valid");
            assert_eq!(
                parent.trace_id().to_string(),
                "4bf92f3577b34da6a3ce929d0e0e4736"
            );
            assert_eq!(parent.span_id().to_string(), "00f067aa0ba902b7");
            assert!(parent.is_sampled());
            assert!(parent.is_remote());
            assert_eq!(parent.trace_state().get("congo"), Some("t61rcWkgMzE"));
        }

        #[test]
        fn malformed_traceparents_are_refused() {
            for malformed in [
                "",
                "garbage",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
            ] {
                assert!(
                    remote_parent(malformed, None).is_err(),
                    "`{malformed}` is refused"
                );
            }
        }

        /// Run `handler_span` for a message carrying `traceparent` under an
        /// OpenTelemetry layer; the exported span.
        fn exported_handler_span(traceparent: &str) -> opentelemetry_sdk::trace::SpanData {
            use opentelemetry::trace::TracerProvider as _;
            use tracing_subscriber::layer::SubscriberExt as _;

            let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
            let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            let subscriber = tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
            let incoming = IncomingEvent {
                id: "event-1".to_owned(),
                event_type: "parcel.shipped".to_owned(),
                source: "/parcels".to_owned(),
                attributes: [(TRACEPARENT_ATTRIBUTE.to_owned(), traceparent.to_owned())]
                    .into_iter()
                    .collect(),
                data: b"{}".to_vec(),
            };
            tracing::subscriber::with_default(subscriber, || {
                let span = crate::handler_span("dispatch", &incoming);
                span.in_scope(|| tracing::info!("handled"));
            });
            provider.force_flush().expect("flush");
            let mut spans = exporter.get_finished_spans().expect("spans");
            assert_eq!(spans.len(), 1, "{spans:?}");
            spans.remove(0)
        }

        #[test]
        fn the_handler_span_is_a_child_of_the_remote_span() {
            let span =
                exported_handler_span("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
            assert_eq!(span.name, "inbox.handle");
            assert_eq!(
                span.span_context.trace_id().to_string(),
                "4bf92f3577b34da6a3ce929d0e0e4736"
            );
            assert_eq!(span.parent_span_id.to_string(), "00f067aa0ba902b7");
            assert!(span.parent_span_is_remote);
        }

        #[test]
        fn a_malformed_traceparent_starts_a_trace_of_its_own() {
            let span = exported_handler_span("00-not-a-trace-01");
            assert_eq!(span.name, "inbox.handle");
            assert_eq!(span.parent_span_id, SpanId::INVALID, "a root span");
            assert!(span.span_context.is_valid());
        }

        #[test]
        fn a_later_version_may_carry_more_fields() {
            let parent = remote_parent(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-future",
                None,
            )
            .expect("valid");
            assert!(!parent.is_sampled());
        }
    }
}
