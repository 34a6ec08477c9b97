//! The RabbitMQ publisher's [`Target`]: a topic exchange of the test's own
//! on the real broker with a queue bound to it by `#`.

use std::time::Duration;

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::BasicConsumeOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use outbox_relay::OutboundEvent;
use outbox_relay::publish::{Publisher, RabbitMqPublisher, RabbitMqPublisherConfig};
use std::sync::Arc;

use outbox_testkit::{TcpProxy, rabbitmq, unique_name};

use crate::{Delivered, LossyClient, LossyTarget, Target};

pub(crate) struct RabbitMqTarget {
    connection: Connection,
    channel: Channel,
    exchange: String,
    queue: String,
}

fn publisher_for(url: &str) -> RabbitMqPublisher {
    let mut config = RabbitMqPublisherConfig::new(url);
    config.confirm_timeout = Duration::from_secs(10);
    config.connect_timeout = Duration::from_secs(3);
    RabbitMqPublisher::new(config).expect("rabbitmq publisher")
}

impl Target for RabbitMqTarget {
    type Raw = Delivery;
    const RECOVER_CHECKS: bool = true;

    async fn new() -> Self {
        let connection = rabbitmq::require_rabbitmq().await;
        let channel = connection.create_channel().await.expect("channel");
        let exchange = unique_name("publisher");
        let queue = format!("{exchange}.all");
        rabbitmq::declare_topic_exchange(&channel, &exchange).await;
        rabbitmq::declare_bound_queue(&channel, &exchange, &queue).await;
        RabbitMqTarget {
            connection,
            channel,
            exchange,
            queue,
        }
    }

    fn destination(&self) -> String {
        self.exchange.clone()
    }

    fn publisher(&self) -> Box<dyn Publisher> {
        Box::new(publisher_for(&rabbitmq::amqp_url()))
    }

    fn unreachable() -> Box<dyn Publisher> {
        // Nothing listens on port 1.
        let mut config = RabbitMqPublisherConfig::new("amqp://guest:guest@127.0.0.1:1/%2f");
        config.connect_timeout = Duration::from_secs(2);
        Box::new(RabbitMqPublisher::new(config).expect("rabbitmq publisher"))
    }

    async fn read(&self, count: usize) -> Vec<Delivered<Delivery>> {
        let mut consumer = self
            .channel
            .basic_consume(
                self.queue.as_str().into(),
                unique_name("consumer").as_str().into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("consume");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut delivered = Vec::with_capacity(count);
        while delivered.len() < count {
            let delivery = tokio::time::timeout_at(deadline, consumer.next())
                .await
                .unwrap_or_else(|_| panic!("only {} of {count} messages arrived", delivered.len()))
                .expect("the consumer ended")
                .expect("delivery");
            let attributes = rabbitmq::headers(&delivery.properties)
                .into_iter()
                .filter_map(|(name, value)| {
                    Some((name.strip_prefix("cloudEvents:")?.to_owned(), value))
                })
                .collect();
            let data = serde_json::from_slice(&delivery.data).expect("the body is the payload");
            delivered.push(Delivered {
                attributes,
                data,
                raw: delivery,
            });
        }
        delivered
    }

    /// One queue, so arrival order is publication order; routing key and
    /// `type` = event type, `message_id` = event id, persistent JSON, the
    /// timestamp of `created_at`, and the trace context as plain headers.
    fn check_transport(delivered: &[Delivered<Delivery>], events: &[&OutboundEvent]) {
        for (message, event) in delivered.iter().zip(events) {
            let delivery = &message.raw;
            let properties = &delivery.properties;
            assert_eq!(
                delivery.routing_key.as_str(),
                event.event_type,
                "routing key"
            );
            assert_eq!(
                delivery.data,
                event.payload.as_bytes(),
                "body = payload bytes"
            );
            let event_id = event.event_id.to_string();
            assert_eq!(
                properties.message_id().as_ref().map(|id| id.as_str()),
                Some(event_id.as_str())
            );
            assert_eq!(
                properties.kind().as_ref().map(|kind| kind.as_str()),
                Some(event.event_type.as_str())
            );
            assert_eq!(
                properties.content_type().as_ref().map(|kind| kind.as_str()),
                Some("application/json")
            );
            assert_eq!(*properties.delivery_mode(), Some(2), "persistent");
            assert_eq!(
                *properties.timestamp(),
                Some(u64::try_from(event.created_at.timestamp()).expect("after 1970"))
            );
            let headers = rabbitmq::headers(properties);
            for trace in ["traceparent", "tracestate"] {
                assert_eq!(headers.get(trace), event.headers.get(trace), "{trace}");
            }
        }
        let ids: Vec<String> = delivered
            .iter()
            .map(|message| message.attributes["id"].clone())
            .collect();
        let published: Vec<String> = events
            .iter()
            .map(|event| event.event_id.to_string())
            .collect();
        assert_eq!(ids, published, "one queue: publication order");
    }

    async fn remove(self) {
        rabbitmq::delete_topology(&self.connection, &[&self.queue], &[&self.exchange]).await;
        let _ = self.connection.close(200, "OK".into()).await;
    }
}

impl LossyTarget for RabbitMqTarget {
    /// One channel stores what it is given in order.
    const ORDER_IN_FLIGHT: bool = true;

    /// Through a proxy: the connection open at `start_losing` carries
    /// nothing more toward the broker (as when the broker stops reading a
    /// publisher's socket), so its sends time out after `confirm_timeout`;
    /// a new connection works.
    async fn lossy(&self) -> LossyClient {
        let proxy = Arc::new(TcpProxy::in_front_of(&rabbitmq::amqp_url()).await);
        let mut config = RabbitMqPublisherConfig::new(proxy.route(&rabbitmq::amqp_url()));
        config.confirm_timeout = Duration::from_secs(1);
        config.connect_timeout = Duration::from_secs(3);
        let holding = Arc::clone(&proxy);
        LossyClient {
            publisher: Arc::new(RabbitMqPublisher::new(config).expect("rabbitmq publisher")),
            start_losing: Box::new(move || holding.hold_open_connections_to_server_after(0)),
            break_client: Box::new(|| {}),
            _transport: Some(Box::new(proxy)),
        }
    }
}
