//! The database side of the suite, and waiting: the inbox and `effects`
//! table of a test database, what the effects show, and polling for an
//! event with a bound against a hanging test (never an expectation).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use outbox_inbox::{Inbox, InboxBackend};
use outbox_testkit::{TestBackend, TestDatabase};

use crate::broker::BrokerSide;
use crate::ledger::CREATE_EFFECTS;

/// The inbox consumer name of the suite.
pub const CONSUMER: &str = "ledger";

/// Longest wait for any step; a step that takes longer fails the test.
pub const WAIT: Duration = Duration::from_secs(90);

/// Migrate `db`, create the `effects` table, and return the inbox.
pub async fn prepare<DB: InboxBackend + TestBackend>(db: &TestDatabase<DB>) -> Inbox<DB> {
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, CREATE_EFFECTS)
        .await
        .expect("create effects");
    inbox(db)
}

/// Another inbox of the same consumer on `db`, for a second consumer.
pub fn inbox<DB: InboxBackend + TestBackend>(db: &TestDatabase<DB>) -> Inbox<DB> {
    Inbox::new(db.pool().clone(), CONSUMER).expect("inbox")
}

/// Poll `condition` until it holds, failing after [`WAIT`] with `what`.
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
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

/// Effects rows, all applications counted.
pub async fn effects<DB: TestBackend>(db: &TestDatabase<DB>) -> i64 {
    db.count("SELECT COUNT(*) FROM effects").await
}

/// Wait until `expected` effects rows are committed.
pub async fn wait_for_effects<DB: TestBackend>(db: &TestDatabase<DB>, expected: i64) {
    eventually(&format!("{expected} effects"), || async {
        effects(db).await >= expected
    })
    .await;
}

/// Wait until every message published is acknowledged or committed.
pub async fn wait_until_all_acknowledged<B: BrokerSide>(broker: &B) {
    let published = broker.published();
    eventually(
        &format!("{}: {published} messages acknowledged", B::ADAPTER),
        || async { broker.acknowledged().await == published },
    )
    .await;
}

/// Each of `events` events applied exactly once: as many effects rows,
/// each of its own event, and as many inbox rows.
pub async fn each_applied_once<DB: TestBackend>(db: &TestDatabase<DB>, events: i64) {
    assert_eq!(effects(db).await, events, "effects rows");
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT event_id) FROM effects")
            .await,
        events,
        "events with effects"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM inbox_messages").await,
        events,
        "inbox rows"
    );
}

/// `(account, seq)` of every effect, in the order their handler runs
/// started.
pub async fn effects_in_application_order<DB: TestBackend>(
    db: &TestDatabase<DB>,
) -> Vec<(String, i64)> {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::fetch_strings(
        &mut connection,
        "SELECT event_id FROM effects ORDER BY applied",
    )
    .await
    .expect("effects")
    .into_iter()
    .map(|row| {
        let (account, seq) = row.rsplit_once('/').expect("account/seq");
        (account.to_owned(), seq.parse().expect("seq"))
    })
    .collect()
}

/// The sequence numbers applied per account, in application order.
pub async fn applied_per_account<DB: TestBackend>(
    db: &TestDatabase<DB>,
) -> BTreeMap<String, Vec<i64>> {
    let mut applied: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (account, seq) in effects_in_application_order(db).await {
        applied.entry(account).or_default().push(seq);
    }
    applied
}
