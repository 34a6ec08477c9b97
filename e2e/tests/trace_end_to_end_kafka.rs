//! W3C trace context from the producer's span to the consumer's, end to end
//! on real PostgreSQL and the Kafka-API broker: an event enqueued inside a
//! producer span carries its `traceparent`; the relay publishes it as the
//! `ce_traceparent` and `traceparent` record headers; the Kafka inbox
//! adapter handles it in an `inbox.handle` span that the OpenTelemetry SDK
//! exports with the producer's trace id and the producer span as parent.
//!
//! The broker is found through `OUTBOX_TEST_KAFKA_BROKERS` (default
//! `127.0.0.1:9092`); a broker that cannot be reached fails the test with a
//! message naming it.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::Inbox;
use outbox_inbox::kafka::{KafkaConsumerConfig, KafkaInboxConsumer};
use outbox_relay::publish::Publisher;
use outbox_relay::publish::kafka::{KafkaPublisher, KafkaPublisherConfig};
use outbox_relay::{RelayConfig, RelayService};
use support::trace::{
    CONSUMER, WAIT, assert_handler_continues_the_producer, enqueue_in_producer_span,
    export_spans_to_memory, handled_spans, parcel_handler, stop_consumer_then_relay,
};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_handler_span_continues_the_producers_trace() {
    let (provider, exporter) = export_spans_to_memory();
    let brokers = outbox_testkit::kafka::require_kafka().await;
    let topic = outbox_testkit::unique_name("trace");
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let produced = enqueue_in_producer_span(db.pool(), &topic).await;

    // The relay, in-process, publishing to the real broker; it creates the
    // topic on the first publish.
    let mut publisher_config = KafkaPublisherConfig::new(vec![brokers.clone()]);
    publisher_config.create_missing_topics = true;
    let publisher = KafkaPublisher::new(publisher_config).expect("kafka publisher");
    if let Err(error) = publisher.check_connection().await {
        panic!(
            "the Kafka broker at {brokers} is not reachable ({error}); start the test services with `scripts/test.sh --services-only`"
        );
    }
    let mut relay_config = RelayConfig::default();
    relay_config.poll_interval_max = Duration::from_millis(50);
    relay_config.instance_id = Some(format!("relay-{topic}"));
    let publisher: Arc<dyn Publisher> = Arc::new(publisher);
    let relay = RelayService::builder()
        .database(db.pool().clone())
        .broker(publisher)
        .config(relay_config)
        .build()
        .expect("a relay");
    let stop_relay = CancellationToken::new();
    let relay_task = tokio::spawn(relay.run(stop_relay.clone()));

    // The consumer subscribes once the relay has created the topic and
    // published the event; it reads the topic from the start.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let published: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'")
                .fetch_one(db.pool())
                .await
                .expect("count published");
        if published == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the relay did not publish the event to {topic}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The consumer: the Kafka inbox adapter.
    let handled = Arc::new(tokio::sync::Notify::new());
    let inbox = Inbox::new(db.pool().clone(), CONSUMER).expect("inbox");
    let mut consumer_config =
        KafkaConsumerConfig::new(vec![brokers], format!("group-{topic}"), vec![topic.clone()]);
    consumer_config.client_options = BTreeMap::from([
        // Groups on tansu form slowly with the default session timeout.
        ("session.timeout.ms".to_owned(), "6000".to_owned()),
        ("heartbeat.interval.ms".to_owned(), "1000".to_owned()),
    ]);
    let consumer =
        KafkaInboxConsumer::new(inbox, parcel_handler(Arc::clone(&handled)), consumer_config)
            .expect("consumer");
    let stop_consumer = CancellationToken::new();
    let consumer_task = tokio::spawn(consumer.run(stop_consumer.clone()));
    let (handler_span, producer_exported) =
        handled_spans(&provider, &exporter, &handled, &produced.event_id).await;

    let stats =
        stop_consumer_then_relay(stop_consumer, consumer_task, stop_relay, relay_task).await;

    assert_eq!(stats.processed, 1);
    assert_handler_continues_the_producer(&handler_span, &produced.producer, &producer_exported);
}
