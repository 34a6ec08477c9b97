//! The RabbitMQ inbox consumer against a real RabbitMQ and real databases:
//! messages published the way the relay publishes them
//! (`docs/wire-format.md`) are applied once however often they arrive,
//! failures are retried a bounded number of times, and poison ends in the
//! dead-letter queue.
//!
//! RabbitMQ is found through `OUTBOX_TEST_AMQP_URL` (default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`); a broker that cannot be reached
//! fails the test with a message naming it (`outbox_testkit::rabbitmq`).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use outbox_inbox::rabbitmq::{
    ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, RabbitMqConsumerConfig, RabbitMqInboxConsumer,
};
use outbox_inbox::{
    BoxError, ConsumerStats, DecodeError, Handler, Inbox, InboxBackend, IncomingEvent,
};
use outbox_testkit::{TestBackend, TestDatabase, shuffled, unique_name};
use serde::{Deserialize, Serialize};
use sqlx::Transaction;
use tokio_util::sync::CancellationToken;

use outbox_testkit::rabbitmq::close_connections_named;

use crate::support::rabbitmq::Broker;

const CREATE_EFFECTS: &str = "CREATE TABLE effects (event_id VARCHAR(64) NOT NULL)";
const CONSUMER: &str = "billing";
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Serialize, Deserialize, outbox::Event)]
#[event(
    type = "payment.received",
    aggregate = "payment",
    topic = "payments",
    source = "/payments"
)]
struct PaymentReceived {
    #[event(aggregate_id)]
    payment_id: String,
    cents: i64,
}

/// Publish a `payment.received` of 100 cents with payment id and event id
/// `id`.
async fn publish_payment(broker: &Broker, id: &str) {
    let payment = PaymentReceived {
        payment_id: id.to_owned(),
        cents: 100,
    };
    broker.publish_event(id, &payment).await;
}

/// What the test handler saw and how it misbehaves.
#[derive(Default)]
struct Probe {
    /// Deliveries decoded (every delivery reaches `decode`).
    decodes: AtomicU64,
    /// Handler runs per payment id.
    runs: Mutex<HashMap<String, u32>>,
    /// Payment ids whose handler fails its first N runs (`u32::MAX`: always).
    failures: Mutex<HashMap<String, u32>>,
    /// How long each handler run holds its transaction open.
    pause: Mutex<Duration>,
    /// While set, handler runs wait (inside their transaction) until it is
    /// cleared.
    gate_closed: std::sync::atomic::AtomicBool,
    /// The decode count each handler run saw when it finished.
    decodes_at_commit: Mutex<Vec<u64>>,
}

impl Probe {
    fn runs(&self, id: &str) -> u32 {
        self.runs
            .lock()
            .expect("runs")
            .get(id)
            .copied()
            .unwrap_or(0)
    }

    fn decodes(&self) -> u64 {
        self.decodes.load(Ordering::SeqCst)
    }
}

/// The typed handler, counting its decodes: one `effects` row per
/// application, so a second application would show as a second row.
struct Counting<T> {
    typed: T,
    probe: Arc<Probe>,
}

impl<DB, T> Handler<DB> for Counting<T>
where
    DB: InboxBackend,
    T: Handler<DB, Event = PaymentReceived>,
{
    type Event = PaymentReceived;

    fn decode(&self, incoming: &IncomingEvent) -> Result<PaymentReceived, DecodeError> {
        self.probe.decodes.fetch_add(1, Ordering::SeqCst);
        self.typed.decode(incoming)
    }

    fn handle<'t>(
        &'t self,
        tx: &'t mut Transaction<'static, DB>,
        event: &'t PaymentReceived,
    ) -> BoxFuture<'t, Result<(), BoxError>> {
        self.typed.handle(tx, event)
    }
}

fn effects_handler<DB: InboxBackend + TestBackend>(
    probe: Arc<Probe>,
) -> Counting<impl Handler<DB, Event = PaymentReceived>> {
    let inner = Arc::clone(&probe);
    let typed = outbox_inbox::typed::<PaymentReceived, _, DB>(
        move |tx: &mut Transaction<'static, DB>, payment: &PaymentReceived| {
            let probe = Arc::clone(&inner);
            let id = payment.payment_id.clone();
            Box::pin(async move {
                let run = {
                    let mut runs = probe.runs.lock().expect("runs");
                    let run = runs.entry(id.clone()).or_insert(0);
                    *run += 1;
                    *run
                };
                let sql = format!("INSERT INTO effects (event_id) VALUES ('{id}')");
                DB::execute(&mut **tx, &sql).await?;
                let pause = *probe.pause.lock().expect("pause");
                tokio::time::sleep(pause).await;
                while probe.gate_closed.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let failing = probe
                    .failures
                    .lock()
                    .expect("failures")
                    .get(&id)
                    .copied()
                    .unwrap_or(0);
                if run <= failing {
                    return Err::<(), BoxError>(format!("payment {id} failed on purpose").into());
                }
                probe
                    .decodes_at_commit
                    .lock()
                    .expect("decodes")
                    .push(probe.decodes());
                Ok(())
            }) as BoxFuture<'_, Result<(), BoxError>>
        },
    );
    Counting { typed, probe }
}

async fn prepare<DB: InboxBackend + TestBackend>(db: &TestDatabase<DB>) -> Inbox<DB> {
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, CREATE_EFFECTS)
        .await
        .expect("create effects");
    Inbox::new(db.pool().clone(), CONSUMER).expect("inbox")
}

/// Poll `condition` until it holds, failing after [`WAIT`] with `what`.
async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A running consumer.
struct Running {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<ConsumerStats, outbox_inbox::Error>>,
}

impl Running {
    async fn stop(self) -> ConsumerStats {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("consumer stops in time")
            .expect("consumer task")
            .expect("consumer run")
    }
}

fn start<DB: InboxBackend + TestBackend>(
    inbox: Inbox<DB>,
    probe: &Arc<Probe>,
    config: RabbitMqConsumerConfig,
) -> Running {
    let consumer = RabbitMqInboxConsumer::new(inbox, effects_handler(Arc::clone(probe)), config)
        .expect("consumer");
    let stop = CancellationToken::new();
    let task = tokio::spawn(consumer.run(stop.clone()));
    Running { stop, task }
}

async fn triple_delivery_in_shuffled_order_applies_each_event_once<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = Broker::new("triple").await;
    let events: Vec<String> = (0..20).map(|n| format!("evt-{n:02}")).collect();
    let deliveries: Vec<String> = events
        .iter()
        .flat_map(|id| [id.clone(), id.clone(), id.clone()])
        .collect();
    for id in shuffled(deliveries, 0x5eed) {
        publish_payment(&broker, &id).await;
    }

    let probe = Arc::new(Probe::default());
    let mut config = broker.config();
    config.prefetch = 8;
    let running = start(inbox, &probe, config);
    eventually("60 deliveries", || async { probe.decodes() >= 60 }).await;
    let stats = running.stop().await;

    assert_eq!(db.count("SELECT COUNT(*) FROM effects").await, 20);
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT event_id) FROM effects")
            .await,
        20
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM inbox_messages").await, 20);
    assert_eq!((stats.processed, stats.duplicates), (20, 40), "{stats:?}");
    assert_eq!((stats.retried, stats.dead_lettered), (0, 0), "{stats:?}");
    assert_eq!(broker.message_count(&broker.queue).await, 0, "all acked");
}

async fn racing_duplicates_through_two_consumers_apply_once<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = Broker::new("race").await;
    let probe = Arc::new(Probe::default());
    *probe.pause.lock().expect("pause") = Duration::from_millis(500);
    for _ in 0..4 {
        publish_payment(&broker, "raced").await;
    }

    // Two consumers on one queue, each taking two messages at a time: all
    // four copies are in flight while the first handler holds its
    // transaction open.
    let mut config = broker.config();
    config.prefetch = 2;
    let twin = Inbox::new(db.pool().clone(), CONSUMER).expect("inbox");
    let first = start(twin, &probe, config.clone());
    let second = start(inbox, &probe, config);
    eventually("4 deliveries", || async { probe.decodes() >= 4 }).await;
    let (first, second) = tokio::join!(first.stop(), second.stop());

    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE event_id = 'raced'")
            .await,
        1
    );
    assert_eq!(
        first.processed + second.processed,
        1,
        "{first:?} {second:?}"
    );
    assert_eq!(
        first.duplicates + second.duplicates,
        3,
        "{first:?} {second:?}"
    );
    let seen = probe.decodes_at_commit.lock().expect("decodes").clone();
    assert!(
        seen.first().is_some_and(|decodes| *decodes >= 2),
        "duplicates were in flight while the first delivery ran: {seen:?}"
    );
    assert_eq!(broker.message_count(&broker.queue).await, 0, "all acked");
}

async fn a_failing_handler_is_retried_and_applied_once<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = Broker::new("retry").await;
    let probe = Arc::new(Probe::default());
    probe
        .failures
        .lock()
        .expect("failures")
        .insert("flaky".to_owned(), 2);
    publish_payment(&broker, "steady-1").await;
    publish_payment(&broker, "flaky").await;
    publish_payment(&broker, "steady-2").await;

    let running = start(inbox, &probe, broker.config());
    eventually("the flaky event applied", || async {
        db.count("SELECT COUNT(*) FROM effects").await == 3
    })
    .await;
    let stats = running.stop().await;

    assert_eq!(probe.runs("flaky"), 3, "two failures, then success");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE event_id = 'flaky'")
            .await,
        1
    );
    assert_eq!(stats.processed, 3, "{stats:?}");
    assert_eq!(stats.retried, 2, "{stats:?}");
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    assert_eq!(broker.message_count(&broker.queue).await, 0, "all acked");
    assert_eq!(
        broker.message_count(&broker.dead_letter_queue()).await,
        0,
        "nothing dead-lettered"
    );
}

async fn poison_goes_to_the_dead_letter_queue_and_consuming_continues<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = Broker::new("poison").await;
    let probe = Arc::new(Probe::default());
    let good_body = br#"{"payment_id":"no-id","cents":1}"#;
    broker
        .publish_raw(None, "payment.received", good_body)
        .await;
    broker
        .publish_raw(Some("not-json"), "payment.received", b"{not json")
        .await;
    broker
        .publish_raw(Some("unknown-type"), "payment.refunded", good_body)
        .await;
    publish_payment(&broker, "fine").await;

    let running = start(inbox, &probe, broker.config());
    eventually("three dead letters", || async {
        broker.message_count(&broker.dead_letter_queue()).await == 3
    })
    .await;
    eventually("the good event applied", || async {
        db.count("SELECT COUNT(*) FROM effects").await == 1
    })
    .await;
    let stats = running.stop().await;

    assert_eq!(stats.dead_lettered, 3, "{stats:?}");
    assert_eq!(stats.processed, 1, "{stats:?}");
    let dead = broker.take_dead_letters().await;
    let reasons: Vec<&str> = dead
        .iter()
        .map(|(headers, _)| {
            headers
                .get(DEAD_LETTER_REASON_HEADER)
                .map(String::as_str)
                .expect("reason header")
        })
        .collect();
    assert!(
        reasons.iter().any(|reason| reason.contains("`id`")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|reason| reason.contains("does not decode")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|reason| reason.contains("unexpected event type `payment.refunded`")),
        "{reasons:?}"
    );
    // The original headers and body travel with the dead letter.
    for (headers, body) in &dead {
        assert_eq!(
            headers.get("cloudEvents:source").map(String::as_str),
            Some("/payments")
        );
        assert!(!body.is_empty());
    }
    assert_eq!(broker.message_count(&broker.queue).await, 0, "all acked");
}

async fn exhausted_attempts_go_to_the_dead_letter_queue<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = Broker::new("exhausted").await;
    let probe = Arc::new(Probe::default());
    probe
        .failures
        .lock()
        .expect("failures")
        .insert("doomed".to_owned(), u32::MAX);
    publish_payment(&broker, "doomed").await;

    let mut config = broker.config();
    config.max_attempts = 4;
    let running = start(inbox, &probe, config);
    eventually("the dead letter", || async {
        broker.message_count(&broker.dead_letter_queue()).await == 1
    })
    .await;
    let stats = running.stop().await;

    assert_eq!(probe.runs("doomed"), 4, "exactly max_attempts runs");
    assert_eq!(stats.retried, 3, "{stats:?}");
    assert_eq!(stats.dead_lettered, 1, "{stats:?}");
    assert_eq!(stats.processed, 0, "{stats:?}");
    assert_eq!(db.count("SELECT COUNT(*) FROM effects").await, 0);
    let dead = broker.take_dead_letters().await;
    assert_eq!(dead.len(), 1);
    let (headers, body) = &dead[0];
    let reason = headers
        .get(DEAD_LETTER_REASON_HEADER)
        .expect("reason header");
    assert!(
        reason.contains("payment doomed failed on purpose"),
        "{reason}"
    );
    assert_eq!(headers.get(ATTEMPTS_HEADER).map(String::as_str), Some("4"));
    let payment: PaymentReceived = serde_json::from_slice(body).expect("original body");
    assert_eq!(payment.payment_id, "doomed");
    assert_eq!(broker.message_count(&broker.queue).await, 0, "all acked");
}

async fn a_lost_connection_is_reopened_and_unacked_messages_dedup<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    prepare(db).await;
    // A consumer name of its own, to find this test's connection by name.
    let consumer = unique_name("reconnect");
    let inbox = Inbox::new(db.pool().clone(), consumer.clone()).expect("inbox");
    let broker = Broker::new("reconnect").await;
    let probe = Arc::new(Probe::default());
    probe.gate_closed.store(true, Ordering::SeqCst);
    publish_payment(&broker, "held").await;

    let running = start(inbox, &probe, broker.config());
    eventually("the handler running", || async { probe.runs("held") == 1 }).await;
    // The connection drops while the delivery is in the handler: the effects
    // commit, the ack cannot be sent, the broker redelivers the message.
    assert_eq!(
        close_connections_named(&consumer),
        1,
        "one connection closed"
    );
    probe.gate_closed.store(false, Ordering::SeqCst);
    eventually("the redelivery of the unacked message", || async {
        probe.decodes() >= 2
    })
    .await;
    publish_payment(&broker, "after").await;
    eventually("the event published after the reconnect", || async {
        db.count("SELECT COUNT(*) FROM effects WHERE event_id = 'after'")
            .await
            == 1
    })
    .await;
    let stats = running.stop().await;

    assert_eq!(probe.runs("held"), 1, "the redelivery was a duplicate");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE event_id = 'held'")
            .await,
        1
    );
    assert_eq!((stats.processed, stats.duplicates), (2, 1), "{stats:?}");
    assert_eq!(broker.message_count(&broker.queue).await, 0, "all acked");
}

outbox_testkit::test_on_backends!(
    [postgres]
    triple_delivery_in_shuffled_order_applies_each_event_once,
    racing_duplicates_through_two_consumers_apply_once,
    a_failing_handler_is_retried_and_applied_once,
    poison_goes_to_the_dead_letter_queue_and_consuming_continues,
    exhausted_attempts_go_to_the_dead_letter_queue,
    a_lost_connection_is_reopened_and_unacked_messages_dedup,
);
outbox_testkit::test_on_backends!(
    [mysql, sqlite]
    triple_delivery_in_shuffled_order_applies_each_event_once
);
