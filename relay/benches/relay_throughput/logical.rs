//! The relay's drain with `--source logical`: the same pre-enqueued events,
//! committed after the slot was created, streamed from the WAL and
//! published without a write per event. Timed from `relay.run` being
//! spawned until the acknowledgement that settles the last event.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use outbox_relay::RelayConfig;
use outbox_relay::config::relay_settings;
use outbox_relay::event::Wakeup;
use outbox_relay::event::{ClaimedEvent, FailedAttempt, Fence, FetchRequest};
use outbox_relay::leases::LeaseStore;
use outbox_relay::publish::Publisher;
use outbox_relay::relay::Relay;
use outbox_relay::source::logical::{LogicalSource, SlotName, prepare};
use outbox_relay::source::{EventSource, OutboxStore};
use outbox_relay::store::PostgresStore;
use outbox_testkit::{ReplicationSlotGuard, unique_slot_name};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::events::enqueue_all;
use crate::support::events::unique_name;
use crate::support::targets::amqp_target;
use crate::targets::{
    create_database, create_topic, delete_topic, kafka_publisher, rabbitmq_publisher, warm_up,
};
use crate::{DRAIN_TIMEOUT, Settings};

/// Counts the events the source settled on acknowledgement.
struct CountingSource {
    inner: Arc<LogicalSource>,
    settled: AtomicU64,
    reached: Notify,
    target: u64,
}

impl EventSource for CountingSource {
    fn fetch_pending<'a>(
        &'a self,
        request: FetchRequest<'a>,
    ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, outbox_relay::Error>> {
        self.inner.fetch_pending(request)
    }

    fn mark_published<'a>(
        &'a self,
        fence: Fence<'a>,
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<u64, outbox_relay::Error>> {
        let Fence {
            relay_id,
            partition_count,
            leases,
        } = fence;
        Box::pin(async move {
            let settled = self
                .inner
                .mark_published(
                    Fence {
                        relay_id,
                        partition_count,
                        leases,
                    },
                    ids,
                )
                .await?;
            if self.settled.fetch_add(settled, Ordering::SeqCst) + settled >= self.target {
                self.reached.notify_one();
            }
            Ok(settled)
        })
    }

    fn record_failures<'a>(
        &'a self,
        fence: Fence<'a>,
        failures: &'a [FailedAttempt],
    ) -> BoxFuture<'a, Result<u64, outbox_relay::Error>> {
        let Fence {
            relay_id,
            partition_count,
            leases,
        } = fence;
        self.inner.record_failures(
            Fence {
                relay_id,
                partition_count,
                leases,
            },
            failures,
        )
    }

    fn watch_commits(&self, wakeup: Wakeup, tasks: &outbox_relay::tasks::Tasks) {
        self.inner.watch_commits(wakeup, tasks);
    }
}

/// Drain `settings.events` pre-enqueued events to `target` through the
/// logical source; returns events/s.
async fn logical_drain(
    settings: &Settings,
    publisher: Arc<dyn Publisher>,
    target: &str,
    batch_size: u32,
) -> (f64, Duration) {
    let database = create_database().await;
    let slot_name = unique_slot_name("outbox_bench");
    let slot_guard = ReplicationSlotGuard::new(&database.url, &slot_name);
    let store = Arc::new(
        PostgresStore::connect_with(&database.url, outbox_relay::store::Connections::KeptOpen)
            .await
            .expect("store"),
    );
    let slot = SlotName::parse(&slot_name).expect("slot name");
    prepare(store.pool(), &slot)
        .await
        .expect("prepare the slot");
    enqueue_all(settings, &database.pool, target).await;
    warm_up(publisher.as_ref(), settings, target).await;

    let source = Arc::new(
        LogicalSource::new(Arc::clone(&store), &database.url, slot).expect("logical source"),
    );
    let counting = Arc::new(CountingSource {
        inner: Arc::clone(&source),
        settled: AtomicU64::new(0),
        reached: Notify::new(),
        target: settings.events,
    });
    let mut config = RelayConfig::default();
    config.batch_size = Some(batch_size);
    let stop = CancellationToken::new();
    let wakeup = Wakeup::new();
    counting.watch_commits(
        wakeup.clone(),
        &outbox_relay::tasks::Tasks::stopped_by(stop.clone()),
    );
    let relay = Relay::new(
        store as Arc<dyn OutboxStore>,
        publisher,
        relay_settings(unique_name("relay"), &config),
    )
    .with_wakeup(wakeup)
    .with_event_source(Arc::clone(&counting) as Arc<dyn EventSource>)
    .with_lease_store(source as Arc<dyn LeaseStore>);
    let started = Instant::now();
    let task = tokio::spawn(relay.run(stop.clone()));
    let reached = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while counting.settled.load(Ordering::SeqCst) < settings.events {
            counting.reached.notified().await;
        }
    })
    .await;
    let elapsed = started.elapsed();
    assert!(
        reached.is_ok(),
        "logical drain timed out: {} of {} settled",
        counting.settled.load(Ordering::SeqCst),
        settings.events
    );
    stop.cancel();
    let _ = task.await;
    drop(slot_guard);
    database.drop_database().await;
    (settings.events as f64 / elapsed.as_secs_f64(), elapsed)
}

/// The logical drains on Kafka and RabbitMQ, one per batch size.
pub(crate) async fn logical_scenarios(settings: &Settings) {
    println!("== Logical source (--source logical), PostgreSQL -> Kafka and RabbitMQ");
    for &batch_size in &settings.batch_sizes {
        let topic = create_topic(settings, "logical").await;
        let (rate, elapsed) =
            logical_drain(settings, kafka_publisher(settings), &topic, batch_size).await;
        println!(
            "  Kafka, batch_size {batch_size}: {rate:.0} events/s ({} events in {:.2} s)",
            settings.events,
            elapsed.as_secs_f64()
        );
        delete_topic(settings, &topic).await;

        let target = amqp_target("logical").await;
        let (rate, elapsed) = logical_drain(
            settings,
            rabbitmq_publisher(settings),
            &target.exchange,
            batch_size,
        )
        .await;
        println!(
            "  RabbitMQ, batch_size {batch_size}: {rate:.0} events/s ({} events in {:.2} s)",
            settings.events,
            elapsed.as_secs_f64()
        );
        target.remove().await;
    }
}
