//! `RabbitMqPublisher` against a real RabbitMQ (127.0.0.1:5672 as
//! guest/guest by default; `OUTBOX_TEST_AMQP_URL` overrides). Start it with
//! `scripts/test.sh --services-only`.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicConsumeOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ExchangeKind};
use outbox_relay::OutboundEvent;
use outbox_relay::config::RoutingKey;
use outbox_relay::publish::{
    PublishFailure, Publisher, RabbitMqPublisher, RabbitMqPublisherConfig,
};
use outbox_testkit::{TcpProxy, rabbitmq};
use support::outbound::outbound_event;
use uuid::Uuid;

/// An exchange with one queue bound to it, both unique to the test.
struct Fixture {
    connection: Connection,
    channel: Channel,
    exchange: String,
    queue: String,
}

impl Fixture {
    async fn new(kind: ExchangeKind, binding_keys: &[&str]) -> Self {
        let connection = rabbitmq::require_rabbitmq().await;
        let channel = connection.create_channel().await.expect("channel");
        let exchange = format!("outbox-test-{}", Uuid::now_v7());
        channel
            .exchange_declare(
                exchange.as_str().into(),
                kind,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("declare exchange");
        let queue = format!("outbox-test-{}", Uuid::now_v7());
        channel
            .queue_declare(
                queue.as_str().into(),
                // Exclusive: removed when the fixture's connection closes.
                // Not auto-delete: a finished consumer must not take the
                // queue with it while the test still publishes to it.
                QueueDeclareOptions {
                    exclusive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("declare queue");
        for binding_key in binding_keys {
            channel
                .queue_bind(
                    queue.as_str().into(),
                    exchange.as_str().into(),
                    (*binding_key).into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .expect("bind queue");
        }
        Self {
            connection,
            channel,
            exchange,
            queue,
        }
    }

    /// The next `count` messages of the queue.
    async fn consume(&self, count: usize) -> Vec<Delivery> {
        let mut consumer = self
            .channel
            .basic_consume(
                self.queue.as_str().into(),
                format!("outbox-test-{}", Uuid::now_v7()).into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("consume");
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut deliveries = Vec::with_capacity(count);
        while deliveries.len() < count {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, consumer.next()).await {
                Ok(Some(delivery)) => deliveries.push(delivery.expect("delivery")),
                Ok(None) => panic!(
                    "consumer of {} ended after {} messages",
                    self.queue,
                    deliveries.len()
                ),
                Err(_) => panic!(
                    "only {} of {count} messages arrived on {} within 30 s",
                    deliveries.len(),
                    self.queue
                ),
            }
        }
        deliveries
    }

    async fn delete(self) {
        let _ = self
            .channel
            .exchange_delete(
                self.exchange.as_str().into(),
                ExchangeDeleteOptions::default(),
            )
            .await;
        let _ = self.connection.close(200, "OK".into()).await;
    }
}

/// Event `sequence` of `aggregate_id` for `exchange`, of `event_type`,
/// version 2.
fn event(exchange: &str, event_type: &str, aggregate_id: &str, sequence: usize) -> OutboundEvent {
    OutboundEvent {
        event_type: event_type.to_owned(),
        event_version: 2,
        ..outbound_event(exchange, aggregate_id, sequence)
    }
}

fn publisher_for(url: &str) -> RabbitMqPublisher {
    let mut config = RabbitMqPublisherConfig::new(url);
    config.confirm_timeout = Duration::from_secs(10);
    config.connect_timeout = Duration::from_secs(3);
    RabbitMqPublisher::new(config).expect("rabbitmq publisher")
}

fn header_text(delivery: &Delivery, key: &str) -> Option<String> {
    let headers = delivery.properties.headers().as_ref()?;
    match headers.inner().get(key)? {
        AMQPValue::LongString(value) => {
            Some(String::from_utf8(value.as_bytes().to_vec()).expect("utf-8 header"))
        }
        other => panic!("header {key} is not a long string: {other:?}"),
    }
}

fn assert_rejected(outcome: &Result<(), PublishFailure>, fragments: &[&str]) {
    match outcome {
        Err(PublishFailure::Rejected(message)) => {
            for fragment in fragments {
                assert!(
                    message.contains(fragment),
                    "{message:?} should mention {fragment:?}"
                );
            }
        }
        other => panic!("expected Rejected mentioning {fragments:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn configured_routing_key_replaces_the_event_type() {
    let fixture = Fixture::new(ExchangeKind::Direct, &["orders.all"]).await;
    let mut config = RabbitMqPublisherConfig::new(rabbitmq::amqp_url());
    config.routing_keys.insert(
        fixture.exchange.clone(),
        RoutingKey::Fixed("orders.all".to_owned()),
    );
    let publisher = RabbitMqPublisher::new(config).expect("rabbitmq publisher");

    let events = vec![
        event(&fixture.exchange, "order.created", "order-1", 0),
        event(&fixture.exchange, "order.shipped", "order-1", 1),
    ];
    assert_eq!(publisher.publish(&events).await, vec![Ok(()), Ok(())]);
    let deliveries = fixture.consume(2).await;
    for (delivery, event) in deliveries.iter().zip(&events) {
        assert_eq!(delivery.routing_key.as_str(), "orders.all");
        assert_eq!(
            delivery
                .properties
                .kind()
                .as_ref()
                .map(|kind| kind.as_str()),
            Some(event.event_type.as_str()),
            "type still carries the event type"
        );
    }
    fixture.delete().await;
}

#[tokio::test]
async fn unroutable_events_are_rejected_and_the_others_published() {
    let fixture = Fixture::new(ExchangeKind::Direct, &["order.created"]).await;
    let publisher = publisher_for(&rabbitmq::amqp_url());

    // Routable and unroutable interleaved, so that acks for several
    // messages arrive together: each return must reach its own event.
    let events: Vec<OutboundEvent> = (0..200)
        .map(|sequence| {
            let event_type = if sequence % 4 == 1 {
                "order.deleted"
            } else {
                "order.created"
            };
            event(
                &fixture.exchange,
                event_type,
                &format!("order-{sequence}"),
                sequence,
            )
        })
        .collect();
    let outcomes = publisher.publish(&events).await;
    let mut routed = Vec::new();
    for (outcome, event) in outcomes.iter().zip(&events) {
        if event.event_type == "order.deleted" {
            assert_rejected(outcome, &["unroutable", &fixture.exchange, "order.deleted"]);
        } else {
            assert_eq!(outcome, &Ok(()), "routable event {}", event.id);
            routed.push(event);
        }
    }
    let deliveries = fixture.consume(routed.len()).await;
    for (delivery, event) in deliveries.iter().zip(&routed) {
        assert_eq!(
            header_text(delivery, "cloudEvents:id"),
            Some(event.event_id.to_string())
        );
    }

    // The channel stays usable.
    let next = vec![event(&fixture.exchange, "order.created", "order-x", 0)];
    assert_eq!(publisher.publish(&next).await, vec![Ok(())]);
    fixture.delete().await;
}

#[tokio::test]
async fn missing_exchange_is_rejected_without_breaking_the_publisher() {
    let fixture = Fixture::new(ExchangeKind::Topic, &["#"]).await;
    let missing = format!("outbox-test-missing-{}", Uuid::now_v7());
    let publisher = publisher_for(&rabbitmq::amqp_url());

    let events = vec![
        event(&fixture.exchange, "order.created", "order-1", 0),
        event(&missing, "order.created", "order-2", 1),
        event(&fixture.exchange, "order.created", "order-3", 2),
        event(&missing, "order.created", "order-4", 3),
    ];
    let outcomes = publisher.publish(&events).await;
    assert_eq!(outcomes[0], Ok(()));
    assert_rejected(&outcomes[1], &[&missing, "does not exist"]);
    assert_eq!(outcomes[2], Ok(()));
    assert_rejected(&outcomes[3], &[&missing, "does not exist"]);

    // Later publishes on the same publisher work, and the missing exchange
    // is still rejected.
    let later = vec![
        event(&fixture.exchange, "order.created", "order-5", 4),
        event(&missing, "order.created", "order-6", 5),
    ];
    let outcomes = publisher.publish(&later).await;
    assert_eq!(outcomes[0], Ok(()));
    assert_rejected(&outcomes[1], &[&missing, "does not exist"]);
    let deliveries = fixture.consume(3).await;
    let ids: Vec<String> = deliveries
        .iter()
        .map(|delivery| header_text(delivery, "cloudEvents:id").expect("id"))
        .collect();
    assert_eq!(
        ids,
        vec![
            events[0].event_id.to_string(),
            events[2].event_id.to_string(),
            later[0].event_id.to_string()
        ]
    );

    // Once the exchange exists, the next publish finds it: a missing
    // exchange is not remembered.
    fixture
        .channel
        .exchange_declare(
            missing.as_str().into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare the missing exchange");
    // Fanout without queues: now unroutable rather than missing.
    let outcomes = publisher
        .publish(&[event(&missing, "order.created", "order-7", 6)])
        .await;
    assert_rejected(&outcomes[0], &["unroutable", &missing]);
    let _ = fixture
        .channel
        .exchange_delete(missing.as_str().into(), ExchangeDeleteOptions::default())
        .await;
    fixture.delete().await;
}

#[tokio::test]
async fn exchange_deleted_after_first_use_is_rejected_and_the_channel_replaced() {
    let fixture = Fixture::new(ExchangeKind::Topic, &["#"]).await;
    let doomed = format!("outbox-test-doomed-{}", Uuid::now_v7());
    fixture
        .channel
        .exchange_declare(
            doomed.as_str().into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare exchange");
    fixture
        .channel
        .exchange_bind(
            fixture.exchange.as_str().into(),
            doomed.as_str().into(),
            "".into(),
            lapin::options::ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind exchanges");
    let publisher = publisher_for(&rabbitmq::amqp_url());
    let first = vec![event(&doomed, "order.created", "order-1", 0)];
    assert_eq!(
        publisher.publish(&first).await,
        vec![Ok(())],
        "known to exist from now on"
    );

    fixture
        .channel
        .exchange_delete(doomed.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .expect("delete exchange");
    // The publisher still believes the exchange exists: RabbitMQ closes the
    // channel on the first message.
    let events = vec![
        event(&doomed, "order.created", "order-2", 1),
        event(&fixture.exchange, "order.created", "order-3", 2),
    ];
    let outcomes = publisher.publish(&events).await;
    assert_rejected(&outcomes[0], &[&doomed, "does not exist"]);
    match &outcomes[1] {
        Ok(()) | Err(PublishFailure::Unavailable(_)) => {}
        other => panic!("bystander of a closed channel: expected Ok or Unavailable, got {other:?}"),
    }

    // A fresh channel, and the exchange is looked up again.
    let later = vec![
        event(&fixture.exchange, "order.created", "order-4", 3),
        event(&doomed, "order.created", "order-5", 4),
    ];
    let outcomes = publisher.publish(&later).await;
    assert_eq!(outcomes[0], Ok(()));
    assert_rejected(&outcomes[1], &[&doomed, "does not exist"]);
    fixture.delete().await;
}

fn proxied_url(proxy: &TcpProxy) -> String {
    proxy.route(&rabbitmq::amqp_url())
}

#[tokio::test]
async fn lost_connection_is_unavailable_then_reconnected() {
    let fixture = Fixture::new(ExchangeKind::Topic, &["#"]).await;
    let proxy = TcpProxy::in_front_of(&rabbitmq::amqp_url()).await;
    let publisher = publisher_for(&proxied_url(&proxy));
    let mut sequence = 0;
    let mut next_event = || {
        sequence += 1;
        event(&fixture.exchange, "order.created", "order-1", sequence)
    };

    assert_eq!(publisher.publish(&[next_event()]).await, vec![Ok(())]);
    assert!(publisher.is_connected());
    assert_eq!(publisher.client_rebuilds(), 0);

    // Connection closed under the client, broker still reachable: at worst
    // one Unavailable publish, then the publisher reconnects by itself.
    proxy.drop_connections();
    let mut published = false;
    for attempt in 0..3 {
        match publisher.publish(&[next_event()]).await.remove(0) {
            Ok(()) => {
                published = true;
                break;
            }
            Err(PublishFailure::Unavailable(message)) => {
                eprintln!("attempt {attempt}: unavailable: {message}")
            }
            Err(other) => panic!("a lost connection is not the event's fault: {other:?}"),
        }
    }
    assert!(published, "reconnected after the connection was cut");
    assert_eq!(publisher.client_rebuilds(), 1, "one new connection");

    // Broker unreachable: every event Unavailable.
    proxy.sever();
    let mut saw_disconnected = false;
    for _ in 0..3 {
        let outcomes = publisher.publish(&[next_event(), next_event()]).await;
        for outcome in &outcomes {
            assert!(
                matches!(outcome, Err(PublishFailure::Unavailable(_))),
                "{outcome:?}"
            );
        }
        if !publisher.is_connected() {
            saw_disconnected = true;
            break;
        }
    }
    assert!(saw_disconnected, "is_connected turns false");

    // Broker reachable again: the next publish reconnects.
    proxy.restore();
    assert_eq!(publisher.publish(&[next_event()]).await, vec![Ok(())]);
    assert!(publisher.is_connected());
    fixture.delete().await;
}

#[tokio::test]
async fn a_connection_that_goes_silent_is_replaced_after_the_confirm_timeout() {
    let fixture = Fixture::new(ExchangeKind::Topic, &["#"]).await;
    let proxy = TcpProxy::in_front_of(&rabbitmq::amqp_url()).await;
    let mut config = RabbitMqPublisherConfig::new(proxied_url(&proxy));
    config.confirm_timeout = Duration::from_secs(1);
    config.connect_timeout = Duration::from_secs(3);
    let publisher = RabbitMqPublisher::new(config).expect("rabbitmq publisher");
    let first = event(&fixture.exchange, "order.created", "order-1", 0);
    assert_eq!(publisher.publish(&[first]).await, vec![Ok(())]);

    // The open connection stays up but carries nothing (as a connection
    // the broker blocked and never unblocks): the batch times out, and the
    // connection is dropped rather than used again.
    proxy.stall_connections();
    let stuck = event(&fixture.exchange, "order.created", "order-1", 1);
    match publisher
        .publish(std::slice::from_ref(&stuck))
        .await
        .remove(0)
    {
        Err(PublishFailure::Unavailable(message)) => {
            assert!(message.contains("within"), "{message}")
        }
        other => panic!("a silent connection must be unavailable, got {other:?}"),
    }
    assert_eq!(publisher.publish(&[stuck]).await, vec![Ok(())]);
    assert_eq!(publisher.client_rebuilds(), 1, "one new connection");
    fixture.delete().await;
}

#[tokio::test]
async fn recover_opens_a_fresh_connection() {
    let publisher = publisher_for(&rabbitmq::amqp_url());
    publisher.recover().await.expect("recover on a live broker");
    assert!(publisher.is_connected());
    publisher.recover().await.expect("recover again");
    assert_eq!(
        publisher.client_rebuilds(),
        1,
        "the second connection is a rebuild"
    );

    let mut config = RabbitMqPublisherConfig::new("amqp://guest:guest@127.0.0.1:1/%2f");
    config.connect_timeout = Duration::from_secs(2);
    let unreachable = RabbitMqPublisher::new(config).expect("rabbitmq publisher");
    assert!(matches!(
        unreachable.recover().await,
        Err(PublishFailure::Unavailable(_))
    ));
}

#[tokio::test]
async fn events_that_cannot_be_messages_are_rejected_before_connecting() {
    let publisher = publisher_for("amqp://guest:guest@127.0.0.1:1/%2f");
    let mut long_type = event("orders", "order.created", "order-1", 0);
    long_type.event_type = "t".repeat(300);
    let mut no_source = event("orders", "order.created", "order-2", 1);
    no_source.source = String::new();
    let outcomes = publisher.publish(&[long_type, no_source]).await;
    assert_rejected(&outcomes[0], &["255 bytes"]);
    assert_rejected(&outcomes[1], &["source"]);
}

#[tokio::test]
async fn connection_is_shared_by_concurrent_publishes() {
    let fixture = Fixture::new(ExchangeKind::Topic, &["#"]).await;
    let publisher = publisher_for(&rabbitmq::amqp_url());
    let batches: Vec<Vec<OutboundEvent>> = (0..4)
        .map(|batch| {
            (0..50)
                .map(|sequence| {
                    event(
                        &fixture.exchange,
                        "order.created",
                        &format!("order-{batch}"),
                        sequence,
                    )
                })
                .collect()
        })
        .collect();
    let outcomes =
        futures::future::join_all(batches.iter().map(|batch| publisher.publish(batch))).await;
    for batch_outcomes in outcomes {
        assert!(
            batch_outcomes.iter().all(Result::is_ok),
            "{batch_outcomes:?}"
        );
    }
    let deliveries = fixture.consume(200).await;
    let mut last: HashMap<String, u64> = HashMap::new();
    for delivery in &deliveries {
        let payload: serde_json::Value =
            serde_json::from_slice(&delivery.data).expect("JSON payload");
        let aggregate = payload["aggregate"].as_str().expect("aggregate").to_owned();
        let sequence = payload["sequence"].as_u64().expect("sequence");
        if let Some(previous) = last.insert(aggregate.clone(), sequence) {
            assert!(
                previous < sequence,
                "{aggregate}: {sequence} after {previous}"
            );
        }
    }
    fixture.delete().await;
}

#[tokio::test]
async fn amqps_handshake_failure_is_unavailable() {
    // RabbitMQ's plain AMQP port does not speak TLS: the handshake fails.
    let _broker = rabbitmq::require_rabbitmq().await;
    let uri: lapin::uri::AMQPUri = rabbitmq::amqp_url().parse().expect("valid AMQP URL");
    let url = format!(
        "amqps://{}:{}@{}:{}/%2f",
        uri.authority.userinfo.username,
        uri.authority.userinfo.password,
        uri.authority.host,
        uri.authority.port
    );
    let mut config = RabbitMqPublisherConfig::new(url);
    config.connect_timeout = Duration::from_secs(3);
    let publisher = RabbitMqPublisher::new(config).expect("amqps URL accepted");
    let outcomes = publisher
        .publish(&[event("orders", "order.created", "order-1", 0)])
        .await;
    assert!(
        matches!(&outcomes[0], Err(PublishFailure::Unavailable(_))),
        "{outcomes:?}"
    );
    eprintln!("amqps against a plain port: {outcomes:?}");
}
