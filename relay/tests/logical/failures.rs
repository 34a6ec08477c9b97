//! The failure path of the logical source, through the relay's batch loop
//! with a publisher that rejects one aggregate: the rejected event is
//! retried and goes dead as with polling, its aggregate's later events are
//! held, other aggregates flow, the slot moves past all of them, and
//! `dead retry` releases the aggregate in order.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use outbox_relay::event::Wakeup;
use outbox_relay::leases::LeaseStore;
use outbox_relay::publish::{PublishFailure, Publisher};
use outbox_relay::relay::Relay;
use outbox_relay::source::{EventSource, OutboxStore};
use outbox_relay::store::{DeadSelector, OperatorStore};
use outbox_relay::{DeadLetterPolicy, DispatchTotals, OutboundEvent, RelayConfig};
use sqlx::Acquire;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::harness::{LogicalDatabase, WAIT, insert_event};
use crate::support::process::wait_until;

const FAILING: &str = "failing";
const FLOWING: &str = "flowing";
const EVENTS_PER_AGGREGATE: u64 = 3;

/// Records what it publishes; rejects the `FAILING` aggregate while
/// `reject` is set (only its first event with `first_only`).
#[derive(Default)]
struct RejectingPublisher {
    published: Mutex<Vec<OutboundEvent>>,
    reject: AtomicBool,
    first_only: AtomicBool,
}

impl RejectingPublisher {
    fn published(&self, aggregate: &str) -> Vec<u64> {
        self.published
            .lock()
            .expect("published")
            .iter()
            .filter(|event| event.aggregate_id == aggregate)
            .map(sequence_of)
            .collect()
    }
}

fn sequence_of(event: &OutboundEvent) -> u64 {
    serde_json::from_str::<serde_json::Value>(&event.payload).expect("payload")["sequence"]
        .as_u64()
        .expect("sequence")
}

impl Publisher for RejectingPublisher {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        let outcomes = events
            .iter()
            .map(|event| {
                let rejected_sequence =
                    !self.first_only.load(Ordering::SeqCst) || sequence_of(event) == 0;
                if event.aggregate_id == FAILING
                    && self.reject.load(Ordering::SeqCst)
                    && rejected_sequence
                {
                    return Err(PublishFailure::Rejected("refused by the test".to_owned()));
                }
                self.published
                    .lock()
                    .expect("published")
                    .push(event.clone());
                Ok(())
            })
            .collect();
        Box::pin(std::future::ready(outcomes))
    }

    fn is_connected(&self) -> bool {
        true
    }
}

/// The relay on the logical source with `publisher`, under `policy`.
fn start_relay(
    database: &LogicalDatabase,
    publisher: &Arc<RejectingPublisher>,
    policy: DeadLetterPolicy,
) -> (
    CancellationToken,
    JoinHandle<Result<DispatchTotals, outbox_relay::Error>>,
) {
    let source = database.source();
    let mut config = RelayConfig::default();
    config.batch_size = Some(50);
    config.lease_duration = Duration::from_secs(2);
    config.publish_timeout = Duration::from_millis(800);
    config.poll_interval_min = Duration::from_millis(5);
    config.poll_interval_max = Duration::from_millis(100);
    config.retry.base_delay = Duration::from_millis(50);
    config.retry.max_delay = Duration::from_millis(200);
    config.retry.max_attempts = 3;
    config.retry.jitter = false;
    config.dead_letter.policy = policy;
    let settings = outbox_relay::config::relay_settings("relay-failures".to_owned(), &config);
    let wakeup = Wakeup::new();
    let stop = CancellationToken::new();
    source.watch_commits(
        wakeup.clone(),
        &outbox_relay::tasks::Tasks::stopped_by(stop.clone()),
    );
    let relay = Relay::new(
        Arc::clone(&database.store) as Arc<dyn OutboxStore>,
        Arc::clone(publisher) as Arc<dyn Publisher>,
        settings,
    )
    .with_wakeup(wakeup)
    .with_event_source(Arc::clone(&source) as Arc<dyn EventSource>)
    .with_lease_store(source as Arc<dyn LeaseStore>);
    (stop.clone(), tokio::spawn(relay.run(stop)))
}

/// Each transaction: the next event of both aggregates. Returns a WAL
/// position past them all.
async fn write_events(database: &LogicalDatabase) -> u64 {
    for sequence in 0..EVENTS_PER_AGGREGATE {
        let mut transaction = database.db.pool().begin().await.expect("begin");
        let connection = transaction.acquire().await.expect("connection");
        insert_event(connection, "t", FAILING, sequence).await;
        insert_event(connection, "t", FLOWING, sequence).await;
        transaction.commit().await.expect("commit");
    }
    database.current_wal_position().await
}

async fn count(database: &LogicalDatabase, condition: &str) -> i64 {
    database
        .db
        .count(&format!(
            "SELECT COUNT(*) FROM outbox_events WHERE {condition}"
        ))
        .await
}

/// The flowing aggregate is published, the failing one's first event is
/// dead after three attempts, and the slot has moved past everything.
async fn first_event_dead_and_slot_past(
    database: &LogicalDatabase,
    publisher: &RejectingPublisher,
    written_up_to: u64,
) -> bool {
    publisher.published(FLOWING).len() == EVENTS_PER_AGGREGATE as usize
        && count(database, "state = 'dead' AND attempts = 3").await == 1
        && database.confirmed_flush().await >= written_up_to
}

fn failing_aggregate() -> DeadSelector {
    DeadSelector::Aggregate {
        aggregate_type: "shipment".to_owned(),
        aggregate_id: FAILING.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_event_is_retried_held_and_repaired_as_with_polling() {
    let database = LogicalDatabase::new().await;
    let publisher = Arc::new(RejectingPublisher::default());
    publisher.reject.store(true, Ordering::SeqCst);
    let (stop, running) = start_relay(&database, &publisher, DeadLetterPolicy::Hold);
    let written_up_to = write_events(&database).await;

    let settled = wait_until(WAIT, || async {
        first_event_dead_and_slot_past(&database, &publisher, written_up_to).await
            && count(
                &database,
                "state = 'pending' AND attempts = 0 AND last_error IS NOT NULL",
            )
            .await
                == (EVENTS_PER_AGGREGATE - 1) as i64
    })
    .await;
    assert!(
        settled,
        "the other aggregate flows, the rejected event goes dead after 3 attempts, its later \
         events are held, and the slot moves past them all: published {:?}",
        publisher.published(FLOWING)
    );
    assert_eq!(publisher.published(FLOWING), vec![0, 1, 2]);
    assert!(
        publisher.published(FAILING).is_empty(),
        "held behind the dead event"
    );
    assert_eq!(
        count(
            &database,
            "aggregate_id = 'flowing' AND (state <> 'pending' OR last_error IS NOT NULL)"
        )
        .await,
        0,
        "published events of the stream are not written"
    );

    // The operator repairs it: the aggregate is published in order.
    publisher.reject.store(false, Ordering::SeqCst);
    let retried = database
        .store
        .retry_dead(&failing_aggregate())
        .await
        .expect("dead retry");
    assert_eq!(retried, 1);
    let repaired = wait_until(WAIT, || async {
        count(
            &database,
            "aggregate_id = 'failing' AND state = 'published'",
        )
        .await
            == EVENTS_PER_AGGREGATE as i64
    })
    .await;
    stop.cancel();
    let totals = running.await.expect("relay task").expect("relay run");
    assert!(repaired, "the repaired aggregate is published: {totals:?}");
    let published = publisher.published(FAILING);
    let distinct: HashSet<u64> = published.iter().copied().collect();
    assert_eq!(distinct.len(), EVENTS_PER_AGGREGATE as usize);
    assert!(
        published.windows(2).all(|pair| pair[0] < pair[1]),
        "in order: {published:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_discard_releases_the_held_events_of_the_logical_source() {
    let database = LogicalDatabase::new().await;
    let publisher = Arc::new(RejectingPublisher::default());
    publisher.reject.store(true, Ordering::SeqCst);
    let (stop, running) = start_relay(&database, &publisher, DeadLetterPolicy::Hold);
    let written_up_to = write_events(&database).await;
    assert!(
        wait_until(WAIT, || async {
            first_event_dead_and_slot_past(&database, &publisher, written_up_to).await
        })
        .await,
        "the first event goes dead"
    );
    publisher.reject.store(false, Ordering::SeqCst);
    let discarded = database
        .store
        .discard_dead(&failing_aggregate())
        .await
        .expect("dead discard");
    assert_eq!(discarded, 1);
    let released = wait_until(WAIT, || async {
        publisher.published(FAILING) == vec![1, 2]
    })
    .await;
    stop.cancel();
    running.await.expect("relay task").expect("relay run");
    assert!(released, "published {:?}", publisher.published(FAILING));
    assert_eq!(
        count(
            &database,
            "aggregate_id = 'failing' AND state = 'published'"
        )
        .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_skip_policy_later_events_pass_a_dead_one_on_the_logical_source() {
    let database = LogicalDatabase::new().await;
    let publisher = Arc::new(RejectingPublisher::default());
    publisher.reject.store(true, Ordering::SeqCst);
    publisher.first_only.store(true, Ordering::SeqCst);
    let (stop, running) = start_relay(&database, &publisher, DeadLetterPolicy::Skip);
    let written_up_to = write_events(&database).await;
    assert!(
        wait_until(WAIT, || async {
            first_event_dead_and_slot_past(&database, &publisher, written_up_to).await
        })
        .await,
        "the first event goes dead"
    );
    // The later events, held while it was retried, pass the dead one.
    let passed = wait_until(WAIT, || async {
        publisher.published(FAILING) == vec![1, 2]
    })
    .await;
    stop.cancel();
    running.await.expect("relay task").expect("relay run");
    assert!(passed, "published {:?}", publisher.published(FAILING));
    assert_eq!(
        count(&database, "state = 'dead'").await,
        1,
        "the dead event stays"
    );
}
