//! What only the RabbitMQ adapter has: a connection of its own, reopened
//! when the broker drops it, with the unacked messages redelivered and
//! deduplicated.

use std::sync::Arc;

use outbox_inbox::{Inbox, InboxBackend};
use outbox_testkit::rabbitmq::close_connections_named;
use outbox_testkit::{TestBackend, TestDatabase, unique_name};

use crate::broker::{BrokerSide, Settings};
use crate::fixture::{eventually, prepare, wait_until_all_acknowledged};
use crate::ledger::{Ledger, credit};
use crate::rabbitmq_side::RabbitMqSide;

/// The connection drops while a delivery is in the handler: the effects
/// commit, the ack cannot be sent, the broker redelivers the message to
/// the reopened connection, and the inbox finds it a duplicate.
async fn a_lost_connection_is_reopened_and_unacked_messages_dedup<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    prepare(db).await;
    // A consumer name of its own, to find this test's connection by name.
    let consumer = unique_name("reconnect");
    let inbox = Inbox::new(db.pool().clone(), consumer.clone()).expect("inbox");
    let broker = RabbitMqSide::create("reconnect", 1).await;
    let ledger = Arc::new(Ledger::default());
    ledger.gate.close_after(0);
    broker.publish(&[credit("acct-held", 0)]).await;

    let running = broker.start(inbox, ledger.handler(), Settings::default());
    eventually("the handler running", || async { ledger.gate.held() == 1 }).await;
    let closed = tokio::task::spawn_blocking(move || close_connections_named(&consumer))
        .await
        .expect("close connections");
    assert_eq!(closed, 1, "one connection closed");
    ledger.gate.open();
    eventually("the redelivery of the unacked message", || async {
        ledger.decodes() >= 2
    })
    .await;
    broker.publish(&[credit("acct-after", 0)]).await;
    eventually("the event published after the reconnect", || async {
        ledger.runs("acct-after", 0) == 1
            && db
                .count("SELECT COUNT(*) FROM effects WHERE account = 'acct-after'")
                .await
                == 1
    })
    .await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;

    assert_eq!(
        ledger.runs("acct-held", 0),
        1,
        "the redelivery was a duplicate"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE account = 'acct-held'")
            .await,
        1
    );
    assert_eq!((stats.processed, stats.duplicates), (2, 1), "{stats:?}");
}

outbox_testkit::test_on_backends!(
    [postgres]
    a_lost_connection_is_reopened_and_unacked_messages_dedup
);
