//! A failing handler is retried in place: applied once when it recovers,
//! without holding up other keys, and dead-lettered with its reason when
//! it is still failing after the attempt limit.

use std::sync::Arc;

use outbox_inbox::InboxBackend;
use outbox_testkit::{TestBackend, TestDatabase};

use crate::broker::{BrokerSide, Message, Settings};
use crate::fixture::{
    each_applied_once, effects, effects_in_application_order, eventually, prepare,
    wait_for_effects, wait_until_all_acknowledged,
};
use crate::ledger::{AccountCredited, Failure, Ledger, credit};

/// Accounts and credits per account of the retry scenario.
const ACCOUNTS: i64 = 4;
const CREDITS: i64 = 5;

/// Credit 1 of `acct-0` fails twice, and then for as long as the other
/// accounts' credits are not all applied: it can only be applied once the
/// other keys went past it. Applied once, retried in place (delivered
/// once), and the later credits of its own key wait for it where the
/// adapter keeps key order.
async fn a_failing_handler_is_retried_in_place_without_blocking_other_keys<
    B: BrokerSide,
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = B::create("retry", 2).await;
    let messages: Vec<Message> = (0..CREDITS)
        .flat_map(|seq| (0..ACCOUNTS).map(move |account| credit(&format!("acct-{account}"), seq)))
        .collect();
    broker.publish(&messages).await;

    let ledger = Arc::new(Ledger::default());
    let others = (ACCOUNTS - 1) * CREDITS;
    ledger.fail(
        "acct-0",
        1,
        Failure::UntilOthersApplied {
            first: 2,
            effects: others,
        },
    );
    // Attempts enough to outlast any wait: a key held up behind the
    // retries fails the test by never being applied, not by a dead letter.
    let settings = Settings {
        max_attempts: 10_000,
        ..Settings::default()
    };
    let running = broker.start(inbox, ledger.handler(), settings);
    wait_for_effects(db, ACCOUNTS * CREDITS).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;

    let failures = ledger.failures("acct-0", 1);
    assert!(failures >= 2, "{}: {failures} failures", B::ADAPTER);
    assert_eq!(ledger.runs("acct-0", 1), failures + 1, "{}", B::ADAPTER);
    assert_eq!(
        (stats.processed, stats.duplicates, stats.dead_lettered),
        (20, 0, 0),
        "{}: {stats:?}",
        B::ADAPTER
    );
    // In a batch, the first failure rolls the batch back and is no attempt
    // of the message: its messages then run alone, each decoded again.
    let batch_failures = u32::from(B::BATCHES);
    assert_eq!(
        stats.retried,
        u64::from(failures - batch_failures),
        "{}: {stats:?}",
        B::ADAPTER
    );
    let rerun_alone = ledger.decodes() - 20;
    if B::BATCHES {
        assert!(
            (1..=u64::from(settings.in_flight)).contains(&rerun_alone),
            "{}: {rerun_alone} messages decoded again: only one batch's run alone",
            B::ADAPTER
        );
    } else {
        assert_eq!(rerun_alone, 0, "{}: retried in place", B::ADAPTER);
    }
    each_applied_once(db, ACCOUNTS * CREDITS).await;
    assert_eq!(broker.dead_letter_count().await, 0, "{}", B::ADAPTER);

    let order = effects_in_application_order(db).await;
    let position = |account: &str, seq: i64| {
        order
            .iter()
            .position(|(a, s)| a == account && *s == seq)
            .expect("applied")
    };
    let recovered_at = position("acct-0", 1);
    if B::ORDERS_BY_KEY {
        for seq in 2..CREDITS {
            assert!(
                position("acct-0", seq) > recovered_at,
                "{}: acct-0#{seq} waited for acct-0#1: {order:?}",
                B::ADAPTER
            );
        }
    }
    let applied_before = (1..ACCOUNTS)
        .flat_map(|account| (0..CREDITS).map(move |seq| (account, seq)))
        .filter(|(account, seq)| position(&format!("acct-{account}"), *seq) < recovered_at)
        .count();
    assert_eq!(
        i64::try_from(applied_before).expect("count"),
        others,
        "{}: the other keys went past the retries of acct-0#1: {order:?}",
        B::ADAPTER
    );
}

/// A handler that keeps failing: after exactly `max_attempts` runs the
/// message goes to the dead-letter destination (`<topic>.dlq`, `<queue>.dlq`)
/// with its reason and original body, nothing of it is applied, and the
/// next event of the same key is applied.
async fn exhausted_attempts_go_to_the_dead_letter_destination<
    B: BrokerSide,
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = B::create("exhausted", 1).await;
    let ledger = Arc::new(Ledger::default());
    ledger.fail("acct-doomed", 0, Failure::Always);
    broker
        .publish(&[credit("acct-doomed", 0), credit("acct-doomed", 1)])
        .await;

    let settings = Settings {
        max_attempts: 4,
        ..Settings::default()
    };
    let running = broker.start(inbox, ledger.handler(), settings);
    eventually("the dead letter", || async {
        broker.dead_letter_count().await == 1
    })
    .await;
    wait_for_effects(db, 1).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;

    assert_eq!(
        ledger.runs("acct-doomed", 0),
        4 + u32::from(B::BATCHES),
        "exactly max_attempts runs, and its batch's"
    );
    assert_eq!(
        (stats.processed, stats.dead_lettered, stats.retried),
        (1, 1, 3),
        "{}: {stats:?}",
        B::ADAPTER
    );
    assert_eq!(effects(db).await, 1, "only the next event applied");
    assert_eq!(ledger.runs("acct-doomed", 1), 1);
    let dead = broker.dead_letters(1).await;
    let dead = &dead[0];
    let last_run = format!(
        "acct-doomed/0 attempt {} fails on purpose",
        4 + u32::from(B::BATCHES)
    );
    assert!(dead.reason.contains(&last_run), "{}: {dead:?}", B::ADAPTER);
    assert_eq!(dead.origin, broker.origin_of(0), "{}", B::ADAPTER);
    assert_eq!(dead.attempts, B::COUNTS_ATTEMPTS.then_some(4), "{dead:?}");
    assert_eq!(dead.key.as_deref(), Some("acct-doomed"), "{dead:?}");
    let original: AccountCredited = serde_json::from_slice(&dead.body).expect("original body");
    assert_eq!(
        (original.account.as_str(), original.seq),
        ("acct-doomed", 0)
    );
}

on_every_broker!(
    [postgres, mysql, sqlite]
    a_failing_handler_is_retried_in_place_without_blocking_other_keys,
    exhausted_attempts_go_to_the_dead_letter_destination,
);
