//! The batch loop takes its events from any [`EventSource`]: here one kept
//! in memory, with the leases on a real SQLite database and a publisher
//! that records what it is given. The loop publishes every event once,
//! in order, acknowledges each, and records a rejected one as failed.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use outbox_relay::config::open_store;
use outbox_relay::event::{ClaimedEvent, FailedAttempt, Fence, FetchRequest};
use outbox_relay::publish::{PublishFailure, Publisher};
use outbox_relay::relay::Relay;
use outbox_relay::source::EventSource;
use outbox_relay::store::Connections;
use outbox_relay::{DatabaseUrl, OutboundEvent, RelayConfig};
use tokio_util::sync::CancellationToken;

/// Events in memory, all in partition 0, removed once acknowledged or
/// recorded as failed.
#[derive(Default)]
struct MemorySource {
    pending: Mutex<Vec<ClaimedEvent>>,
    acknowledged: Mutex<Vec<i64>>,
    failed: Mutex<Vec<FailedAttempt>>,
}

impl MemorySource {
    fn settle(&self, ids: &HashSet<i64>) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.retain(|claimed| !ids.contains(&claimed.event.id));
        }
    }
}

impl EventSource for MemorySource {
    fn fetch_pending<'a>(
        &'a self,
        request: FetchRequest<'a>,
    ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, outbox_relay::Error>> {
        let FetchRequest {
            partition_count: _partition_count,
            partitions,
            exclude,
            hold_dead: _hold_dead,
            limit,
        } = request;
        let events = self
            .pending
            .lock()
            .map(|pending| {
                // As the stores do: at most `limit.events`, and no more
                // payload bytes than `limit.bytes`, the first event whatever
                // its size.
                let mut bytes = 0_i64;
                pending
                    .iter()
                    .filter(|claimed| partitions.contains(&claimed.partition_no))
                    .filter(|claimed| !exclude.contains(&claimed.event.id))
                    .take(usize::try_from(limit.events).unwrap_or(0))
                    .take_while(|claimed| {
                        let first = bytes == 0;
                        bytes += claimed.event.payload.len() as i64;
                        first || bytes <= limit.bytes
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Box::pin(std::future::ready(Ok(events)))
    }

    fn mark_published<'a>(
        &'a self,
        fence: Fence<'a>,
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<u64, outbox_relay::Error>> {
        let Fence {
            relay_id: _relay_id,
            partition_count: _partition_count,
            leases: _leases,
        } = fence;
        self.settle(&ids.iter().copied().collect());
        if let Ok(mut acknowledged) = self.acknowledged.lock() {
            acknowledged.extend_from_slice(ids);
        }
        Box::pin(std::future::ready(Ok(ids.len() as u64)))
    }

    fn record_failures<'a>(
        &'a self,
        fence: Fence<'a>,
        failures: &'a [FailedAttempt],
    ) -> BoxFuture<'a, Result<u64, outbox_relay::Error>> {
        let Fence {
            relay_id: _relay_id,
            partition_count: _partition_count,
            leases: _leases,
        } = fence;
        self.settle(&failures.iter().map(|failure| failure.id).collect());
        if let Ok(mut failed) = self.failed.lock() {
            failed.extend_from_slice(failures);
        }
        Box::pin(std::future::ready(Ok(failures.len() as u64)))
    }
}

/// Records every event it is given; rejects the event types in `reject`.
#[derive(Default)]
struct RecordingPublisher {
    published: Mutex<Vec<OutboundEvent>>,
    reject: HashSet<String>,
}

impl Publisher for RecordingPublisher {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        let outcomes = events
            .iter()
            .map(|event| {
                if self.reject.contains(&event.event_type) {
                    return Err(PublishFailure::Rejected("refused by the test".to_owned()));
                }
                if let Ok(mut published) = self.published.lock() {
                    published.push(event.clone());
                }
                Ok(())
            })
            .collect();
        Box::pin(std::future::ready(outcomes))
    }

    fn is_connected(&self) -> bool {
        true
    }
}

/// A broker that cannot be reached: every event is unavailable. Counts the
/// publishes it was asked for.
#[derive(Default)]
struct UnreachablePublisher {
    publishes: std::sync::atomic::AtomicUsize,
}

impl Publisher for UnreachablePublisher {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        self.publishes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let outcomes = events
            .iter()
            .map(|_| {
                Err(PublishFailure::Unavailable(
                    "connection refused (test)".to_owned(),
                ))
            })
            .collect();
        Box::pin(std::future::ready(outcomes))
    }

    fn is_connected(&self) -> bool {
        false
    }
}

/// A broker that stores events in order and holds every acknowledgement
/// until the test releases them. Keeps count of the events handed over, of
/// the payload bytes handed over and not yet acknowledged, and of the most
/// there ever were.
#[derive(Default)]
struct ConfirmHoldingPublisher {
    handed_over: std::sync::atomic::AtomicUsize,
    released: tokio::sync::Notify,
    release_all: std::sync::atomic::AtomicBool,
    unacknowledged_bytes: std::sync::atomic::AtomicUsize,
    most_unacknowledged_bytes: std::sync::atomic::AtomicUsize,
    acknowledged: std::sync::atomic::AtomicUsize,
}

impl ConfirmHoldingPublisher {
    fn release(&self) {
        self.release_all
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.released.notify_waiters();
    }
}

impl Publisher for ConfirmHoldingPublisher {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(std::future::ready(vec![Ok(()); events.len()]))
    }

    fn send(
        self: Arc<Self>,
        events: Vec<OutboundEvent>,
    ) -> BoxFuture<'static, outbox_relay::publish::SentEvents> {
        use std::sync::atomic::Ordering;
        self.handed_over.fetch_add(events.len(), Ordering::SeqCst);
        let bytes: usize = events.iter().map(|event| event.payload.len()).sum();
        let now = self.unacknowledged_bytes.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.most_unacknowledged_bytes
            .fetch_max(now, Ordering::SeqCst);
        let acknowledgements = Box::pin(async move {
            loop {
                let released = self.released.notified();
                if self.release_all.load(Ordering::SeqCst) {
                    break;
                }
                released.await;
            }
            self.unacknowledged_bytes.fetch_sub(bytes, Ordering::SeqCst);
            self.acknowledged.fetch_add(events.len(), Ordering::SeqCst);
            vec![Ok(()); events.len()]
        });
        Box::pin(std::future::ready(outbox_relay::publish::SentEvents {
            acknowledgements,
            in_order_in_flight: true,
        }))
    }

    fn is_connected(&self) -> bool {
        true
    }

    fn keeps_order(&self) -> bool {
        true
    }
}

/// A relay over `source`, publishing to `publisher`, with its leases in
/// `store`.
fn relay_over(
    store: &Arc<dyn outbox_relay::source::OutboxStore>,
    source: &Arc<MemorySource>,
    publisher: Arc<dyn Publisher>,
    config: &RelayConfig,
) -> Relay {
    let settings = outbox_relay::config::relay_settings("memory".to_owned(), config);
    Relay::new(Arc::clone(store), publisher, settings)
        .with_event_source(Arc::clone(source) as Arc<dyn EventSource>)
}

/// [`relay_over`] running on a task of its own until the token is
/// cancelled.
fn spawn_relay(
    store: &Arc<dyn outbox_relay::source::OutboxStore>,
    source: &Arc<MemorySource>,
    publisher: Arc<dyn Publisher>,
    config: &RelayConfig,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<outbox_relay::DispatchTotals, outbox_relay::Error>>,
) {
    let stop = CancellationToken::new();
    let relay = relay_over(store, source, publisher, config);
    let running = tokio::spawn(relay.run(stop.clone()));
    (stop, running)
}

/// A lease store on a SQLite file of its own.
async fn lease_store(
    name: &str,
) -> (
    Arc<dyn outbox_relay::source::OutboxStore>,
    std::path::PathBuf,
) {
    let file = std::env::temp_dir().join(format!(
        "outbox-{name}-{}.db",
        uuid::Uuid::now_v7().simple()
    ));
    let url: DatabaseUrl = format!("sqlite://{}", file.display())
        .parse()
        .expect("sqlite url");
    let store = open_store(&url, Connections::OnDemand)
        .await
        .expect("open the lease store");
    store.migrate().await.expect("migrate");
    (store, file)
}

fn event(id: i64, aggregate_id: &str, event_type: &str) -> ClaimedEvent {
    ClaimedEvent {
        partition_no: 0,
        event: OutboundEvent {
            id,
            event_id: uuid::Uuid::now_v7(),
            event_type: event_type.to_owned(),
            event_version: 1,
            source: "/memory".to_owned(),
            aggregate_type: "account".to_owned(),
            aggregate_id: aggregate_id.to_owned(),
            topic: "accounts".to_owned(),
            payload: format!(r#"{{"id":{id}}}"#).into(),
            headers: BTreeMap::new(),
            created_at: chrono::Utc::now(),
            attempts: 0,
            replay: false,
        },
        committed_at: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_loop_runs_on_another_event_source_unchanged() {
    let (store, file) = lease_store("event-source").await;

    // 300 events over 3 aggregates; the event of id 150 is rejected.
    let source = Arc::new(MemorySource::default());
    let events: Vec<ClaimedEvent> = (1..=300)
        .map(|id| {
            let event_type = if id == 150 { "refused" } else { "moved" };
            event(id, &format!("a-{}", id % 3), event_type)
        })
        .collect();
    *source.pending.lock().expect("pending") = events.clone();
    let publisher = Arc::new(RecordingPublisher {
        reject: HashSet::from(["refused".to_owned()]),
        ..RecordingPublisher::default()
    });

    let mut config = RelayConfig::default();
    config.batch_size = Some(40);
    let (stop, running) = spawn_relay(
        &store,
        &source,
        Arc::clone(&publisher) as Arc<dyn Publisher>,
        &config,
    );
    let mut settled = false;
    for _ in 0..600 {
        if source.pending.lock().map(|p| p.is_empty()).unwrap_or(false) {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    let totals = running.await.expect("relay task").expect("relay run");
    assert!(settled, "the source still holds events");

    let published = publisher.published.lock().expect("published").clone();
    assert_eq!(published.len(), 299, "{totals:?}");
    assert_eq!(totals.published, 299);
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for event in &published {
        let previous = last.insert(event.aggregate_id.clone(), event.id);
        assert!(
            previous.is_none_or(|previous| previous < event.id),
            "aggregate {} out of order at id {}",
            event.aggregate_id,
            event.id
        );
    }
    let failed = source.failed.lock().expect("failed").clone();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].id, 150);
    let acknowledged: HashSet<i64> = source
        .acknowledged
        .lock()
        .expect("acknowledged")
        .iter()
        .copied()
        .collect();
    assert_eq!(acknowledged.len(), 299);
    assert!(!acknowledged.contains(&150));
    let _ = std::fs::remove_file(&file);
}

/// The broker refuses every connection at once while a writer commits
/// every 2 ms: the loop backs off (100 ms, doubling) whatever commits are
/// announced meanwhile, instead of fetching and sending the same batch
/// again at the writer's rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_announced_during_an_outage_do_not_cut_the_backoff_short() {
    const RUN: Duration = Duration::from_millis(1_600);
    let (store, file) = lease_store("outage-backoff").await;
    let source = Arc::new(MemorySource::default());
    *source.pending.lock().expect("pending") =
        (1..=20).map(|id| event(id, "a-1", "moved")).collect();
    let publisher = Arc::new(UnreachablePublisher::default());
    let wakeup = outbox_relay::event::Wakeup::new();
    let relay = relay_over(
        &store,
        &source,
        Arc::clone(&publisher) as Arc<dyn Publisher>,
        &RelayConfig::default(),
    )
    .with_wakeup(wakeup.clone());
    let stop = CancellationToken::new();
    // A steady writer's commit notifications.
    let announcing = tokio::spawn({
        let stop = stop.clone();
        async move {
            while !stop.is_cancelled() {
                wakeup.wake();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    let running = tokio::spawn(relay.run(stop.clone()));
    tokio::time::sleep(RUN).await;
    stop.cancel();
    running.await.expect("relay task").expect("relay run");
    announcing.await.expect("announcing task");
    let publishes = publisher
        .publishes
        .load(std::sync::atomic::Ordering::SeqCst);
    // Pauses of 100, 200, 400 and 800 ms fit in the run: five sends, with
    // room for a slow start. At the writer's rate it would be hundreds.
    assert!(
        (1..=8).contains(&publishes),
        "{publishes} sends to an unreachable broker in {RUN:?}: the backoff did not hold"
    );
    assert_eq!(
        source.pending.lock().expect("pending").len(),
        20,
        "nothing is settled while the broker is unreachable"
    );
    assert!(
        source.failed.lock().expect("failed").is_empty(),
        "no attempt is spent"
    );
    let _ = std::fs::remove_file(&file);
}

/// Payloads of 100 KB, 20 MB in all, while the broker holds its
/// acknowledgements: the loop keeps sending only while the batches in
/// flight hold less than `max_batch_bytes` of payloads, then waits; once
/// the broker acknowledges, everything goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batches_in_flight_stay_within_max_batch_bytes() {
    const EVENTS: i64 = 200;
    const PAYLOAD: usize = 100_000;
    const MAX_BATCH_BYTES: u64 = 1 << 20;
    let (store, file) = lease_store("in-flight-bytes").await;
    let source = Arc::new(MemorySource::default());
    *source.pending.lock().expect("pending") = (1..=EVENTS)
        .map(|id| {
            let mut claimed = event(id, &format!("a-{}", id % 10), "moved");
            claimed.event.payload = format!(r#"{{"blob":"{}"}}"#, "x".repeat(PAYLOAD)).into();
            claimed
        })
        .collect();
    let publisher = Arc::new(ConfirmHoldingPublisher::default());
    let mut config = RelayConfig::default();
    config.max_batch_bytes = MAX_BATCH_BYTES;
    let (stop, running) = spawn_relay(
        &store,
        &source,
        Arc::clone(&publisher) as Arc<dyn Publisher>,
        &config,
    );
    // The loop sends what the bound allows, then waits on the broker.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let most_in_flight = publisher
        .most_unacknowledged_bytes
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        most_in_flight > 0,
        "the loop sent nothing before the broker acknowledged"
    );
    assert!(
        most_in_flight <= MAX_BATCH_BYTES as usize,
        "{most_in_flight} payload bytes in flight at once, over max_batch_bytes ({MAX_BATCH_BYTES})"
    );
    publisher.release();
    let mut settled = false;
    for _ in 0..600 {
        if source.pending.lock().map(|p| p.is_empty()).unwrap_or(false) {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    running.await.expect("relay task").expect("relay run");
    assert!(
        settled,
        "the source still holds events after the broker acknowledged"
    );
    assert_eq!(
        publisher
            .acknowledged
            .load(std::sync::atomic::Ordering::SeqCst),
        EVENTS as usize
    );
    let _ = std::fs::remove_file(&file);
}

/// Wait (at most 10 s) until `done` holds; whether it did.
async fn eventually(done: impl Fn() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// A rebalance that gives no lease up does not wait for the broker: an
/// event committed after the lease renewal interval goes out while the
/// acknowledgement of the one before it is still held. (Settling the
/// batches in flight at every rebalance stalled the events behind the
/// slowest acknowledgement, every `lease_duration / 3`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_keeping_every_lease_does_not_wait_for_acknowledgements() {
    use std::sync::atomic::Ordering;
    let (store, file) = lease_store("rebalance-in-flight").await;
    let source = Arc::new(MemorySource::default());
    *source.pending.lock().expect("pending") = vec![event(1, "a-1", "moved")];
    let publisher = Arc::new(ConfirmHoldingPublisher::default());
    let mut config = RelayConfig::default();
    config.lease_duration = Duration::from_secs(3);
    config.publish_timeout = Duration::from_secs(1);
    let (stop, running) = spawn_relay(
        &store,
        &source,
        Arc::clone(&publisher) as Arc<dyn Publisher>,
        &config,
    );
    let first_sent = eventually(|| publisher.handed_over.load(Ordering::SeqCst) == 1).await;
    // Past the renewal interval (1 s), so the loop has rebalanced since.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    source
        .pending
        .lock()
        .expect("pending")
        .push(event(2, "a-2", "moved"));
    let second_sent = eventually(|| publisher.handed_over.load(Ordering::SeqCst) == 2).await;
    let acknowledged_then = publisher.acknowledged.load(Ordering::SeqCst);
    publisher.release();
    let settled = eventually(|| source.pending.lock().map(|p| p.is_empty()).unwrap_or(false)).await;
    stop.cancel();
    running.await.expect("relay task").expect("relay run");
    let _ = std::fs::remove_file(&file);
    assert!(first_sent, "the first event was never handed to the broker");
    assert!(
        second_sent,
        "the event committed after a rebalance waited for the broker to acknowledge the one \
         before it"
    );
    assert_eq!(acknowledged_then, 0, "the broker acknowledged nothing yet");
    assert!(settled, "both events are settled once acknowledged");
}
