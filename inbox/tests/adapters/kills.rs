//! A batching consumer killed mid-stream while every event arrives three
//! times, on each broker and backend: the next consumer finds every
//! committed event a duplicate and applies the rest once. (A real SIGKILL
//! of a consumer process is `e2e/tests/examples.rs`'s billing consumer.)
//! On Redis the consumer is killed three times over, each successor a
//! consumer of another name that takes the pending entries over. On NATS
//! the consumer is killed three times over too, its messages delivered
//! again by the server after `ack_wait` to the next consumer of the
//! durable consumer.

use std::sync::Arc;

use outbox_inbox::{Inbox, InboxBackend};
use outbox_testkit::rabbitmq::close_connections_named;
use outbox_testkit::{TestBackend, TestDatabase, unique_name};

use crate::broker::{BrokerSide, Message, Settings};
use crate::fixture::{
    each_applied_once, eventually, prepare, wait_for_effects, wait_until_all_acknowledged,
};
use crate::kafka_offsets::{crash_before_offset_commit, in_batches};
use crate::ledger::{Ledger, credit};
use crate::nats_side::NatsSide;
use crate::rabbitmq_side::RabbitMqSide;
use crate::redis_side::RedisSide;

/// Events of the RabbitMQ, Redis and NATS kills.
const EVENTS: i64 = 60;

/// Their consumers: two batches of 16 in flight.
const KILLED_SETTINGS: Settings = Settings {
    in_flight: 32,
    max_attempts: 5,
    retry_base_delay: std::time::Duration::from_millis(50),
    retry_max_delay: std::time::Duration::from_millis(200),
    batch_size: 16,
};

/// [`EVENTS`] credits of six accounts, all three times over.
fn three_copies_of_each_event() -> Vec<Message> {
    let once: Vec<Message> = (0..EVENTS)
        .map(|seq| credit(&format!("acct-{}", seq % 6), seq))
        .collect();
    (0..3).flat_map(|_| once.iter().cloned()).collect()
}

/// Kafka: the killed consumer committed no offset, so the next one reads
/// all thirty copies again, each a duplicate.
async fn a_kafka_consumer_killed_mid_batch_under_triple_delivery_yields_duplicates_only<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    crash_before_offset_commit(db, in_batches(), 3).await;
}

/// RabbitMQ: the consumer's task is aborted (no stop, no last ack), then
/// its connection is gone, as a killed process's is. A second consumer
/// finishes the queue: each event applied once, nothing dead-lettered.
async fn a_rabbitmq_consumer_killed_mid_batch_under_triple_delivery_applies_each_event_once<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    prepare(db).await;
    let consumer = unique_name("killed");
    let broker = RabbitMqSide::create("killed", 1).await;
    broker.publish(&three_copies_of_each_event()).await;
    let ledger = Arc::new(Ledger::default());
    let settings = KILLED_SETTINGS;
    let inbox = || Inbox::new(db.pool().clone(), consumer.clone()).expect("inbox");

    // The handler holds its 21st run: the second batch stops inside its
    // transaction, and the consumer is killed there.
    ledger.gate.close_after(20);
    let killed = broker.start(inbox(), ledger.handler(), settings);
    eventually("a handler run held mid-batch", || async {
        ledger.gate.held() >= 1
    })
    .await;
    killed.crash().await;
    let name = consumer.clone();
    tokio::task::spawn_blocking(move || close_connections_named(&name))
        .await
        .expect("close the killed consumer's connection");
    ledger.gate.open();
    let applied_at_kill = db.count("SELECT COUNT(*) FROM effects").await;
    // Two batches run at once: the held run may sit in either, so none or
    // one batch may have committed.
    assert!(
        applied_at_kill < EVENTS,
        "{applied_at_kill} events applied at the kill: not mid-stream"
    );

    let running = broker.start(inbox(), ledger.handler(), settings);
    wait_for_effects(db, EVENTS).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    each_applied_once(db, EVENTS).await;
}

/// Redis: three consumers are killed in turn (their tasks aborted: no
/// stop, no last `XACK`, their connections gone), each held mid-batch
/// inside a transaction, while every event is in the stream three times.
/// Each successor has a name of its own, as a restarted process does, and
/// takes the pending entries over after `claim_idle`; the last one
/// finishes the stream: each event applied once, nothing dead-lettered,
/// nothing left pending.
async fn a_redis_consumer_killed_three_times_mid_batch_under_triple_delivery_applies_each_event_once<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let broker = RedisSide::create("killed", 2).await;
    killed_three_times(db, &broker, async |broker: &RedisSide| {
        broker.pending().await
    })
    .await;
}

/// NATS: three consumers of one durable consumer are killed in turn
/// (their tasks aborted: no stop, no last acknowledgement, no "in
/// progress" any more), each held mid-batch inside a transaction, while
/// every event is in the stream three times. The server delivers the
/// unacknowledged messages again after `ack_wait`; the last consumer
/// finishes the stream: each event applied once, nothing dead-lettered,
/// nothing left unacknowledged.
async fn a_nats_consumer_killed_three_times_mid_batch_under_triple_delivery_applies_each_event_once<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let broker = NatsSide::create("killed", 1).await;
    killed_three_times(db, &broker, async |broker: &NatsSide| {
        broker.unacknowledged().await
    })
    .await;
}

/// Three consumers of `broker` killed in turn, each held mid-batch inside
/// a transaction, while every event is there three times; `unsettled`
/// counts the messages the broker holds for the consumers (pending,
/// unacknowledged). The last consumer finishes: each event applied once,
/// nothing dead-lettered, nothing left unsettled.
async fn killed_three_times<B, DB>(
    db: &TestDatabase<DB>,
    broker: &B,
    unsettled: impl AsyncFn(&B) -> u64,
) where
    B: BrokerSide,
    DB: InboxBackend + TestBackend,
{
    const KILLS: u32 = 3;
    prepare(db).await;
    let consumer = unique_name("killed");
    broker.publish(&three_copies_of_each_event()).await;
    let ledger = Arc::new(Ledger::default());
    let settings = KILLED_SETTINGS;
    let inbox = || Inbox::new(db.pool().clone(), consumer.clone()).expect("inbox");

    for kill in 1..=KILLS {
        // Each consumer passes 12 handler runs, then holds the next one
        // inside its batch's transaction, where it is killed.
        let held_before = ledger.gate.held();
        ledger.gate.close_after(u64::from(ledger.all_runs()) + 12);
        let killed = broker.start(inbox(), ledger.handler(), settings);
        eventually(
            &format!("kill {kill}: a handler run held mid-batch"),
            || async { ledger.gate.held() > held_before },
        )
        .await;
        killed.crash().await;
        ledger.gate.open();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(
            unsettled(broker).await > 0,
            "kill {kill}: the killed consumer left messages unsettled"
        );
    }
    let applied_at_kills = db.count("SELECT COUNT(*) FROM effects").await;
    assert!(
        applied_at_kills < EVENTS,
        "{applied_at_kills} events applied at the kills: not mid-stream"
    );

    let running = broker.start(inbox(), ledger.handler(), settings);
    wait_for_effects(db, EVENTS).await;
    wait_until_all_acknowledged(broker).await;
    let stats = running.stop().await;
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    assert_eq!(unsettled(broker).await, 0, "nothing left unsettled");
    each_applied_once(db, EVENTS).await;
}

outbox_testkit::test_on_backends!(
    [postgres, mysql, sqlite]
    a_kafka_consumer_killed_mid_batch_under_triple_delivery_yields_duplicates_only,
    a_rabbitmq_consumer_killed_mid_batch_under_triple_delivery_applies_each_event_once,
    a_redis_consumer_killed_three_times_mid_batch_under_triple_delivery_applies_each_event_once,
    a_nats_consumer_killed_three_times_mid_batch_under_triple_delivery_applies_each_event_once,
);
