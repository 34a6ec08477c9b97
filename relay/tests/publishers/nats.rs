//! The NATS JetStream publisher's [`Target`]: a stream of the test's own on
//! the real server, taking the one subject its events go to, read back in
//! stream order.

use std::sync::Arc;
use std::time::Duration;

use outbox::wire;
use outbox_relay::OutboundEvent;
use outbox_relay::publish::Publisher;
use outbox_relay::publish::nats::{NatsCredentials, NatsPublisher, NatsPublisherConfig};

use outbox_testkit::nats::{StoredMessage, TestStream, require_nats};
use outbox_testkit::{TcpProxy, nats as nats_kit, unique_name};

use crate::{Delivered, LossyClient, LossyTarget, Target};

pub(crate) struct NatsTarget {
    stream: TestStream,
    subject: String,
}

fn publisher_for(server: &str, ack_timeout: Duration) -> NatsPublisher {
    let mut config = NatsPublisherConfig::new(vec![server.to_owned()]);
    config.ack_timeout = ack_timeout;
    config.connect_timeout = Duration::from_secs(3);
    NatsPublisher::new(config).expect("nats publisher")
}

impl Target for NatsTarget {
    type Raw = StoredMessage;
    const RECOVER_CHECKS: bool = true;

    async fn new() -> Self {
        let jetstream = require_nats().await;
        let subject = unique_name("publisher");
        let stream = TestStream::create(&jetstream, &subject, std::slice::from_ref(&subject)).await;
        NatsTarget { stream, subject }
    }

    fn destination(&self) -> String {
        self.subject.clone()
    }

    fn publisher(&self) -> Box<dyn Publisher> {
        Box::new(publisher_for(&nats_kit::nats_url(), Duration::from_secs(5)))
    }

    fn unreachable() -> Box<dyn Publisher> {
        // Nothing listens on port 1; the password must not show.
        let mut config = NatsPublisherConfig::new(vec!["nats://127.0.0.1:1".to_owned()]);
        config.credentials = NatsCredentials::UserPassword {
            user: "guest".to_owned(),
            password: "guest".to_owned(),
        };
        config.ack_timeout = Duration::from_secs(2);
        config.connect_timeout = Duration::from_secs(2);
        Box::new(NatsPublisher::new(config).expect("nats publisher"))
    }

    async fn read(&self, count: usize) -> Vec<Delivered<StoredMessage>> {
        let messages = self.stream.messages(count, Duration::from_secs(60)).await;
        assert!(
            messages.len() >= count,
            "only {} of {count} messages arrived",
            messages.len()
        );
        messages
            .into_iter()
            .map(|message| {
                let attributes = message
                    .headers
                    .iter()
                    .filter_map(|(name, value)| {
                        let attribute = wire::attribute_of_nats_header(name)?;
                        let value = wire::percent_decode_header_value(value)
                            .unwrap_or_else(|| panic!("{name}: {value} is not percent-encoded"));
                        Some((attribute.to_owned(), value))
                    })
                    .collect();
                let data = serde_json::from_slice(&message.payload).expect("payload is JSON");
                Delivered {
                    attributes,
                    data,
                    raw: message,
                }
            })
            .collect()
    }

    /// One stream, so stream order is publication order; the payload is
    /// the event's bytes, `Nats-Msg-Id` its id, and the trace context is
    /// also a plain header.
    fn check_transport(delivered: &[Delivered<StoredMessage>], events: &[&OutboundEvent]) {
        for (message, event) in delivered.iter().zip(events) {
            let raw = &message.raw;
            assert_eq!(raw.payload, event.payload.as_bytes(), "payload bytes");
            assert_eq!(
                raw.headers.get(wire::NATS_MSG_ID_HEADER),
                Some(&event.event_id.to_string()),
                "stream order is publication order"
            );
            for trace in ["traceparent", "tracestate"] {
                assert_eq!(raw.headers.get(trace), event.headers.get(trace), "{trace}");
            }
        }
    }

    async fn remove(self) {
        self.stream.delete().await;
    }
}

impl LossyTarget for NatsTarget {
    /// One client writes its messages to its one connection in order, and
    /// never writes on another.
    const ORDER_IN_FLIGHT: bool = true;

    /// Through a proxy: the connection open at `start_losing` carries
    /// nothing more toward the server; `break_client` closes it, and new
    /// connections are forwarded as usual. The client's own reconnect
    /// fails, its sends fail, and a send on the next client waits for them.
    /// (These sends are small enough to be written before the cut: the
    /// case of sends still queued in the client when its connection is
    /// lost is `publish_nats.rs`'s
    /// `a_client_cut_off_mid_batch_never_writes_what_was_queued_for_it`.)
    async fn lossy(&self) -> LossyClient {
        let url = nats_kit::nats_url();
        let proxy = Arc::new(TcpProxy::in_front_of(&url).await);
        let publisher = publisher_for(&proxy.route(&url), Duration::from_secs(2));
        let holding = Arc::clone(&proxy);
        let breaking = Arc::clone(&proxy);
        LossyClient {
            publisher: Arc::new(publisher),
            start_losing: Box::new(move || holding.hold_open_connections_to_server_after(0)),
            break_client: Box::new(move || breaking.drop_connections()),
            _transport: Some(Box::new(proxy)),
        }
    }
}
