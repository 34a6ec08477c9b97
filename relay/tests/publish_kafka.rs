//! `KafkaPublisher` against a real Kafka-API broker (tansu on
//! 127.0.0.1:9092 by default; `OUTBOX_TEST_KAFKA_BROKERS` overrides).
//! Start it with `scripts/test.sh --services-only`.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use outbox_relay::OutboundEvent;
use outbox_relay::publish::{KafkaPublisher, KafkaPublisherConfig, PublishFailure, Publisher};
use outbox_testkit::{kafka, unique_name};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use support::outbound::outbound_event;
use uuid::Uuid;

/// Partition count of `topic`, or `None` when the broker does not know it.
/// Never creates the topic.
fn partition_count(brokers: &str, topic: &str) -> Option<usize> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("outbox-test-probe-{}", Uuid::now_v7()))
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("kafka consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let entry = metadata
        .topics()
        .iter()
        .find(|entry| entry.name() == topic)?;
    if entry.error().is_some() {
        return None;
    }
    Some(entry.partitions().len())
}

/// Event `sequence` of `aggregate_id` for `topic`, always of type
/// `order.updated`.
fn event(topic: &str, aggregate_id: &str, sequence: usize) -> OutboundEvent {
    OutboundEvent {
        event_type: "order.updated".to_owned(),
        ..outbound_event(topic, aggregate_id, sequence)
    }
}

fn publisher(brokers: &str) -> KafkaPublisher {
    let mut config = KafkaPublisherConfig::new(brokers.split(',').map(str::to_owned).collect());
    config.message_timeout = Duration::from_secs(20);
    KafkaPublisher::new(config).expect("kafka publisher")
}

fn header<'a>(message: &'a BorrowedMessage<'_>, key: &str) -> Option<&'a str> {
    let headers = message.headers()?;
    headers
        .iter()
        .find(|header| header.key == key)
        .and_then(|header| header.value)
        .map(|value| std::str::from_utf8(value).expect("utf-8 header"))
}

struct Received {
    value: String,
    headers: HashMap<String, String>,
}

/// Read `count` messages of `topic` from the beginning, as a consumer group.
async fn consume(brokers: &str, topic: &str, count: usize) -> Vec<Received> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("outbox-test-{}", Uuid::now_v7()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        // tansu answers the first JoinGroup after about half the session
        // timeout: 23 s with the default 45 s, 3.6 s with 6 s.
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "1000")
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("kafka consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut received = Vec::with_capacity(count);
    while received.len() < count {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let message = match tokio::time::timeout(remaining, consumer.recv()).await {
            Ok(message) => message.expect("consume"),
            Err(_) => panic!(
                "only {} of {count} messages arrived on {topic} within 60 s",
                received.len()
            ),
        };
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|header| {
                        let value = header
                            .value
                            .map(|value| String::from_utf8(value.to_vec()).expect("utf-8 header"));
                        (header.key.to_owned(), value.unwrap_or_default())
                    })
                    .collect()
            })
            .unwrap_or_default();
        received.push(Received {
            value: String::from_utf8(message.payload().expect("message value").to_vec())
                .expect("utf-8 value"),
            headers,
        });
        // Also exercise the borrowed accessors once.
        assert!(header(&message, "ce_id").is_some());
    }
    received
}

/// librdkafka refuses a record over `message.max.bytes` before sending it:
/// the event is rejected naming its topic, the later events of its
/// aggregate are held unsent, and the other aggregates' events go out.
#[tokio::test]
async fn oversized_message_is_rejected_and_holds_only_its_aggregate() {
    let brokers = kafka::require_kafka().await;
    let topic = unique_name("oversized");
    kafka::create_topic(&brokers, &topic, 1).await;
    let mut config = KafkaPublisherConfig::new(vec![brokers.clone()]);
    config
        .client_options
        .insert("message.max.bytes".to_owned(), "10000".to_owned());
    let publisher = KafkaPublisher::new(config).expect("kafka publisher");

    let mut events: Vec<OutboundEvent> = (0..6)
        .map(|sequence| {
            let aggregate = if sequence % 2 == 0 {
                "order-1"
            } else {
                "order-2"
            };
            event(&topic, aggregate, sequence)
        })
        .collect();
    events[2].payload = format!(r#"{{"blob":"{}"}}"#, "x".repeat(20 * 1024)).into();
    let outcomes = publisher.publish(&events).await;
    match &outcomes[2] {
        Err(PublishFailure::Rejected(message)) => {
            assert!(message.contains("too large"), "{message}");
            assert!(message.contains("20491 payload bytes"), "{message}");
            assert!(message.contains("message.max.bytes of 10000"), "{message}");
            assert!(message.contains(&topic), "{message}");
        }
        other => panic!("oversized event: expected Rejected, got {other:?}"),
    }
    assert!(
        matches!(outcomes[4], Err(PublishFailure::Held(_))),
        "the later event of the oversized one's aggregate is held: {:?}",
        outcomes[4]
    );
    for index in [0, 1, 3, 5] {
        assert_eq!(outcomes[index], Ok(()), "event {index}");
    }
    let received = consume(&brokers, &topic, 4).await;
    assert!(received.iter().all(|message| message.value.len() < 10_000));
}

#[tokio::test]
async fn missing_topic_is_rejected_naming_it_without_creating_it() {
    let brokers = kafka::require_kafka().await;
    let existing = unique_name("existing");
    kafka::create_topic(&brokers, &existing, 1).await;
    let missing = unique_name("missing");
    let publisher = publisher(&brokers);

    let events = vec![
        event(&missing, "order-1", 0),
        event(&existing, "order-2", 1),
        event(&missing, "order-3", 2),
    ];
    let outcomes = publisher.publish(&events).await;
    for index in [0, 2] {
        match &outcomes[index] {
            Err(PublishFailure::Rejected(message)) => {
                assert!(message.contains(&missing), "names the topic: {message}");
                assert!(message.contains("does not exist"), "{message}");
            }
            other => panic!("event {index}: expected Rejected, got {other:?}"),
        }
    }
    assert_eq!(outcomes[1], Ok(()));

    // Still missing on the next publish, and the lookups create nothing.
    let again = publisher.publish(&events[..1]).await;
    assert!(
        matches!(&again[0], Err(PublishFailure::Rejected(message)) if message.contains(&missing))
    );
    assert_eq!(
        partition_count(&brokers, &missing),
        None,
        "the lookup must not create the topic"
    );

    // A missing topic is not remembered: once it exists, the next publish
    // (a retry, say) reaches it.
    kafka::create_topic(&brokers, &missing, 1).await;
    let retried = publisher.publish(&events[..1]).await;
    assert_eq!(retried, vec![Ok(())], "published once the topic exists");
}

#[tokio::test]
async fn missing_topic_is_created_when_enabled() {
    let brokers = kafka::require_kafka().await;
    let topic = unique_name("created");
    let mut config = KafkaPublisherConfig::new(vec![brokers.clone()]);
    config.create_missing_topics = true;
    config.new_topic_partitions = 2;
    config.message_timeout = Duration::from_secs(20);
    let publisher = KafkaPublisher::new(config).expect("kafka publisher");

    let events: Vec<OutboundEvent> = (0..10)
        .map(|sequence| event(&topic, "order-1", sequence))
        .collect();
    let outcomes = publisher.publish(&events).await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(partition_count(&brokers, &topic), Some(2));
    let received = consume(&brokers, &topic, events.len()).await;
    assert_eq!(received.len(), events.len());
}

#[tokio::test]
async fn bad_client_option_fails_at_creation() {
    let mut config = KafkaPublisherConfig::new(vec![kafka::brokers()]);
    config
        .client_options
        .insert("linger.msec".to_owned(), "5".to_owned());
    let error = KafkaPublisher::new(config).expect_err("unknown option");
    assert!(error.to_string().contains("linger.msec"), "{error}");

    let mut config = KafkaPublisherConfig::new(vec![kafka::brokers()]);
    config
        .client_options
        .insert("acks".to_owned(), "several".to_owned());
    let error = KafkaPublisher::new(config).expect_err("invalid value");
    assert!(error.to_string().contains("acks"), "{error}");
}

fn config_with_option(name: &str, value: &str) -> KafkaPublisherConfig {
    let mut config = KafkaPublisherConfig::new(vec![kafka::brokers()]);
    config
        .client_options
        .insert(name.to_owned(), value.to_owned());
    config
}

/// The publisher keeps `acks=all`, idempotence and key-based partitioning
/// itself: a library user who builds it directly cannot turn them off
/// through `client_options`.
#[test]
fn client_options_that_weaken_the_guarantee_are_refused_by_the_publisher() {
    let cases = [
        (
            "acks",
            "1",
            "would weaken acknowledgements; the relay requires acks=all",
        ),
        ("acks", "0", "would weaken acknowledgements"),
        ("request.required.acks", "1", "acks=all"),
        ("topic.acks", "0", "acks=all"),
        (
            "enable.idempotence",
            "false",
            "would turn the idempotent producer off",
        ),
        ("enable.idempotence", "0", "idempotent producer"),
        ("partitioner", "random", "lose their order"),
    ];
    for (name, value, reason) in cases {
        let error = KafkaPublisher::new(config_with_option(name, value))
            .expect_err("an option that weakens the guarantee must be refused");
        match &error {
            outbox_relay::Error::Config { reason: text, .. } => {
                assert!(
                    text.contains(&format!("kafka client option `{name}`")),
                    "{name} = {value}: {error}"
                );
                assert!(text.contains(&format!("\"{value}\"")), "{error}");
                assert!(text.contains(reason), "{name} = {value}: {error}");
            }
            other => panic!("{name} = {value}: expected Error::Config, got {other:?}"),
        }
    }
}

/// Overrides that would break ordering under idempotence and that librdkafka
/// refuses itself: the publisher relies on that refusal, and this test
/// notices if a librdkafka upgrade stops refusing them.
#[test]
fn librdkafka_refuses_overrides_that_break_ordering_under_idempotence() {
    let cases = [
        (
            "max.in.flight.requests.per.connection",
            "6",
            "max.in.flight",
        ),
        ("max.in.flight", "100", "max.in.flight"),
        ("retries", "0", "retries"),
        ("message.send.max.retries", "0", "retries"),
        ("queuing.strategy", "lifo", "queuing.strategy"),
        (
            "queue.buffering.backpressure.threshold",
            "2",
            "backpressure",
        ),
    ];
    for (name, value, named) in cases {
        let error = KafkaPublisher::new(config_with_option(name, value))
            .expect_err("librdkafka must refuse it under idempotence");
        let text = error.to_string();
        assert!(
            text.contains(named) && text.contains("enable.idempotence"),
            "{name} = {value}: {text}"
        );
    }
}

/// Options that keep the guarantee, including its own settings restated,
/// are accepted and the publisher delivers.
#[tokio::test]
async fn client_options_that_keep_the_guarantee_are_accepted_and_deliver() {
    let brokers = kafka::require_kafka().await;
    let topic = unique_name("options");
    kafka::create_topic(&brokers, &topic, 2).await;
    let mut config = KafkaPublisherConfig::new(vec![brokers.clone()]);
    for (name, value) in [
        ("acks", "all"),
        ("request.required.acks", "-1"),
        ("enable.idempotence", "true"),
        ("max.in.flight.requests.per.connection", "5"),
        ("partitioner", "murmur2"),
        ("linger.ms", "5"),
    ] {
        config
            .client_options
            .insert(name.to_owned(), value.to_owned());
    }
    let publisher = KafkaPublisher::new(config).expect("harmless options are accepted");
    let events: Vec<OutboundEvent> = (0..6)
        .map(|sequence| event(&topic, "order-1", sequence))
        .collect();
    let outcomes = publisher.publish(&events).await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let received = consume(&brokers, &topic, events.len()).await;
    let values: Vec<&str> = received
        .iter()
        .map(|message| message.value.as_str())
        .collect();
    let sent: Vec<&str> = events.iter().map(|event| &*event.payload).collect();
    assert_eq!(values, sent, "one key: one partition, in order");
}

/// librdkafka is built with OpenSSL: TLS and SASL/SCRAM settings are
/// accepted, and a TLS client never publishes to a plaintext listener (its
/// handshake fails) but reports the broker unavailable.
#[tokio::test]
async fn tls_settings_are_accepted_and_a_plaintext_listener_fails_the_handshake() {
    let brokers = kafka::require_kafka().await;
    let topic = unique_name("tls");
    kafka::create_topic(&brokers, &topic, 1).await;

    let mut scram = KafkaPublisherConfig::new(vec![brokers.clone()]);
    for (key, value) in [
        ("security.protocol", "sasl_ssl"),
        ("sasl.mechanisms", "SCRAM-SHA-512"),
        ("sasl.username", "relay"),
        ("sasl.password", "secret"),
    ] {
        scram
            .client_options
            .insert(key.to_owned(), value.to_owned());
    }
    KafkaPublisher::new(scram).expect("a SASL_SSL / SCRAM client can be created");

    let mut config = KafkaPublisherConfig::new(vec![brokers.clone()]);
    config
        .client_options
        .insert("security.protocol".to_owned(), "ssl".to_owned());
    config.message_timeout = Duration::from_secs(2);
    config.metadata_timeout = Duration::from_secs(1);
    let publisher = KafkaPublisher::new(config).expect("a TLS client can be created");
    let outcomes = publisher.publish(&[event(&topic, "order-1", 0)]).await;
    assert!(
        matches!(&outcomes[0], Err(PublishFailure::Unavailable(_))),
        "TLS against a plaintext listener: {outcomes:?}"
    );
    assert!(!publisher.is_connected());
}

/// librdkafka is built with zstd: compressed batches reach the broker and
/// consumers read them back.
#[tokio::test]
async fn zstd_compressed_batches_arrive() {
    let brokers = kafka::require_kafka().await;
    let topic = unique_name("zstd");
    kafka::create_topic(&brokers, &topic, 1).await;
    let mut config = KafkaPublisherConfig::new(vec![brokers.clone()]);
    config
        .client_options
        .insert("compression.type".to_owned(), "zstd".to_owned());
    let publisher = KafkaPublisher::new(config).expect("a zstd producer can be created");
    let events: Vec<OutboundEvent> = (0..20)
        .map(|sequence| event(&topic, "order-1", sequence))
        .collect();
    let outcomes = publisher.publish(&events).await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let received = consume(&brokers, &topic, events.len()).await;
    let values: Vec<&str> = received
        .iter()
        .map(|message| message.value.as_str())
        .collect();
    let sent: Vec<&str> = events.iter().map(|event| &*event.payload).collect();
    assert_eq!(values, sent, "every payload, in order");
}

#[tokio::test]
async fn check_connection_reports_a_live_broker() {
    let brokers = kafka::require_kafka().await;
    let publisher = publisher(&brokers);
    assert!(
        !publisher.is_connected(),
        "nothing known before the first contact"
    );
    publisher.check_connection().await.expect("broker answers");
    assert!(publisher.is_connected());
}

#[tokio::test]
async fn full_producer_queue_waits_instead_of_dropping() {
    let brokers = kafka::require_kafka().await;
    let topic = unique_name("queue-full");
    kafka::create_topic(&brokers, &topic, 1).await;
    let mut config = KafkaPublisherConfig::new(vec![brokers.clone()]);
    config
        .client_options
        .insert("queue.buffering.max.messages".to_owned(), "16".to_owned());
    let publisher = KafkaPublisher::new(config).expect("kafka publisher");

    let events: Vec<OutboundEvent> = (0..300)
        .map(|sequence| event(&topic, "order-1", sequence))
        .collect();
    let outcomes = publisher.publish(&events).await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let received = consume(&brokers, &topic, events.len()).await;
    let sent: Vec<&str> = events.iter().map(|event| &*event.payload).collect();
    let arrived: Vec<&str> = received
        .iter()
        .map(|message| message.value.as_str())
        .collect();
    assert_eq!(arrived, sent, "one key: arrival order = batch order");
}

#[tokio::test]
async fn a_fatal_error_fails_the_batch_as_unavailable_and_a_new_producer_delivers() {
    let brokers = kafka::require_kafka().await;
    let topic = unique_name("fatal");
    kafka::create_topic(&brokers, &topic, 1).await;
    let publisher = publisher(&brokers);
    let first = vec![event(&topic, "order-1", 0)];
    assert_eq!(publisher.publish(&first).await, vec![Ok(())]);
    assert_eq!(publisher.client_rebuilds(), 0);

    publisher
        .inject_fatal_error("fatal error injected by the test")
        .expect("inject a fatal error");
    let during = vec![event(&topic, "order-1", 1), event(&topic, "order-2", 2)];
    for outcome in publisher.publish(&during).await {
        match outcome {
            Err(PublishFailure::Unavailable(message)) => assert!(
                message.contains("fatal") && message.contains("injected by the test"),
                "{message}"
            ),
            other => panic!("expected unavailable after a fatal error, got {other:?}"),
        }
    }
    assert_eq!(
        publisher.client_rebuilds(),
        1,
        "the producer was not replaced"
    );

    // The same events, with their ids, go out through the new producer.
    assert_eq!(publisher.publish(&during).await, vec![Ok(()), Ok(())]);
    let received = consume(&brokers, &topic, 3).await;
    let ids: Vec<&str> = received
        .iter()
        .map(|message| message.headers["ce_id"].as_str())
        .collect();
    let expected: Vec<String> = first
        .iter()
        .chain(&during)
        .map(|event| event.event_id.to_string())
        .collect();
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn recover_replaces_the_producer_and_checks_the_broker() {
    let brokers = kafka::require_kafka().await;
    let publisher = publisher(&brokers);
    publisher.recover().await.expect("recover on a live broker");
    assert_eq!(publisher.client_rebuilds(), 1);

    let mut config = KafkaPublisherConfig::new(vec!["127.0.0.1:1".to_owned()]);
    config.metadata_timeout = Duration::from_secs(1);
    let unreachable = KafkaPublisher::new(config).expect("kafka publisher");
    match unreachable.recover().await {
        Err(PublishFailure::Unavailable(message)) => {
            assert!(message.contains("do not answer"), "{message}")
        }
        other => panic!("recover must fail on an unreachable broker: {other:?}"),
    }
}

/// A client option librdkafka refuses is `Error::Kafka`, which carries the
/// client's error opaquely: its message is librdkafka's, and the
/// `KafkaError` is reached by downcasting, not through a public field of
/// `rdkafka`'s type.
#[test]
fn a_client_option_librdkafka_refuses_is_a_kafka_error_with_the_client_inside() {
    let mut config = KafkaPublisherConfig::new(vec!["127.0.0.1:9".to_owned()]);
    config
        .client_options
        .insert("no.such.property".to_owned(), "1".to_owned());
    let error = match KafkaPublisher::new(config) {
        Ok(_) => panic!("librdkafka accepted an option it does not have"),
        Err(error) => error,
    };
    let outbox_relay::error::Error::Kafka(client) = &error else {
        panic!("expected Error::Kafka, got {error:?}");
    };
    assert!(
        error.to_string().contains("no.such.property"),
        "the message names the option: {error}"
    );
    assert!(
        client
            .downcast_ref::<rdkafka::error::KafkaError>()
            .is_some(),
        "the client's error is librdkafka's: {client:?}"
    );
}
