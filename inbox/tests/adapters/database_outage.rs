//! A database outage while the consumer handles messages, some of them
//! inside open transactions (`docs/inbox.md`).
//!
//! The shared database server keeps running: the consumer's pool goes
//! through an `outbox_testkit::TcpProxy` that the test severs, which
//! closes every connection of the consumer and every new one it opens,
//! then restores. The scenario shows that
//!
//! * no message is acknowledged (RabbitMQ) or committed (Kafka) without
//!   its effects, checked again and again before, during and after the
//!   outage;
//! * the consumer keeps trying while it is cut off and recovers by itself
//!   once the database answers again;
//! * every event's effects are applied exactly once;
//! * the outage is counted as such (`database_outages`), never as a failed
//!   attempt (`retried`), so nothing is dead-lettered even with only three
//!   attempts per message.
//!
//! It runs on PostgreSQL and MariaDB only: SQLite is a file opened in the
//! consumer's process, with no network connection to cut.

use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::{ConsumerStats, Inbox, InboxBackend};
use outbox_testkit::{TcpProxy, TestBackend, TestDatabase};
use sqlx::Pool;
use sqlx::pool::PoolOptions;

use crate::broker::{BrokerSide, Settings};
use crate::fixture::{CONSUMER, WAIT, prepare};
use crate::ledger::{Ledger, credit};

/// Events published, over [`ACCOUNTS`] accounts.
const EVENTS: u64 = 40;
const ACCOUNTS: u64 = 8;

/// Handler runs that go through before the gate holds the others inside
/// their transactions.
const RUNS_BEFORE_THE_GATE: u64 = 12;

/// Refused connection attempts to wait for while the database is cut off:
/// the consumer is seen to keep trying.
const REFUSED_WHILE_CUT: u64 = 5;

/// Eight messages in flight, short backoff, and only three attempts per
/// message, so an outage counted as failed attempts would dead-letter
/// messages.
const SETTINGS: Settings = Settings {
    in_flight: 8,
    max_attempts: 3,
    retry_base_delay: Duration::from_millis(50),
    retry_max_delay: Duration::from_millis(500),
    batch_size: 1,
};

/// Distinct events whose effects are applied, read from the database
/// directly (not through the proxy).
async fn applied<DB: TestBackend>(db: &TestDatabase<DB>) -> u64 {
    let count = db
        .count("SELECT COUNT(DISTINCT event_id) FROM effects")
        .await;
    u64::try_from(count).expect("a count")
}

/// Check that nothing is acknowledged without its effects; returns
/// `(acknowledged, applied)`. Acknowledged is read first: effects only
/// grow, so a later read of them can only be larger.
async fn nothing_acknowledged_without_effects<B: BrokerSide, DB: TestBackend>(
    broker: &B,
    db: &TestDatabase<DB>,
) -> (u64, u64) {
    let acknowledged = broker.acknowledged().await;
    let applied = applied(db).await;
    assert!(
        acknowledged <= applied,
        "{}: {acknowledged} messages acknowledged, but only {applied} events applied",
        B::ADAPTER
    );
    (acknowledged, applied)
}

/// Poll until `condition` holds, checking [`nothing_acknowledged_without_effects`]
/// on every round; fail naming `what` after [`WAIT`].
async fn wait_for<B: BrokerSide, DB: TestBackend>(
    what: &str,
    broker: &B,
    db: &TestDatabase<DB>,
    mut condition: impl FnMut(u64, u64) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (acknowledged, applied) = nothing_acknowledged_without_effects(broker, db).await;
        if condition(acknowledged, applied) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: no {what} within {WAIT:?} ({acknowledged} acknowledged, {applied} applied)",
            B::ADAPTER
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The consumer's pool: through `proxy`, and quick to give up on a
/// connection, so an outage shows as errors rather than as waiting.
async fn pool_through<DB: InboxBackend + TestBackend>(
    proxy: &TcpProxy,
    db: &TestDatabase<DB>,
) -> Pool<DB> {
    PoolOptions::<DB>::new()
        .max_connections(u32::from(SETTINGS.in_flight) + 2)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&proxy.route(db.url()))
        .await
        .expect("connect through the proxy")
}

async fn a_database_outage_loses_nothing_and_applies_each_event_once<
    B: BrokerSide,
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    prepare(db).await;
    let proxy = TcpProxy::in_front_of(db.url()).await;
    let inbox = Inbox::new(pool_through(&proxy, db).await, CONSUMER).expect("inbox");
    let broker = B::create("outage", 4).await;
    let deposits: Vec<_> = (0..EVENTS)
        .map(|seq| credit(&format!("acct-{}", seq % ACCOUNTS), seq as i64))
        .collect();
    broker.publish(&deposits).await;
    let ledger = Arc::new(Ledger::default());
    ledger.gate.close_after(RUNS_BEFORE_THE_GATE);
    let running = broker.start(inbox, ledger.handler(), SETTINGS);

    // Some events are applied, others are held inside open transactions.
    wait_for("handler holding a transaction open", &broker, db, |_, _| {
        ledger.gate.held() > 0
    })
    .await;

    // The database goes away under the held transactions, which then try
    // to go on; the consumer keeps trying to reach it meanwhile.
    proxy.sever();
    ledger.gate.open();
    wait_for(
        "repeated attempts to reach the database",
        &broker,
        db,
        |_, _| proxy.refused_connections() >= REFUSED_WHILE_CUT,
    )
    .await;
    assert!(
        proxy.cut_connections() > 0,
        "{}: the consumer had database connections open when they were cut",
        B::ADAPTER
    );

    // The database is back: the consumer recovers by itself.
    proxy.restore();
    wait_for(
        "recovery: every event applied and acknowledged",
        &broker,
        db,
        |acknowledged, applied| acknowledged == EVENTS && applied == EVENTS,
    )
    .await;
    let stats = running.stop().await;
    eprintln!(
        "{} on {}: {stats:?}; the proxy cut {} connections and refused {} while severed",
        B::ADAPTER,
        DB::LABEL,
        proxy.cut_connections(),
        proxy.refused_connections()
    );
    each_event_applied_once::<B, DB>(db, &stats).await;
}

/// Every event's effects applied exactly once, every message finished
/// once, and the outage counted as an outage, not as failed attempts.
async fn each_event_applied_once<B: BrokerSide, DB: TestBackend>(
    db: &TestDatabase<DB>,
    stats: &ConsumerStats,
) {
    let adapter = B::ADAPTER;
    crate::fixture::each_applied_once(db, i64::try_from(EVENTS).expect("events")).await;
    assert_eq!(
        stats.processed + stats.duplicates,
        EVENTS,
        "{adapter}: every message finished once: {stats:?}"
    );
    assert_eq!(stats.dead_lettered, 0, "{adapter}: {stats:?}");
    assert_eq!(
        stats.retried, 0,
        "{adapter}: the outage was not counted as failed attempts: {stats:?}"
    );
    assert!(
        stats.database_outages > 0,
        "{adapter}: the outage was counted as one: {stats:?}"
    );
}

// SQLite has no network connection to cut: see the module's documentation.
on_every_broker!(
    [postgres, mysql]
    a_database_outage_loses_nothing_and_applies_each_event_once
);
