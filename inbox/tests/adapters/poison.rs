//! Poison (a message that does not decode) goes to the dead-letter
//! destination at once with its reason, the handler never sees it, and
//! the messages around it are applied.

use std::sync::Arc;

use outbox_inbox::InboxBackend;
use outbox_testkit::{TestBackend, TestDatabase};

use crate::broker::{BrokerSide, Message};
use crate::fixture::{
    effects_in_application_order, eventually, prepare, wait_for_effects,
    wait_until_all_acknowledged,
};
use crate::ledger::{Ledger, credit};

/// Good credits of one account, with poison between them: no event id, a
/// body that is not JSON, an event type the handler does not know.
async fn poison_is_dead_lettered_and_consuming_continues<
    B: BrokerSide,
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = B::create("poison", 1).await;
    let good = |seq: i64| credit("acct-p", seq);
    let no_id = Message {
        id: None,
        ..good(100)
    };
    let not_json = Message {
        body: b"this is not json".to_vec(),
        ..good(101)
    };
    let unknown_type = Message {
        event_type: "account.debited".to_owned(),
        ..good(102)
    };
    let messages = vec![
        good(0),
        no_id,
        good(1),
        not_json,
        good(2),
        unknown_type,
        good(3),
    ];
    broker.publish(&messages).await;

    let ledger = Arc::new(Ledger::default());
    let running = broker.start(inbox, ledger.handler(), Default::default());
    eventually("three dead letters", || async {
        broker.dead_letter_count().await == 3
    })
    .await;
    wait_for_effects(db, 4).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;

    assert_eq!(
        (stats.processed, stats.duplicates, stats.dead_lettered),
        (4, 0, 3),
        "{}: {stats:?}",
        B::ADAPTER
    );
    assert_eq!(stats.retried, 0, "{}: poison is not retried", B::ADAPTER);
    assert_eq!(
        ledger.all_runs(),
        4,
        "the handler never saw a poison message"
    );
    let mut applied = effects_in_application_order(db).await;
    if !B::ORDERS_BY_KEY {
        applied.sort();
    }
    let expected: Vec<(String, i64)> = (0..4).map(|seq| ("acct-p".to_owned(), seq)).collect();
    assert_eq!(applied, expected, "{}", B::ADAPTER);

    let dead = broker.dead_letters(3).await;
    let expectations = [
        (1, "`id`"),
        (3, "does not decode"),
        (5, "unexpected event type `account.debited`"),
    ];
    for (index, reason) in expectations {
        let letter = dead
            .iter()
            .find(|letter| letter.reason.contains(reason))
            .unwrap_or_else(|| panic!("{}: no dead letter for {reason:?}: {dead:?}", B::ADAPTER));
        assert_eq!(letter.origin, broker.origin_of(index), "{letter:?}");
        assert_eq!(letter.key.as_deref(), Some("acct-p"), "{letter:?}");
        assert_eq!(letter.source.as_deref(), Some("/accounts"), "{letter:?}");
        let published = &messages[usize::try_from(index).expect("index")];
        assert_eq!(
            letter.body, published.body,
            "the original body travels along"
        );
    }
}

on_every_broker!(
    [postgres, mysql, sqlite]
    poison_is_dead_lettered_and_consuming_continues
);
