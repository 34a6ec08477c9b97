//! The RabbitMQ adapter's topology and what a handler sees: a consumer
//! asked to declares its queue and binding, one not asked finds a missing
//! queue an error, and a handler written as an `async fn` sees its
//! delivery's event id and attempt.

use std::sync::{Arc, Mutex};

use outbox_inbox::rabbitmq::RabbitMqInboxConsumer;
use outbox_inbox::{BoxError, Delivery, Handler, InboxBackend};
use outbox_testkit::{TestBackend, TestDatabase};

use crate::broker::{BrokerSide, Running, Settings};
use crate::fixture::{eventually, prepare, wait_for_effects, wait_until_all_acknowledged};
use crate::ledger::{AccountCredited, credit};
use crate::rabbitmq_side::RabbitMqSide;

/// A handler as a plain `async fn`: one `effects` row per credit.
async fn record_credit<DB: InboxBackend + TestBackend>(
    tx: &mut DB::Connection,
    credit: &AccountCredited,
    delivery: &Delivery<'_>,
) -> Result<(), BoxError> {
    let insert = format!(
        "INSERT INTO effects (event_id, account, seq, applied) VALUES ('{}', '{}', {}, {})",
        delivery.event_id(),
        credit.account,
        credit.seq,
        delivery.attempt()
    );
    DB::execute(tx, &insert).await?;
    Ok(())
}

/// With a binding configured, the consumer declares the queue and binds
/// it to the exchange (declaring that too) before anything is published;
/// what is published then reaches the handler.
async fn a_consumer_asked_declares_its_queue_and_binding<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = RabbitMqSide::undeclared("declares").await;
    let config = broker
        .config(Settings::default())
        .bind(broker.exchange(), "account.*");
    let consumer =
        RabbitMqInboxConsumer::new(inbox, outbox_inbox::typed(record_credit::<DB>), config)
            .expect("consumer");
    consumer
        .declare_topology()
        .await
        .expect("the queue, the exchange and the binding are declared");
    // Routed, or `publish` fails: the binding exists before consuming.
    broker.publish(&[credit("acct-bound", 0)]).await;

    let running = Running::spawn(|stop| consumer.run(stop));
    wait_for_effects(db, 1).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!(stats.processed, 1, "{stats:?}");
}

/// Without a binding, the queue must exist: a missing one is an error
/// naming it, before anything is consumed.
async fn without_a_binding_a_missing_queue_is_an_error_naming_it<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = RabbitMqSide::undeclared("missing").await;
    let consumer = RabbitMqInboxConsumer::new(
        inbox,
        outbox_inbox::typed(record_credit::<DB>),
        broker.config(Settings::default()),
    )
    .expect("consumer");
    let error = consumer
        .declare_topology()
        .await
        .expect_err("a missing queue is refused")
        .to_string();
    assert!(
        error.contains("NOT_FOUND") && error.contains(&broker.queue),
        "{error}"
    );
}

/// Records the delivery of each run and fails the first one.
#[derive(Default, Clone)]
struct DeliveryRecorder {
    seen: Arc<Mutex<Vec<(String, u32, bool)>>>,
}

impl<DB: InboxBackend + TestBackend> Handler<DB> for DeliveryRecorder {
    type Event = AccountCredited;

    async fn handle(
        &self,
        tx: &mut DB::Connection,
        credit: &AccountCredited,
        delivery: &Delivery<'_>,
    ) -> Result<(), BoxError> {
        let first = {
            let mut seen = self.seen.lock().expect("seen");
            seen.push((
                delivery.event_id().to_owned(),
                delivery.attempt(),
                delivery.is_replay(),
            ));
            seen.len() == 1
        };
        if first {
            return Err("the first attempt fails on purpose".into());
        }
        record_credit::<DB>(tx, credit, delivery).await
    }
}

/// The handler sees the message's event id, that it is no replay, and
/// which attempt it runs: 1, then 2 after a failure.
async fn the_handler_sees_its_delivery<DB: InboxBackend + TestBackend>(db: &TestDatabase<DB>) {
    let inbox = prepare(db).await;
    let broker = RabbitMqSide::create("delivery", 1).await;
    let message = credit("acct-seen", 0);
    let event_id = message.id.clone().expect("an event id");
    broker.publish(&[message]).await;
    let recorder = DeliveryRecorder::default();

    let running = broker.start(inbox, recorder.clone(), Settings::default());
    eventually("the second attempt", || async {
        recorder.seen.lock().expect("seen").len() >= 2
    })
    .await;
    wait_for_effects(db, 1).await;
    wait_until_all_acknowledged(&broker).await;
    running.stop().await;

    let seen = recorder.seen.lock().expect("seen").clone();
    assert_eq!(
        seen,
        vec![(event_id.clone(), 1, false), (event_id, 2, false)],
        "event id, attempt, replay of each run"
    );
    assert_eq!(
        db.count("SELECT MAX(applied) FROM effects").await,
        2,
        "the attempt the handler wrote"
    );
}

outbox_testkit::test_on_backends!(
    [postgres]
    a_consumer_asked_declares_its_queue_and_binding,
    without_a_binding_a_missing_queue_is_an_error_naming_it,
    the_handler_sees_its_delivery
);
