//! Every task the relay spawns has an owner: the [`Tasks`] the program
//! hands it. Once `Relay::run` has returned and those tasks are waited
//! for, none of the relay's tasks is left alive in the runtime it ran on.

mod support;

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::event::Wakeup;
use outbox_relay::publish::{KafkaPublisher, KafkaPublisherConfig, Publisher};
use outbox_relay::relay::Relay;
use outbox_relay::source::EventSource;
use outbox_relay::source::OutboxStore;
use outbox_relay::store::Connections;
use outbox_relay::store::PostgresStore;
use outbox_relay::tasks::Tasks;
use outbox_relay::{DatabaseUrl, RelayConfig};
use outbox_testkit::{Collected, kafka, unique_name};
use support::process::wait_until;
use support::workload::{check_delivery, enqueue_events};
use tokio_util::sync::CancellationToken;

const BACKLOG: u64 = 600;
const WRITTEN_MEANWHILE: u64 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_task_of_the_relay_outlives_its_run() {
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("tasks");
    let collected = kafka::topic_consumer(&topic, 3).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    // Writers first, as in production: a backlog before the relay starts.
    let mut enqueued = enqueue_events(db.pool(), &topic, BACKLOG, 30, 20).await;
    let writer = {
        let pool = db.pool().clone();
        let topic = topic.clone();
        tokio::spawn(async move { enqueue_events(&pool, &topic, WRITTEN_MEANWHILE, 30, 5).await })
    };

    // The relay runs on a runtime of its own, so that every task alive on
    // it is the relay's (or its store's and its publisher's).
    let relay_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the relay's runtime");
    let url: DatabaseUrl = db.url().parse().expect("database url");
    let most_tracked = relay_runtime
        .spawn(run_relay_until_delivered(url, collected.clone()))
        .await
        .expect("the relay's side");
    enqueued.extend(writer.await.expect("writer"));
    assert!(
        most_tracked >= 3,
        "the tracker saw {most_tracked} tasks at most: the LISTEN connection, lease renewal and \
         retention run on it, so some spawn bypasses it"
    );

    let metrics = relay_runtime.metrics();
    let settled = wait_until(Duration::from_secs(20), || {
        let alive = metrics.num_alive_tasks();
        async move { alive == 0 }
    })
    .await;
    assert!(
        settled,
        "{} tasks still alive on the relay's runtime after its run returned and its tasks, store \
         and publisher were dropped",
        metrics.num_alive_tasks()
    );
    check_delivery(&enqueued, &collected.snapshot());
    relay_runtime.shutdown_background();
}

/// Run a relay (LISTEN, retention, small batches) until `collected` holds
/// every event, stop it, wait for its tasks, and return how many tasks its
/// tracker held at most.
async fn run_relay_until_delivered(url: DatabaseUrl, collected: Collected) -> usize {
    let publisher = Arc::new(
        KafkaPublisher::new(KafkaPublisherConfig::new(vec![kafka::brokers()]))
            .expect("kafka publisher"),
    );
    let store = Arc::new(
        PostgresStore::connect_with(url.as_str(), Connections::KeptOpen)
            .await
            .expect("open the store"),
    );
    let config = RelayConfig::from_toml_str(
        "batch_size = 25\n[retention]\nenabled = true\npublished = \"0s\"\ninterval = \"100ms\"\n",
        "test.toml",
    )
    .expect("test config");
    let stop = CancellationToken::new();
    let tasks = Tasks::stopped_by(stop.clone());
    let wakeup = Wakeup::new();
    store.watch_commits(wakeup.clone(), &tasks);
    let relay = Relay::new(
        Arc::clone(&store) as Arc<dyn OutboxStore>,
        publisher as Arc<dyn Publisher>,
        outbox_relay::config::relay_settings(unique_name("relay"), &config),
    )
    .with_wakeup(wakeup)
    .with_tasks(tasks.clone());
    let running = tokio::spawn(relay.run(stop.clone()));

    let mut most_tracked = 0;
    let delivered = wait_until(Duration::from_secs(120), || {
        most_tracked = most_tracked.max(tasks.len());
        let distinct = collected.distinct_ids().len();
        async move { distinct >= (BACKLOG + WRITTEN_MEANWHILE) as usize }
    })
    .await;
    assert!(delivered, "the relay did not publish every event");

    stop.cancel();
    running
        .await
        .expect("the relay's task")
        .expect("the relay's run");
    let ended = tokio::time::timeout(Duration::from_secs(30), tasks.wait()).await;
    assert!(
        ended.is_ok(),
        "{} tasks of the relay still run after the relay stopped",
        tasks.len()
    );
    assert_eq!(tasks.len(), 0);
    store.pool().close().await;
    most_tracked
}
