//! Relays switched between sources while others run, with the writers
//! started first and committing throughout: a polling relay of a group of
//! two is restarted with `--source logical` (it creates the slot; its
//! backlog is whatever the polling relay left pending), a second logical
//! relay joins, then the first is restarted as a polling relay again.
//! Polling relays publish the rows the stream owns, which stay pending, so
//! duplicates are expected; nothing is lost, and each aggregate's events
//! first arrive in order.

use std::time::Duration;

use outbox_testkit::{Collected, rabbitmq, unique_name};
use tokio_util::sync::CancellationToken;

use crate::harness::{DELIVERY_WAIT, LogicalDatabase, all_arrive, stop};
use crate::support::process::{FAST_CONFIG, RelayProcess, wait_until};
use crate::support::workload::{WriterPlan, events_without_failures, join_writers, spawn_writers};

/// Wait until more events than now have arrived.
async fn more_arrive(collected: &Collected, relay: &RelayProcess) {
    let before = collected.distinct_ids().len();
    assert!(
        wait_until(DELIVERY_WAIT, || async {
            collected.distinct_ids().len() > before + 20
        })
        .await,
        "the relays publish:\n{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switching_relays_between_sources_while_others_run_loses_nothing() {
    let database = LogicalDatabase::without_slot().await;
    let pool = database.db.pool();
    let exchange = unique_name("logical_switch");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let broker = rabbitmq::amqp_url();
    let polling = || RelayProcess::spawn(database.db.url(), &broker, FAST_CONFIG);
    let stop_writing = CancellationToken::new();
    let plan = WriterPlan {
        writer: 0,
        aggregates: 10,
        at_least: 400,
        pause: Duration::from_millis(20),
    };
    let writers = spawn_writers(pool, &exchange, 2, plan, &stop_writing);
    database.until_committed(50).await;

    let mut switched = polling();
    let mut kept = polling();
    more_arrive(&collected, &kept).await;

    stop(&mut switched);
    let mut switched = database.spawn_relay(&broker);
    more_arrive(&collected, &switched).await;
    let mut standby = database.spawn_relay(&broker);
    more_arrive(&collected, &standby).await;

    stop(&mut switched);
    let mut switched_back = polling();
    more_arrive(&collected, &standby).await;

    stop_writing.cancel();
    let enqueued = events_without_failures(join_writers(writers).await);
    let duplicates = all_arrive(&enqueued, &collected, &standby, DELIVERY_WAIT).await;
    eprintln!("{} events, {duplicates} published twice", enqueued.len());
    for relay in [&mut kept, &mut standby, &mut switched_back] {
        assert!(relay.is_running(), "a relay exited:\n{}", relay.log());
        stop(relay);
    }
}
