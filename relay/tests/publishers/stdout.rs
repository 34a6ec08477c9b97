//! The stdout publisher's [`Target`]: JSON lines written into a buffer the
//! test reads back; "unreachable" is a writer that fails.

use std::io::Write;
use std::sync::{Arc, Mutex};

use outbox_relay::OutboundEvent;
use outbox_relay::publish::{Publisher, StdoutPublisher};

use crate::{Delivered, Target};

/// A writer into a buffer the test keeps.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer whose reader went away.
struct BrokenPipe;

impl Write for BrokenPipe {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
}

pub(crate) struct StdoutTarget {
    buffer: Shared,
}

impl Target for StdoutTarget {
    type Raw = ();
    const RECOVER_CHECKS: bool = false;

    async fn new() -> Self {
        StdoutTarget {
            buffer: Shared::default(),
        }
    }

    fn destination(&self) -> String {
        "orders".to_owned()
    }

    fn publisher(&self) -> Box<dyn Publisher> {
        Box::new(StdoutPublisher::with_writer(self.buffer.clone()))
    }

    fn unreachable() -> Box<dyn Publisher> {
        Box::new(StdoutPublisher::with_writer(BrokenPipe))
    }

    /// Every line is one structured CloudEvent: the attributes as members,
    /// the payload as `data`.
    async fn read(&self, count: usize) -> Vec<Delivered<()>> {
        let bytes = self.buffer.0.lock().expect("buffer").clone();
        let text = String::from_utf8(bytes).expect("UTF-8 lines");
        let delivered: Vec<Delivered<()>> = text
            .lines()
            .map(|line| {
                let serde_json::Value::Object(mut members) =
                    serde_json::from_str(line).expect("a JSON line")
                else {
                    panic!("not a JSON object: {line}");
                };
                let data = members.remove("data").expect("data member");
                let attributes = members
                    .into_iter()
                    .map(|(name, value)| match value {
                        serde_json::Value::String(text) => (name, text),
                        other => (name, other.to_string()),
                    })
                    .collect();
                Delivered {
                    attributes,
                    data,
                    raw: (),
                }
            })
            .collect();
        assert_eq!(delivered.len(), count, "lines written");
        delivered
    }

    /// One line per event, in publication order.
    fn check_transport(delivered: &[Delivered<()>], events: &[&OutboundEvent]) {
        let ids: Vec<&String> = delivered
            .iter()
            .map(|message| &message.attributes["id"])
            .collect();
        let published: Vec<String> = events
            .iter()
            .map(|event| event.event_id.to_string())
            .collect();
        assert!(ids.iter().zip(&published).all(|(id, event)| *id == event));
    }

    async fn remove(self) {}
}
