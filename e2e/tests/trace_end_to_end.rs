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

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;
use lapin::{Channel, Connection};
use outbox_inbox::Inbox;
use outbox_inbox::rabbitmq::{RabbitMqConsumerConfig, RabbitMqInboxConsumer};
use outbox_relay::publish::Publisher;
use outbox_relay::publish::rabbitmq::{RabbitMqPublisher, RabbitMqPublisherConfig};
use outbox_relay::{RelayConfig, RelayService};
use outbox_testkit::rabbitmq::{
    amqp_url, declare_bound_queue, declare_topic_exchange, delete_topology, require_rabbitmq,
};
use outbox_testkit::unique_name;
use support::trace::{
    CONSUMER, WAIT, assert_handler_continues_the_producer, enqueue_in_producer_span,
    export_spans_to_memory, handled_spans, parcel_handler, stop_consumer_then_relay,
};
use tokio_util::sync::CancellationToken;

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
        let connection = require_rabbitmq().await;
        let channel = connection.create_channel().await.expect("channel");
        let exchange = unique_name("trace-x");
        declare_topic_exchange(&channel, &exchange).await;
        let topology = Topology {
            connection,
            channel,
            exchange,
            inbox_queue: unique_name("trace-inbox"),
            inspect_queue: unique_name("trace-inspect"),
        };
        for queue in [&topology.inbox_queue, &topology.inspect_queue] {
            declare_bound_queue(&topology.channel, &topology.exchange, queue).await;
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
        let dead_letter_exchange = format!("{}.dlx", self.inbox_queue);
        delete_topology(
            &self.connection,
            &[&self.inbox_queue, &self.inspect_queue, &dead_letter_queue],
            &[&self.exchange, &dead_letter_exchange],
        )
        .await;
        let _ = self.connection.close(200, "OK".into()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_span_continues_the_producers_trace() {
    let (provider, exporter) = export_spans_to_memory();
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let topology = Topology::declare().await;
    let produced = enqueue_in_producer_span(db.pool(), &topology.exchange).await;

    // The relay, in-process, publishing to the real RabbitMQ.
    let mut relay_config = RelayConfig::default();
    relay_config.poll_interval_max = Duration::from_millis(50);
    let publisher = RabbitMqPublisher::new(RabbitMqPublisherConfig::new(amqp_url()))
        .expect("rabbitmq publisher");
    relay_config.instance_id = Some(unique_name("relay"));
    let publisher: Arc<dyn Publisher> = Arc::new(publisher);
    let relay = RelayService::builder()
        .database(db.pool().clone())
        .broker(publisher)
        .config(relay_config)
        .build()
        .expect("a relay");
    let stop_relay = CancellationToken::new();
    let relay_task = tokio::spawn(relay.run(stop_relay.clone()));

    // The real message carries the producer's traceparent both ways.
    let headers = topology.published_headers().await;
    assert_eq!(
        headers.get("cloudEvents:traceparent"),
        Some(&produced.traceparent),
        "{headers:?}"
    );
    assert_eq!(
        headers.get("traceparent"),
        Some(&produced.traceparent),
        "{headers:?}"
    );
    assert_eq!(
        headers.get("cloudEvents:id"),
        Some(&produced.event_id),
        "{headers:?}"
    );

    // The consumer: the RabbitMQ inbox adapter.
    let handled = Arc::new(tokio::sync::Notify::new());
    let inbox = Inbox::new(db.pool().clone(), CONSUMER).expect("inbox");
    let consumer = RabbitMqInboxConsumer::new(
        inbox,
        parcel_handler(Arc::clone(&handled)),
        RabbitMqConsumerConfig::new(amqp_url(), topology.inbox_queue.clone()),
    )
    .expect("consumer");
    let stop_consumer = CancellationToken::new();
    let consumer_task = tokio::spawn(consumer.run(stop_consumer.clone()));
    let (handler_span, producer_exported) =
        handled_spans(&provider, &exporter, &handled, &produced.event_id).await;

    let stats =
        stop_consumer_then_relay(stop_consumer, consumer_task, stop_relay, relay_task).await;
    topology.delete().await;

    assert_eq!(stats.processed, 1);
    assert_handler_continues_the_producer(&handler_span, &produced.producer, &producer_exported);
}
