//! The cases every publisher shares, run on each: Kafka, RabbitMQ, Redis
//! and NATS JetStream on the real brokers, and stdout into a buffer. A batch arrives with every
//! CloudEvents attribute, each aggregate in order; an unreachable broker
//! (or a failing writer) makes every event unavailable; an event that fails
//! before it is sent holds its aggregate's later events; `recover()` checks
//! the broker. What differs per publisher (the transport's own mapping, the
//! address it cannot reach) lives in its [`Target`].
//!
//! Broker-specific behaviour stays in `publish_kafka.rs` (missing topics,
//! oversized messages against `message.max.bytes`, TLS, fatal errors) and
//! `publish_rabbitmq.rs` (routing keys, unroutable and missing exchanges,
//! lost connections). An oversized event is a Kafka case here: RabbitMQ's
//! limit is the broker's own `max_message_size`, 128 MiB on the shared
//! broker, so its case runs through the relay binary on a private node in
//! `relay/tests/oversized_events.rs` (beside Kafka's); stdout has none.

mod kafka;
mod nats;
mod rabbitmq;
mod redis;
mod stdout;
#[path = "../support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use outbox_relay::OutboundEvent;
use outbox_relay::publish::{PublishFailure, Publisher};

/// One message as the test read it back, whatever the transport.
pub(crate) struct Delivered<Raw> {
    /// The CloudEvents attributes, by attribute name (`id`, `time`,
    /// `partitionkey`, …), as text.
    pub(crate) attributes: BTreeMap<String, String>,
    /// The event's data, as JSON.
    pub(crate) data: serde_json::Value,
    /// What only this transport carries (key, partition, properties).
    pub(crate) raw: Raw,
}

/// A publisher under test and where its events go.
pub(crate) trait Target: Sized {
    /// The transport's own part of a [`Delivered`].
    type Raw;

    /// A destination (topic, exchange with a queue, buffer) of the test's own.
    async fn new() -> Self;

    /// The `topic` of events for this destination.
    fn destination(&self) -> String;

    /// A publisher that reaches the destination.
    fn publisher(&self) -> Box<dyn Publisher>;

    /// A publisher whose broker (or writer) cannot be reached.
    fn unreachable() -> Box<dyn Publisher>;

    /// Whether `recover()` checks the broker (stdout has none to check).
    const RECOVER_CHECKS: bool;

    /// Read `count` messages back, in arrival order.
    async fn read(&self, count: usize) -> Vec<Delivered<Self::Raw>>;

    /// Check what only this transport carries, for the whole batch.
    fn check_transport(delivered: &[Delivered<Self::Raw>], events: &[&OutboundEvent]);

    /// Remove the destination.
    async fn remove(self);
}

/// A publisher whose broker client can be made to lose what it was handed
/// and not yet acknowledged, as a connection the broker stopped reading or
/// a producer that failed fatally does.
pub(crate) struct LossyClient {
    /// The publisher, its broker connections perhaps through a proxy.
    pub(crate) publisher: Arc<dyn Publisher>,
    /// Called before the sends to lose: what is handed to the client from
    /// then on does not reach the broker, on the connections open now.
    pub(crate) start_losing: Box<dyn Fn() + Send + Sync>,
    /// Called after those sends: the client fails, where it would not
    /// notice the loss by itself.
    pub(crate) break_client: Box<dyn Fn() + Send + Sync>,
    /// What carries the connections (a proxy), kept for the test's length.
    pub(crate) _transport: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// A [`Target`] whose broker client can lose events in flight.
pub(crate) trait LossyTarget: Target {
    /// Whether the publisher lets a later send go out while an earlier one
    /// is unacknowledged (`SentEvents::in_order_in_flight`).
    const ORDER_IN_FLIGHT: bool;

    /// A publisher to the destination that can lose events in flight.
    async fn lossy(&self) -> LossyClient;
}

/// Event `sequence` of `aggregate_id` for `topic`
/// ([`support::outbound::outbound_event`]).
pub(crate) fn event(topic: &str, aggregate_id: &str, sequence: usize) -> OutboundEvent {
    support::outbound::outbound_event(topic, aggregate_id, sequence)
}

/// The attributes `event` must arrive with (`time` is checked apart).
fn expected_attributes(event: &OutboundEvent) -> BTreeMap<String, String> {
    let mut expected = BTreeMap::from([
        ("specversion", "1.0".to_owned()),
        ("id", event.event_id.to_string()),
        ("source", event.source.clone()),
        ("type", event.event_type.clone()),
        ("datacontenttype", "application/json".to_owned()),
        ("aggregatetype", event.aggregate_type.clone()),
        ("eventversion", event.event_version.to_string()),
        ("partitionkey", event.aggregate_id.clone()),
        ("tenant", "acme".to_owned()),
    ]);
    for trace in ["traceparent", "tracestate"] {
        if let Some(value) = event.headers.get(trace) {
            expected.insert(trace, value.clone());
        }
    }
    expected
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
}

/// 300 events over 30 aggregates, interleaved as a relay batch is: every
/// event acknowledged, each arrives once with every CloudEvents attribute,
/// and each aggregate's events arrive in publication order.
async fn a_batch_arrives_with_every_attribute_in_aggregate_order<T: Target>() {
    let target = T::new().await;
    let publisher = target.publisher();
    let events: Vec<OutboundEvent> = (0..300)
        .map(|sequence| {
            event(
                &target.destination(),
                &format!("order-{}", sequence % 30),
                sequence,
            )
        })
        .collect();
    let outcomes = publisher.publish(&events).await;
    assert_eq!(outcomes.len(), events.len());
    for (outcome, event) in outcomes.iter().zip(&events) {
        assert_eq!(outcome, &Ok(()), "event {} failed", event.event_id);
    }
    assert!(publisher.is_connected(), "connected after a publish");

    let delivered = target.read(events.len()).await;
    let by_id: HashMap<String, &OutboundEvent> = events
        .iter()
        .map(|event| (event.event_id.to_string(), event))
        .collect();
    let mut seen = HashSet::new();
    let mut last_sequence: HashMap<String, u64> = HashMap::new();
    let mut matched = Vec::with_capacity(delivered.len());
    for message in &delivered {
        let id = message.attributes.get("id").expect("id attribute");
        let event = by_id.get(id.as_str()).expect("the id of a published event");
        assert!(seen.insert(id.clone()), "{id} arrived twice");
        let mut attributes = message.attributes.clone();
        let time = attributes.remove("time").expect("time attribute");
        let parsed = chrono::DateTime::parse_from_rfc3339(&time)
            .expect("time is RFC 3339")
            .to_utc();
        assert_eq!(parsed, event.created_at, "time = created_at");
        assert_eq!(attributes, expected_attributes(event), "attributes of {id}");
        let payload: serde_json::Value =
            serde_json::from_str(&event.payload).expect("payload is JSON");
        assert_eq!(message.data, payload, "data = payload");
        let sequence = payload["sequence"].as_u64().expect("sequence");
        if let Some(previous) = last_sequence.insert(event.aggregate_id.clone(), sequence) {
            assert!(
                previous < sequence,
                "{}: {sequence} arrived after {previous}",
                event.aggregate_id
            );
        }
        matched.push(*event);
    }
    assert_eq!(seen.len(), events.len(), "every event arrived");
    T::check_transport(&delivered, &matched);
    target.remove().await;
}

/// Every event of a batch to an unreachable broker (or a failing writer)
/// is unavailable, never rejected, and the publisher says it is not
/// connected; a failure message never shows a password.
async fn an_unreachable_broker_makes_every_event_unavailable<T: Target>() {
    let publisher = T::unreachable();
    let events = vec![event("orders", "order-1", 0), event("orders", "order-2", 1)];
    let outcomes = publisher.publish(&events).await;
    assert_eq!(outcomes.len(), events.len());
    for outcome in &outcomes {
        match outcome {
            Err(PublishFailure::Unavailable(message)) => {
                assert!(
                    !message.contains("guest:guest"),
                    "password shown: {message}"
                );
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    assert!(!publisher.is_connected());
}

/// `recover()` succeeds on a reachable broker, after which the publisher
/// still delivers; on an unreachable one it fails as unavailable.
async fn recover_succeeds_only_where_the_broker_answers<T: Target>() {
    let target = T::new().await;
    let publisher = target.publisher();
    publisher.recover().await.expect("recover on a live broker");
    let events = vec![event(&target.destination(), "order-1", 0)];
    assert_eq!(publisher.publish(&events).await, vec![Ok(())]);
    let delivered = target.read(1).await;
    assert_eq!(
        delivered[0].attributes.get("id"),
        Some(&events[0].event_id.to_string())
    );
    let unreachable = T::unreachable();
    let recovered = unreachable.recover().await;
    if T::RECOVER_CHECKS {
        assert!(
            matches!(recovered, Err(PublishFailure::Unavailable(_))),
            "recover must fail on an unreachable broker: {recovered:?}"
        );
    } else {
        assert_eq!(recovered, Ok(()), "nothing to check, nothing to fail");
    }
    target.remove().await;
}

/// The publisher keeps each aggregate's order within one call: an event
/// that fails before it is sent (here: an empty `source`, not a valid
/// CloudEvent) holds its aggregate's later events unsent, while the other
/// aggregates go out.
async fn a_failure_before_sending_holds_its_aggregate_s_later_events<T: Target>() {
    let target = T::new().await;
    let publisher = target.publisher();
    assert!(publisher.keeps_order(), "one call keeps aggregate order");
    let destination = target.destination();
    let mut events = vec![
        event(&destination, "order-a", 0),
        event(&destination, "order-a", 1),
        event(&destination, "order-a", 2),
        event(&destination, "order-b", 3),
        event(&destination, "order-a", 4),
        event(&destination, "order-b", 5),
    ];
    events[1].source = String::new();
    let outcomes = publisher.publish(&events).await;
    assert_eq!(outcomes[0], Ok(()), "before the failure");
    assert!(
        matches!(outcomes[1], Err(PublishFailure::Rejected(_))),
        "invalid event: {:?}",
        outcomes[1]
    );
    for held in [2, 4] {
        assert!(
            matches!(outcomes[held], Err(PublishFailure::Held(_))),
            "later event {held} of the failed aggregate: {:?}",
            outcomes[held]
        );
    }
    assert_eq!(
        (&outcomes[3], &outcomes[5]),
        (&Ok(()), &Ok(())),
        "other aggregate"
    );

    let delivered = target.read(3).await;
    let arrived: HashSet<&str> = delivered
        .iter()
        .map(|message| message.attributes.get("id").expect("id").as_str())
        .collect();
    let expected: HashSet<String> = [0, 3, 5]
        .iter()
        .map(|&index| events[index].event_id.to_string())
        .collect();
    assert_eq!(
        arrived,
        expected.iter().map(String::as_str).collect(),
        "only the sent events arrive"
    );
    target.remove().await;
}

/// The client loses two sends in flight (`LossyClient`), and a third send
/// comes before the second lost one has settled. A publisher that keeps
/// order across sends must not let it reach the broker before the lost
/// events: either it is not handed over at all, or the client keeps it
/// behind them. Then, as the relay does, every event from the first one
/// not acknowledged on is sent again, in order: each aggregate's events
/// must first arrive in order.
async fn a_send_after_a_loss_in_flight_never_overtakes_the_lost_events<T: LossyTarget>() {
    let target = T::new().await;
    let lossy = target.lossy().await;
    let publisher = Arc::clone(&lossy.publisher);
    let destination = target.destination();
    let pair = |sequence: usize| {
        vec![
            event(&destination, "order-a", sequence),
            event(&destination, "order-b", sequence + 1),
        ]
    };
    let first = vec![event(&destination, "order-a", 0)];
    assert_eq!(publisher.publish(&first).await, vec![Ok(())], "warm-up");

    (lossy.start_losing)();
    let (second, third, fourth) = (pair(1), pair(3), pair(5));
    let sent_second = Arc::clone(&publisher).send(second.clone()).await;
    let sent_third = Arc::clone(&publisher).send(third.clone()).await;
    assert_eq!(
        (
            sent_second.in_order_in_flight,
            sent_third.in_order_in_flight
        ),
        (T::ORDER_IN_FLIGHT, T::ORDER_IN_FLIGHT),
        "both sends are handed over before any failure is known"
    );
    (lossy.break_client)();
    let second_outcomes = sent_second.acknowledgements.await;
    assert!(
        second_outcomes
            .iter()
            .all(|outcome| matches!(outcome, Err(PublishFailure::Unavailable(_)))),
        "the lost send is unavailable: {second_outcomes:?}"
    );
    // The third send is still unsettled: the fourth must not overtake it.
    let sent_fourth = Arc::clone(&publisher).send(fourth.clone()).await;
    let third_outcomes = sent_third.acknowledgements.await;
    let fourth_outcomes = sent_fourth.acknowledgements.await;

    let sent: Vec<OutboundEvent> = [second, third, fourth].concat();
    let outcomes: Vec<_> = [second_outcomes, third_outcomes, fourth_outcomes].concat();
    let first_lost = outcomes
        .iter()
        .position(Result::is_err)
        .expect("the second send was lost");
    let again = &sent[first_lost..];
    let resent = publisher.publish(again).await;
    assert!(
        resent.iter().all(Result::is_ok),
        "sent again once the client recovered: {resent:?}"
    );

    let delivered = target.read(first.len() + again.len()).await;
    let sequence_of: HashMap<String, u64> = first
        .iter()
        .chain(&sent)
        .map(|event| {
            let payload: serde_json::Value =
                serde_json::from_str(&event.payload).expect("payload is JSON");
            (
                event.event_id.to_string(),
                payload["sequence"].as_u64().expect("sequence"),
            )
        })
        .collect();
    let mut seen = HashSet::new();
    let mut last_first_arrival: HashMap<String, u64> = HashMap::new();
    for message in &delivered {
        let id = message.attributes.get("id").expect("id attribute");
        if !seen.insert(id.clone()) {
            continue;
        }
        let sequence = sequence_of[id];
        let aggregate = message
            .attributes
            .get("partitionkey")
            .expect("partitionkey attribute")
            .clone();
        if let Some(previous) = last_first_arrival.insert(aggregate.clone(), sequence) {
            assert!(
                previous < sequence,
                "{aggregate}: event {sequence} first arrived after {previous}, \
                 ahead of the events lost before it"
            );
        }
    }
    target.remove().await;
}

/// One `#[tokio::test]` per shared case for the publisher of `$target`.
macro_rules! shared_cases {
    ($module:ident, $target:ty) => {
        mod $module {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_batch_arrives_with_every_attribute_in_aggregate_order() {
                super::a_batch_arrives_with_every_attribute_in_aggregate_order::<$target>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_unreachable_broker_makes_every_event_unavailable() {
                super::an_unreachable_broker_makes_every_event_unavailable::<$target>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_failure_before_sending_holds_its_aggregate_s_later_events() {
                super::a_failure_before_sending_holds_its_aggregate_s_later_events::<$target>()
                    .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn recover_succeeds_only_where_the_broker_answers() {
                super::recover_succeeds_only_where_the_broker_answers::<$target>().await;
            }
        }
    };
}

/// One `#[tokio::test]` per case of a broker client that loses events in
/// flight, for the publisher of `$target`.
macro_rules! lossy_cases {
    ($module:ident, $target:ty) => {
        mod $module {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_send_after_a_loss_in_flight_never_overtakes_the_lost_events() {
                super::a_send_after_a_loss_in_flight_never_overtakes_the_lost_events::<$target>()
                    .await;
            }
        }
    };
}

lossy_cases!(kafka_client_loss, crate::kafka::KafkaTarget);
lossy_cases!(rabbitmq_client_loss, crate::rabbitmq::RabbitMqTarget);
lossy_cases!(redis_client_loss, crate::redis::RedisTarget);
lossy_cases!(nats_client_loss, crate::nats::NatsTarget);

shared_cases!(kafka_publisher, crate::kafka::KafkaTarget);
shared_cases!(rabbitmq_publisher, crate::rabbitmq::RabbitMqTarget);
shared_cases!(redis_publisher, crate::redis::RedisTarget);
shared_cases!(nats_publisher, crate::nats::NatsTarget);
shared_cases!(stdout_publisher, crate::stdout::StdoutTarget);
