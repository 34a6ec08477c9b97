//! Each event is applied once however often it arrives: redelivered copies
//! in shuffled order, and copies racing through two consumers at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use outbox_inbox::InboxBackend;
use outbox_testkit::{TestBackend, TestDatabase, shuffled};

use crate::broker::{BrokerSide, Message, Settings};
use crate::fixture::{
    WAIT, applied_per_account, each_applied_once, eventually, inbox, prepare, wait_for_effects,
    wait_until_all_acknowledged,
};
use crate::ledger::{Ledger, credit};

/// Every event three times, shuffled, over several keys (and Kafka
/// partitions): applied once each and, where the adapter keeps key order,
/// per account in the order of first publication.
async fn triple_delivery_applies_each_event_once<B: BrokerSide, DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = B::create("triple", 4).await;
    let events: Vec<(String, i64)> = (0..8)
        .flat_map(|account| (0..6).map(move |seq| (format!("acct-{account}"), seq)))
        .collect();
    let messages: BTreeMap<(String, i64), Message> = events
        .iter()
        .map(|(account, seq)| ((account.clone(), *seq), credit(account, *seq)))
        .collect();
    let deliveries = shuffled(
        events
            .iter()
            .flat_map(|event| [event.clone(), event.clone(), event.clone()])
            .collect::<Vec<_>>(),
        0x5eed,
    );
    // Per account, the order in which its events first appear.
    let mut first_published: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (account, seq) in &deliveries {
        let order = first_published.entry(account.clone()).or_default();
        if !order.contains(seq) {
            order.push(*seq);
        }
    }
    let copies: Vec<Message> = deliveries
        .iter()
        .map(|event| messages[event].clone())
        .collect();
    broker.publish(&copies).await;

    let ledger = Arc::new(Ledger::default());
    let running = broker.start(inbox, ledger.handler(), Settings::default());
    wait_for_effects(db, 48).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;

    assert_eq!(
        (stats.processed, stats.duplicates, stats.dead_lettered),
        (48, 96, 0),
        "{}: {stats:?}",
        B::ADAPTER
    );
    assert_eq!(stats.retried, 0, "{}: {stats:?}", B::ADAPTER);
    each_applied_once(db, 48).await;
    if B::ORDERS_BY_KEY {
        assert_eq!(
            applied_per_account(db).await,
            first_published,
            "{}: per-account order of first application",
            B::ADAPTER
        );
    }
}

/// Partitions of the racing scenario's Kafka topic, each getting one copy
/// of the event (RabbitMQ: one queue, and as many copies).
const PARTITIONS: i32 = 4;

/// Four copies of one event, taken by two consumers (two Kafka partitions
/// each, two RabbitMQ prefetch slots each) and all in flight while the
/// first handler run holds its transaction open: applied once, the other
/// copies finish as duplicates.
async fn racing_duplicates_through_two_consumers_apply_once<
    B: BrokerSide,
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let twin = prepare(db).await;
    let broker = B::create("race", PARTITIONS).await;
    let ledger = Arc::new(Ledger::default());
    let settings = Settings {
        in_flight: 2,
        ..Settings::default()
    };
    let first = broker.start(twin, ledger.handler_of(0), settings);
    let second = broker.start(inbox(db), ledger.handler_of(1), settings);
    let warm_ups = until_both_consumers_take_messages(&broker, db, &ledger).await;

    ledger.gate.close_after(0);
    let event = credit("acct-race", 0);
    let copies: Vec<Message> = (0..PARTITIONS)
        .map(|partition| Message {
            partition: Some(partition),
            ..event.clone()
        })
        .collect();
    broker.publish(&copies).await;
    // Copies in one lane of a consumer wait for the held one: only the
    // first copy of each lane is decoded while it holds.
    let decoded_while_held = if B::KEY_IS_ONE_LANE { 1 } else { 4 };
    eventually(
        "every copy decoded while one handler run holds its transaction",
        || async { ledger.decodes() >= warm_ups + decoded_while_held && ledger.gate.held() == 1 },
    )
    .await;
    ledger.gate.open();
    wait_until_all_acknowledged(&broker).await;
    let (first, second) = tokio::join!(first.stop(), second.stop());

    let events = i64::try_from(warm_ups + 1).expect("events");
    each_applied_once(db, events).await;
    let (processed, duplicates) = (
        first.processed + second.processed,
        first.duplicates + second.duplicates,
    );
    assert_eq!(
        processed,
        warm_ups + 1,
        "{}: {first:?} {second:?}",
        B::ADAPTER
    );
    assert_eq!(ledger.deliveries("acct-race", 0), 4, "{}", B::ADAPTER);
    assert_eq!(
        processed + duplicates,
        ledger.decodes(),
        "{}: every delivery finished once, the copies not applied as duplicates: \
         {first:?} {second:?}",
        B::ADAPTER
    );
}

/// Publish a round of distinct events, one per partition, until each of
/// the two consumers has taken one: both then share the subscription (the
/// later one took its share in a Kafka group that holds both). Returns
/// the events published, all applied.
async fn until_both_consumers_take_messages<B: BrokerSide, DB: TestBackend>(
    broker: &B,
    db: &TestDatabase<DB>,
    ledger: &Ledger,
) -> u64 {
    let mut published = 0;
    let deadline = tokio::time::Instant::now() + WAIT;
    while ledger.decodes_by(0) == 0 || ledger.decodes_by(1) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: the two consumers did not both take messages",
            B::ADAPTER
        );
        let round: Vec<Message> = (0..PARTITIONS)
            .map(|partition| Message {
                partition: Some(partition),
                ..credit("acct-warm-up", published + i64::from(partition))
            })
            .collect();
        broker.publish(&round).await;
        published += i64::from(PARTITIONS);
        wait_for_effects(db, published).await;
    }
    u64::try_from(published).expect("published")
}

on_every_broker!(
    [postgres, mysql, sqlite]
    triple_delivery_applies_each_event_once,
    racing_duplicates_through_two_consumers_apply_once,
);
