//! The Redis publisher's [`Target`]: a stream of the test's own on the real
//! server, read back from its start with `XREAD`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::OutboundEvent;
use outbox_relay::publish::Publisher;
use outbox_relay::publish::redis::{RedisEndpoint, RedisPublisher, RedisPublisherConfig};
use redis::aio::MultiplexedConnection;

use outbox_testkit::{TcpProxy, redis as redis_kit, unique_name};

use crate::{Delivered, LossyClient, LossyTarget, Target};

/// An entry as read back: its id and its fields.
pub(crate) struct Entry {
    pub(crate) fields: HashMap<String, String>,
}

pub(crate) struct RedisTarget {
    connection: MultiplexedConnection,
    stream: String,
}

fn publisher_for(url: &str, response_timeout: Duration) -> RedisPublisher {
    let mut config = RedisPublisherConfig::new(RedisEndpoint::Server(url.to_owned()));
    config.response_timeout = response_timeout;
    config.connect_timeout = Duration::from_secs(3);
    RedisPublisher::new(config).expect("redis publisher")
}

impl Target for RedisTarget {
    type Raw = Entry;
    const RECOVER_CHECKS: bool = true;

    async fn new() -> Self {
        RedisTarget {
            connection: redis_kit::require_redis().await,
            stream: unique_name("publisher"),
        }
    }

    fn destination(&self) -> String {
        self.stream.clone()
    }

    fn publisher(&self) -> Box<dyn Publisher> {
        Box::new(publisher_for(
            &redis_kit::redis_url(),
            Duration::from_secs(10),
        ))
    }

    fn unreachable() -> Box<dyn Publisher> {
        // Nothing listens on port 1; the password must not show.
        Box::new(publisher_for(
            "redis://guest:guest@127.0.0.1:1",
            Duration::from_secs(2),
        ))
    }

    async fn read(&self, count: usize) -> Vec<Delivered<Entry>> {
        let mut connection = self.connection.clone();
        let entries = redis_kit::read_stream(
            &mut connection,
            &self.stream,
            count,
            Duration::from_secs(60),
        )
        .await;
        assert!(
            entries.len() >= count,
            "only {} of {count} entries arrived",
            entries.len()
        );
        entries
            .into_iter()
            .map(|(_id, fields)| {
                let attributes = fields
                    .iter()
                    .filter_map(|(field, value)| {
                        let attribute = outbox::wire::attribute_of_redis_field(field)?;
                        Some((attribute.to_owned(), value.clone()))
                    })
                    .collect();
                let data = serde_json::from_str(&fields["data"]).expect("data is the payload");
                Delivered {
                    attributes,
                    data,
                    raw: Entry { fields },
                }
            })
            .collect()
    }

    /// One stream, so entry order is publication order; `data` holds the
    /// payload bytes as stored, and the trace context is also a plain
    /// field.
    fn check_transport(delivered: &[Delivered<Entry>], events: &[&OutboundEvent]) {
        for (message, event) in delivered.iter().zip(events) {
            let fields = &message.raw.fields;
            assert_eq!(fields["data"], *event.payload, "data = payload bytes");
            assert_eq!(
                fields.get("ce_id"),
                Some(&event.event_id.to_string()),
                "entry order is publication order"
            );
            for trace in ["traceparent", "tracestate"] {
                assert_eq!(fields.get(trace), event.headers.get(trace), "{trace}");
            }
        }
    }

    async fn remove(mut self) {
        redis_kit::delete_keys(&mut self.connection, &[self.stream.clone()]).await;
    }
}

impl LossyTarget for RedisTarget {
    /// One connection writes pipelines in the order they are handed over.
    const ORDER_IN_FLIGHT: bool = true;

    /// Through a proxy: the connection open at `start_losing` carries
    /// nothing more toward the server, so its pipelines go unanswered until
    /// `response_timeout`; a new connection works.
    async fn lossy(&self) -> LossyClient {
        let url = redis_kit::redis_url();
        let proxy = Arc::new(TcpProxy::in_front_of(&url).await);
        let publisher = publisher_for(&proxy.route(&url), Duration::from_secs(1));
        let holding = Arc::clone(&proxy);
        LossyClient {
            publisher: Arc::new(publisher),
            start_losing: Box::new(move || holding.hold_open_connections_to_server_after(0)),
            break_client: Box::new(|| {}),
            _transport: Some(Box::new(proxy)),
        }
    }
}
