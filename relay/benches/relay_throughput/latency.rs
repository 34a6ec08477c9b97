//! Latency at a steady rate: commit to publisher ack and to consumer (the
//! consumers are `support::consumers`).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_relay::RelayConfig;
use outbox_relay::config::relay_settings;
use outbox_relay::event::Wakeup;
use outbox_relay::publish::Publisher;
use outbox_relay::relay::Relay;
use outbox_relay::source::{EventSource, OutboxStore};
use outbox_relay::store::PostgresStore;
use tokio_util::sync::CancellationToken;

use crate::events::message;
use crate::support::events::unique_name;
use crate::targets::{create_database, warm_up};
use crate::timed::{Phases, Stamps, TimedPublisher, TimedStore};
use crate::{LATENCY_PRODUCERS, Settings};

pub(crate) struct Latency {
    pub(crate) produced: u64,
    pub(crate) producer_rate: f64,
    pub(crate) to_ack: Vec<Duration>,
    pub(crate) to_consumer: Vec<Duration>,
    pub(crate) commit_round_trip: Vec<Duration>,
    pub(crate) phases: String,
}

/// Commit one event per transaction at `settings.latency_rate` for
/// `settings.latency_secs` while the relay runs, and measure commit-to-ack
/// (publisher acknowledgement) and commit-to-consumer latency per event.
pub(crate) async fn relay_latency(
    settings: &Settings,
    publisher: Arc<dyn Publisher>,
    target: &str,
    consumed: Arc<Mutex<HashMap<String, Instant>>>,
) -> Latency {
    let database = create_database().await;
    let warm_id = warm_up(publisher.as_ref(), settings, target).await;
    // The consumer is live (group joined, partitions assigned) once it has
    // seen the warm-up event.
    let ready_deadline = Instant::now() + Duration::from_secs(60);
    while !consumed.lock().unwrap().contains_key(&warm_id.to_string()) {
        assert!(
            Instant::now() < ready_deadline,
            "the consumer did not receive the warm-up event"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let opened = Arc::new(
        PostgresStore::connect_with(&database.url, outbox_relay::store::Connections::KeptOpen)
            .await
            .expect("open store"),
    );
    let total = settings.latency_rate * settings.latency_secs;
    let phases = Phases::new(total);
    let acks: Stamps = Arc::default();
    let store: Arc<dyn OutboxStore> = Arc::new(TimedStore {
        inner: opened.clone() as Arc<dyn OutboxStore>,
        phases: Arc::clone(&phases),
    });
    let timed: Arc<dyn Publisher> = Arc::new(TimedPublisher {
        inner: publisher,
        phases: Arc::clone(&phases),
        acks: Some(Arc::clone(&acks)),
        failures: AtomicU64::new(0),
    });
    let stop = CancellationToken::new();
    let wakeup = Wakeup::new();
    opened.watch_commits(
        wakeup.clone(),
        &outbox_relay::tasks::Tasks::stopped_by(stop.clone()),
    );
    let relay = Relay::new(
        store,
        timed,
        relay_settings(unique_name("relay"), &RelayConfig::default()),
    )
    .with_wakeup(wakeup);
    let relay_started = Instant::now();
    let task = tokio::spawn(relay.run(stop.clone()));
    // Let the relay take its leases and go idle first.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let commits: Stamps = Arc::default();
    let round_trips: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let period = Duration::from_secs_f64(1.0 / settings.latency_rate as f64);
    let produce_started = Instant::now();
    let producers: Vec<_> = (0..LATENCY_PRODUCERS)
        .map(|worker| {
            let pool = database.pool.clone();
            let commits = Arc::clone(&commits);
            let round_trips = Arc::clone(&round_trips);
            let settings = settings.clone();
            let target = target.to_owned();
            tokio::spawn(async move {
                let writer = outbox::OutboxWriter::new();
                let mut sequence = worker;
                while sequence < total {
                    let due = produce_started + period * sequence as u32;
                    tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
                    let message = message(&settings, &target, sequence);
                    let event_id = message.event_id();
                    let mut tx = pool.begin().await.expect("begin");
                    writer
                        .enqueue_messages(&mut tx, vec![message])
                        .await
                        .expect("enqueue");
                    let before_commit = Instant::now();
                    tx.commit().await.expect("commit");
                    let committed = Instant::now();
                    commits.lock().unwrap().insert(event_id, committed);
                    round_trips.lock().unwrap().push(committed - before_commit);
                    sequence += LATENCY_PRODUCERS;
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("producer task");
    }
    let produce_elapsed = produce_started.elapsed();

    // Wait until every committed event has been consumed.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let missing = {
            let consumed = consumed.lock().unwrap();
            commits
                .lock()
                .unwrap()
                .keys()
                .filter(|id| !consumed.contains_key(&id.to_string()))
                .count()
        };
        if missing == 0 {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("    ! {missing} committed events were never consumed");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wall = relay_started.elapsed();
    stop.cancel();
    task.await.expect("relay task").expect("relay run");

    let (to_ack, to_consumer) = {
        let commits = commits.lock().unwrap();
        let acks = acks.lock().unwrap();
        let consumed = consumed.lock().unwrap();
        let to_ack = commits
            .iter()
            .filter_map(|(id, committed)| {
                acks.get(id)
                    .map(|at| at.saturating_duration_since(*committed))
            })
            .collect::<Vec<_>>();
        let to_consumer = commits
            .iter()
            .filter_map(|(id, committed)| {
                consumed
                    .get(&id.to_string())
                    .map(|at| at.saturating_duration_since(*committed))
            })
            .collect::<Vec<_>>();
        (to_ack, to_consumer)
    };
    let produced = commits.lock().unwrap().len() as u64;
    let commit_round_trip = round_trips.lock().unwrap().clone();
    let report = phases.report(wall);
    opened.pool().close().await;
    drop(opened);
    database.drop_database().await;
    Latency {
        produced,
        producer_rate: produced as f64 / produce_elapsed.as_secs_f64(),
        to_ack,
        to_consumer,
        commit_round_trip,
        phases: report,
    }
}
