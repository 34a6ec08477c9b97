//! What only the Kafka adapter has: offsets of a consumer group, committed
//! only for finished messages, across a crash and a rebalance.

use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::InboxBackend;
use outbox_testkit::{TestBackend, TestDatabase};

use crate::broker::{BrokerSide, Message, Settings};
use crate::fixture::{
    applied_per_account, each_applied_once, inbox, prepare, wait_for_effects,
    wait_until_all_acknowledged,
};
use crate::kafka_side::KafkaSide;
use crate::ledger::{Ledger, credit};

/// Credits `range`, numbered overall, over `accounts` accounts.
fn credits(range: std::ops::Range<i64>, accounts: i64) -> Vec<Message> {
    range
        .map(|seq| credit(&format!("acct-{}", seq % accounts), seq))
        .collect()
}

/// Eight messages per inbox transaction, sixteen in flight.
pub(crate) fn in_batches() -> Settings {
    Settings {
        in_flight: 16,
        batch_size: 8,
        ..Settings::default()
    }
}

/// A consumer that dies after its database commits but before its offset
/// commits: the next one reads those messages again and the inbox reports
/// them as duplicates; no effect is applied twice.
async fn a_crash_between_database_and_offset_commit_yields_duplicates_only<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    crash_before_offset_commit(db, Settings::default(), 1).await;
}

/// Publish ten credits `copies` times, apply them with a consumer that
/// never commits an offset and is aborted, then read everything again
/// with a second consumer: every message a duplicate.
pub(crate) async fn crash_before_offset_commit<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
    settings: Settings,
    copies: usize,
) {
    let inbox_b = prepare(db).await;
    let broker = KafkaSide::create("crash", 2).await;
    let once = credits(0..10, 3);
    let published: Vec<Message> = (0..copies).flat_map(|_| once.iter().cloned()).collect();
    broker.publish(&published).await;

    // Consumer A never gets to commit an offset: its commit interval is an
    // hour, and it is aborted (as a crash) once the effects are in.
    let mut never_commits = broker.config(settings);
    never_commits.commit_interval = Duration::from_secs(3600);
    let ledger = Arc::new(Ledger::default());
    let crashing = broker.start_configured(inbox(db), ledger.handler(), never_commits);
    wait_for_effects(db, 10).await;
    crashing.crash().await;
    let progress = broker.progress().await;
    assert!(
        progress.iter().all(|(committed, _)| committed.is_none()),
        "the crashed consumer committed nothing: {progress:?}"
    );

    // Consumer B, same group, reads everything again.
    let running = broker.start(inbox_b, ledger.handler(), settings);
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!(
        (stats.processed, stats.duplicates, stats.dead_lettered),
        (0, published.len() as u64, 0),
        "{stats:?}"
    );
    each_applied_once(db, 10).await;
}

/// Two consumers of one group share the partitions; the second one's
/// arrival revokes and reassigns partitions mid-stream. Every event is
/// applied once, per account in order, and the group commits to the end.
async fn a_rebalance_mid_stream_applies_each_event_once<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    rebalance_mid_stream(db, Settings::default()).await;
}

/// The same with batches.
async fn a_rebalance_mid_batch_applies_each_event_once<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    rebalance_mid_stream(db, in_batches()).await;
}

async fn rebalance_mid_stream<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
    settings: Settings,
) {
    let inbox_a = prepare(db).await;
    let broker = KafkaSide::create("rebalance", 4).await;
    let ledger = Arc::new(Ledger::default());
    let first = broker.start(inbox_a, ledger.handler(), settings);
    broker.publish(&credits(0..30, 6)).await;
    wait_for_effects(db, 30).await;

    let second = broker.start(inbox(db), ledger.handler(), settings);
    broker.publish(&credits(30..60, 6)).await;
    wait_for_effects(db, 60).await;
    wait_until_all_acknowledged(&broker).await;
    let (a, b) = (first.stop().await, second.stop().await);
    assert_eq!(a.processed + b.processed, 60, "{a:?} {b:?}");
    assert_eq!(a.dead_lettered + b.dead_lettered, 0, "{a:?} {b:?}");
    each_applied_once(db, 60).await;
    for (account, seqs) in applied_per_account(db).await {
        assert!(
            seqs.windows(2).all(|pair| pair[0] < pair[1]),
            "{account} applied out of order: {seqs:?}"
        );
    }
}

outbox_testkit::test_on_backends!(
    [postgres]
    a_crash_between_database_and_offset_commit_yields_duplicates_only,
    a_rebalance_mid_stream_applies_each_event_once,
    a_rebalance_mid_batch_applies_each_event_once,
);
