//! [`StdoutPublisher`]: writes every event as one line of CloudEvents JSON
//! (structured content mode), for development and for piping into other
//! tools.
//!
//! A line is the JSON event format of the `cloudevents-sdk` crate: the
//! attributes of [`crate::publish::cloudevent`] as members and the payload
//! as the JSON value of `data`:
//!
//! ```text
//! {"specversion":"1.0","id":"…","type":"order.created","source":"/orders","datacontenttype":"application/json","time":"2024-05-01T12:00:00Z","data":{"total":12.5},"aggregatetype":"order","eventversion":1,"partitionkey":"order-42"}
//! ```

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use futures::future::BoxFuture;

use crate::event::OutboundEvent;
use crate::publish::cloudevent::CloudEvent;
use crate::publish::{AggregateHolds, PublishFailure, Publisher};

/// Publishes events as JSON lines to stdout, or to any other writer.
///
/// Each batch is written with one `write_all` and flushed before
/// [`Publisher::publish`] returns, so a batch is either handed to the
/// writer whole or reported [`PublishFailure::Unavailable`]. Writing blocks
/// the calling thread, as writes to stdout do.
#[derive(Debug)]
pub struct StdoutPublisher<W = std::io::Stdout> {
    writer: Mutex<W>,
    healthy: AtomicBool,
}

impl StdoutPublisher<std::io::Stdout> {
    /// A publisher writing to the process's standard output.
    pub fn new() -> Self {
        Self::with_writer(std::io::stdout())
    }
}

impl Default for StdoutPublisher<std::io::Stdout> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W: Write + Send> StdoutPublisher<W> {
    /// A publisher writing to `writer` instead of stdout.
    pub fn with_writer(writer: W) -> Self {
        Self {
            writer: Mutex::new(writer),
            healthy: AtomicBool::new(true),
        }
    }

    /// The writer, once the publisher is no longer needed.
    pub fn into_inner(self) -> W {
        self.writer
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn publish_batch(&self, events: &[OutboundEvent]) -> Vec<Result<(), PublishFailure>> {
        let mut outcomes: Vec<Result<(), PublishFailure>> = Vec::with_capacity(events.len());
        // Sized once: growing by doubling would hold the old and the new
        // buffer at once, three times the batch's payloads.
        let mut buffer: Vec<u8> = Vec::with_capacity(
            events
                .iter()
                .map(|event| event.payload.len() + LINE_OVERHEAD)
                .sum(),
        );
        let mut holds = AggregateHolds::default();
        for event in events {
            let outcome = match holds.held(event) {
                Some(held) => Err(held),
                None => append_line(&mut buffer, event),
            };
            if outcome.is_err() {
                holds.note_failure(event);
            }
            outcomes.push(outcome);
        }
        if buffer.is_empty() {
            return outcomes;
        }
        let written = {
            let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
            writer.write_all(&buffer).and_then(|()| writer.flush())
        };
        match written {
            Ok(()) => {
                self.healthy.store(true, Ordering::Relaxed);
            }
            Err(error) => {
                self.healthy.store(false, Ordering::Relaxed);
                tracing::warn!(%error, events = events.len(), "writing events to stdout failed");
                let failure =
                    PublishFailure::Unavailable(format!("cannot write to stdout: {error}"));
                for outcome in &mut outcomes {
                    if outcome.is_ok() {
                        *outcome = Err(failure.clone());
                    }
                }
            }
        }
        outcomes
    }
}

/// Room for one line's attributes, beside its payload.
const LINE_OVERHEAD: usize = 512;

/// Append `event` as one JSON line to `buffer`.
fn append_line(buffer: &mut Vec<u8>, event: &OutboundEvent) -> Result<(), PublishFailure> {
    let cloud_event = CloudEvent::from_outbound(event)?;
    let structured = cloud_event.structured(&event.payload)?;
    let start = buffer.len();
    if let Err(error) = serde_json::to_writer(&mut *buffer, &structured) {
        buffer.truncate(start);
        return Err(PublishFailure::Rejected(format!(
            "cannot serialize the cloudevent: {error}"
        )));
    }
    // The payload goes through as it is written; a line break in valid
    // JSON can only be whitespace between tokens (strings escape theirs),
    // so it becomes a space and the event stays on one line.
    for byte in &mut buffer[start..] {
        if matches!(*byte, b'\n' | b'\r') {
            *byte = b' ';
        }
    }
    buffer.push(b'\n');
    Ok(())
}

impl<W: Write + Send> Publisher for StdoutPublisher<W> {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(async move { self.publish_batch(events) })
    }

    /// True unless the last write failed.
    fn is_connected(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Lines are written in the order of the slice, all in one write.
    fn keeps_order(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::{TimeZone, Utc};
    use uuid::Uuid;

    use super::*;

    fn event(aggregate_id: &str, payload: &str) -> OutboundEvent {
        OutboundEvent {
            id: 1,
            event_id: Uuid::now_v7(),
            event_type: "order.created".to_owned(),
            event_version: 3,
            source: "/orders".to_owned(),
            aggregate_type: "order".to_owned(),
            aggregate_id: aggregate_id.to_owned(),
            topic: "orders".to_owned(),
            payload: payload.into(),
            headers: BTreeMap::from([("traceparent".to_owned(), "00-abc-def-01".to_owned())]),
            created_at: Utc
                .with_ymd_and_hms(2024, 5, 1, 12, 0, 0)
                .single()
                .expect("valid time"),
            attempts: 0,
            replay: false,
        }
    }

    fn run<F: std::future::Future>(future: F) -> F::Output {
        futures::executor::block_on(future)
    }

    #[test]
    fn one_cloudevents_json_line_per_event() {
        let publisher = StdoutPublisher::with_writer(Vec::new());
        let events = vec![
            event("order-1", r#"{"total": 12.5, "lines": [{"sku": "a"}]}"#),
            event("order-2", "{\n  \"pretty\": true\n}"),
        ];
        let outcomes = run(publisher.publish(&events));
        assert_eq!(outcomes, vec![Ok(()), Ok(())]);
        assert!(publisher.is_connected());

        let output = String::from_utf8(publisher.into_inner()).expect("utf-8 output");
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.len(), 2, "{output}");
        assert!(output.ends_with('\n'));
        for (line, event) in lines.iter().zip(&events) {
            let json: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
            let expected_data: serde_json::Value =
                serde_json::from_str(&event.payload).expect("payload is JSON");
            assert_eq!(json["specversion"], "1.0");
            assert_eq!(json["id"], event.event_id.to_string());
            assert_eq!(json["source"], "/orders");
            assert_eq!(json["type"], "order.created");
            assert_eq!(json["time"], "2024-05-01T12:00:00Z");
            assert_eq!(json["datacontenttype"], "application/json");
            assert_eq!(
                json["data"], expected_data,
                "data is the payload as a JSON value"
            );
            assert_eq!(json["aggregatetype"], "order");
            assert_eq!(json["eventversion"], 3);
            assert_eq!(json["partitionkey"], event.aggregate_id);
            assert_eq!(json["traceparent"], "00-abc-def-01");
        }
    }

    #[test]
    fn a_bad_event_fails_alone() {
        let publisher = StdoutPublisher::with_writer(Vec::new());
        let mut no_source = event("order-2", "{}");
        no_source.source = String::new();
        let events = vec![
            event("order-1", "{}"),
            event("order-3", "not json"),
            no_source,
            event("order-4", "[1]"),
        ];
        let outcomes = run(publisher.publish(&events));
        assert_eq!(outcomes[0], Ok(()));
        assert!(
            matches!(&outcomes[1], Err(PublishFailure::Rejected(message)) if message.contains("JSON"))
        );
        assert!(
            matches!(&outcomes[2], Err(PublishFailure::Rejected(message)) if message.contains("source"))
        );
        assert_eq!(outcomes[3], Ok(()));
        let output = String::from_utf8(publisher.into_inner()).expect("utf-8 output");
        assert_eq!(output.lines().count(), 2);
    }

    struct BrokenPipe;

    impl Write for BrokenPipe {
        fn write(&mut self, _buffer: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn write_errors_are_unavailable() {
        let publisher = StdoutPublisher::with_writer(BrokenPipe);
        let events = vec![event("order-1", "{}"), event("order-2", "nope")];
        let outcomes = run(publisher.publish(&events));
        assert!(
            matches!(&outcomes[0], Err(PublishFailure::Unavailable(message)) if message.contains("stdout"))
        );
        assert!(matches!(&outcomes[1], Err(PublishFailure::Rejected(_))));
        assert!(!publisher.is_connected());
    }
}
