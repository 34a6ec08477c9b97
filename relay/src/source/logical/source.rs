//! [`LogicalSource`]: the [`EventSource`] that reads committed events from
//! the replication stream, and the [`LeaseStore`] of the stream's lease.
//!
//! The batch loop sees one pseudo-partition (number 0): holding it means
//! holding the stream's lease, a dedicated row of the lease table with its
//! fencing token. Acquiring it starts the stream; losing or releasing it
//! stops the stream before anything else, so that the next holder can open
//! the slot (PostgreSQL allows one streaming connection per slot). Before
//! the stream opens, the holder hands the slot's backlog to the table path
//! (`catch_up.rs`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::catch_up::hand_over_backlog;
use super::parked::ParkedAggregates;
use super::pgoutput::STREAM_PARTITION;
use super::received::Received;
use super::stream::{StreamTarget, stream_while_leased};
use super::table_path::{self, Writer};
use crate::error::Error;
use crate::event::Wakeup;
use crate::event::aggregate_key;
use crate::event::{ClaimedEvent, FailedAttempt, Lease};
use crate::event::{Fence, FetchRequest};
use crate::leases::{LeaseStore, Leased};
use crate::source::SlotName;
use crate::source::{EventSource, Fetched, Written};
use crate::store::PostgresStore;
use crate::tasks::Tasks;

sql_files!(
    acquire_stream_lease,
    renew_stream_lease,
    release_stream_lease
);

/// The stream running under one lease acquisition.
struct RunningStream {
    lease_token: i64,
    relay_id: String,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Committed events from logical decoding of `outbox_events` inserts.
pub struct LogicalSource {
    store: Arc<PostgresStore>,
    slot: SlotName,
    target: StreamTarget,
    received: Arc<Received>,
    running: tokio::sync::Mutex<Option<RunningStream>>,
    /// The writer of the running stream, for writes made while fetching.
    writer: Mutex<Option<(String, i64)>>,
    /// When this relay last gave the lease up because its stream would not
    /// open.
    gave_up_at: Mutex<Option<tokio::time::Instant>>,
    /// Ids handed out from the table path, not yet settled.
    from_table: Mutex<HashSet<i64>>,
    /// The aggregates whose events come from the table path.
    parked: Arc<ParkedAggregates>,
    /// Where the stream's task runs: the relay's tasks once
    /// [`EventSource::watch_commits`] handed them over, until then a root
    /// of its own.
    tasks: Mutex<Tasks>,
}

impl LogicalSource {
    /// A source streaming from `slot` of the database at `database_url`,
    /// whose other statements run on `store`. Nothing streams until the
    /// stream's lease is acquired through [`LeaseStore::acquire_leases`].
    ///
    /// # Errors
    /// [`Error::InvalidDatabaseUrl`] when the URL cannot be read.
    pub fn new(
        store: Arc<PostgresStore>,
        database_url: &str,
        slot: SlotName,
    ) -> Result<Self, Error> {
        Ok(LogicalSource {
            target: StreamTarget::from_url(database_url, &slot)?,
            store,
            slot,
            received: Arc::new(Received::default()),
            running: tokio::sync::Mutex::new(None),
            writer: Mutex::new(None),
            gave_up_at: Mutex::new(None),
            from_table: Mutex::new(HashSet::new()),
            parked: Arc::new(ParkedAggregates::default()),
            tasks: Mutex::new(Tasks::new()),
        })
    }

    /// Bound the stream's buffer to `max_bytes` of payloads (default
    /// [`DEFAULT_MAX_BATCH_BYTES`](crate::source::DEFAULT_MAX_BATCH_BYTES)):
    /// the stream stops reading while it is full, and the slot keeps the
    /// rest. Events stay in the buffer until they are settled, so those in
    /// flight to the broker count too. The replication client reads one
    /// message ahead per 512 KiB of it (16 at least). Call it before the
    /// stream starts.
    #[must_use]
    pub fn with_buffer_bytes(mut self, max_bytes: usize) -> Self {
        self.received = Arc::new(Received::with_max_bytes(max_bytes));
        self.target = self.target.reading_ahead_within(max_bytes);
        self
    }

    /// The slot streamed from.
    pub fn slot(&self) -> &SlotName {
        &self.slot
    }

    /// Streamed events neither acknowledged nor recorded as failed.
    pub fn unsettled_events(&self) -> usize {
        self.received.lock().tracker.unsettled_events()
    }

    /// How many streamed events are unsettled, and the oldest one's
    /// creation time.
    pub(crate) fn unsettled_summary(&self) -> (usize, Option<chrono::DateTime<chrono::Utc>>) {
        let state = self.received.lock();
        let oldest = state
            .events
            .iter()
            .map(|claimed| claimed.event.created_at)
            .min();
        (state.tracker.unsettled_events(), oldest)
    }

    /// The position this relay last confirmed (0 while it does not stream).
    #[cfg(feature = "test-util")]
    pub fn confirmed_position(&self) -> u64 {
        self.received.lock().tracker.confirmed()
    }

    pub(crate) fn pool(&self) -> &PgPool {
        self.store.pool()
    }

    fn lock_from_table(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        self.from_table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn current_writer(&self) -> Option<(String, i64)> {
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set_writer(&self, writer: Option<(String, i64)>) {
        *self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = writer;
        // Another holder may have parked aggregates meanwhile.
        self.parked.changed();
    }

    /// Start streaming under `lease_token`.
    async fn start_stream(&self, relay_id: &str, lease_token: i64) {
        let mut running = self.running.lock().await;
        if let Some(previous) = running.take() {
            stop_stream(previous).await;
        }
        let tasks = self
            .tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .child();
        let stop = tasks.stop_token();
        self.received.clear_stream_failure();
        let task = tasks.spawn(hand_over_then_stream(
            self.pool().clone(),
            self.target.clone(),
            self.slot.clone(),
            Arc::clone(&self.received),
            Arc::clone(&self.parked),
            (relay_id.to_owned(), lease_token),
            stop.clone(),
        ));
        self.set_writer(Some((relay_id.to_owned(), lease_token)));
        *running = Some(RunningStream {
            lease_token,
            relay_id: relay_id.to_owned(),
            stop,
            task,
        });
    }

    /// Stop the stream, if it runs under one of `leases` (all when `None`),
    /// and wait until its session is closed.
    async fn stop_stream_of(&self, leases: Option<&[Lease]>) {
        let mut running = self.running.lock().await;
        let matches = running.as_ref().is_some_and(|stream| {
            leases.is_none_or(|leases| {
                leases
                    .iter()
                    .any(|lease| lease.lease_token == stream.lease_token)
            })
        });
        if matches && let Some(stream) = running.take() {
            self.set_writer(None);
            tracing::info!(
                slot = %self.slot,
                relay_id = %stream.relay_id,
                lease_token = stream.lease_token,
                "stopping the replication stream"
            );
            stop_stream(stream).await;
        }
    }

    /// Whether the stream has failed to open for longer than a lease: the
    /// server refuses this relay's replication connection (its host, a
    /// full `max_wal_senders`, ...).
    fn stream_is_stuck(&self, lease_duration: Duration) -> bool {
        self.received
            .failing_for()
            .is_some_and(|failing_for| failing_for > lease_duration)
    }

    /// Give the stream's lease up so another relay can try, and sit out
    /// acquisitions for a lease.
    async fn give_up(&self, relay_id: &str, lease: &Lease) -> Result<(), Error> {
        tracing::warn!(
            slot = %self.slot,
            lease_token = lease.lease_token,
            "the replication stream has not opened for a whole lease; giving the stream's lease \
             up so another relay can stream"
        );
        self.stop_stream_of(Some(std::slice::from_ref(lease))).await;
        self.received.clear_stream_failure();
        *self
            .gave_up_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(tokio::time::Instant::now());
        sqlx::query(sql::release_stream_lease)
            .bind(relay_id)
            .bind(lease.lease_token)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Whether this relay gave the lease up less than `lease_duration` ago.
    fn in_give_up_pause(&self, lease_duration: Duration) -> bool {
        self.gave_up_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_some_and(|at| at.elapsed() < lease_duration)
    }

    /// Whether `leases` hold the running stream's lease.
    fn holds_stream(&self, leases: &[Lease]) -> Option<(String, i64)> {
        let (relay_id, token) = self.current_writer()?;
        leases
            .iter()
            .any(|lease| lease.partition_no == STREAM_PARTITION && lease.lease_token == token)
            .then_some((relay_id, token))
    }

    /// Stream events to publish, with those of parked aggregates handed to
    /// the table path.
    async fn fetch_streamed(
        &self,
        parked: &HashSet<crate::event::AggregateKey>,
        exclude: &[i64],
        room: Room,
    ) -> Result<Vec<ClaimedEvent>, Error> {
        let exclude: HashSet<i64> = exclude.iter().copied().collect();
        let (to_publish, to_hold): (Vec<ClaimedEvent>, Vec<i64>) = {
            let state = self.received.lock();
            let mut to_publish = Vec::new();
            let mut to_hold = Vec::new();
            let mut bytes = 0_usize;
            let mut full = room.events == 0;
            for claimed in state.events.iter() {
                if exclude.contains(&claimed.event.id) {
                    continue;
                }
                if !parked.is_empty() && parked.contains(&aggregate_key(claimed)) {
                    to_hold.push(claimed.event.id);
                } else if !full {
                    let size = claimed.payload_bytes();
                    let first = to_publish.is_empty() && room.must_take_one;
                    if first || bytes.saturating_add(size) <= room.bytes {
                        bytes = bytes.saturating_add(size);
                        // The payload is shared with the buffer, not copied.
                        to_publish.push(claimed.clone());
                        full = to_publish.len() >= room.events;
                    } else {
                        // Cut here, in commit order: nothing after it is
                        // taken ahead of it.
                        full = true;
                    }
                }
                if full && to_hold.is_empty() {
                    break;
                }
            }
            (to_publish, to_hold)
        };
        if !to_hold.is_empty() {
            let Some((relay_id, lease_token)) = self.current_writer() else {
                return Ok(Vec::new());
            };
            let writer = Writer {
                relay_id: &relay_id,
                lease_token,
            };
            // Durably the table path's now (or already): the stream may move
            // past them. With the lease lost, they stay unsettled.
            let held = table_path::hold_events(self.pool(), writer, &to_hold).await;
            self.parked.changed();
            if let Some(held) = held? {
                tracing::info!(
                    held,
                    events = to_hold.len(),
                    "streamed events held behind failed events of their aggregates"
                );
                self.received.settle(&to_hold);
            }
        }
        Ok(to_publish)
    }
}

/// What is left of a fetch's limit for the streamed events.
#[derive(Debug, Clone, Copy)]
struct Room {
    events: usize,
    bytes: usize,
    /// Nothing was taken from the table path: the first streamed event is
    /// taken whatever its size.
    must_take_one: bool,
}

/// The task of one lease acquisition: the slot's backlog handed to the
/// table path first (its events are published from there as soon as each
/// batch is handed over), then the stream.
async fn hand_over_then_stream(
    pool: PgPool,
    target: StreamTarget,
    slot: SlotName,
    received: Arc<Received>,
    parked: Arc<ParkedAggregates>,
    (relay_id, lease_token): (String, i64),
    stop: CancellationToken,
) {
    let may_stream = hand_over_backlog(&pool, &slot, &relay_id, lease_token, &stop, || {
        parked.changed();
        received.wake();
    })
    .await;
    if may_stream {
        stream_while_leased(pool, target, slot, received, lease_token, stop).await;
    }
}

async fn stop_stream(stream: RunningStream) {
    stream.stop.cancel();
    if let Err(error) = stream.task.await {
        tracing::error!(%error, "the replication stream task failed");
    }
}

impl EventSource for LogicalSource {
    fn fetch_pending<'a>(&'a self, request: FetchRequest<'a>) -> Fetched<'a> {
        let FetchRequest {
            partitions,
            exclude,
            hold_dead,
            limit,
            ..
        } = request;
        Box::pin(async move {
            if !partitions.contains(&STREAM_PARTITION) || self.current_writer().is_none() {
                return Ok(Vec::new());
            }
            let parked = self.parked.current(self.pool(), hold_dead).await?;
            let mut events = if parked.is_empty() {
                Vec::new()
            } else {
                table_path::fetch_table_owned(self.pool(), hold_dead, limit, exclude).await?
            };
            if !events.is_empty() {
                self.lock_from_table()
                    .extend(events.iter().map(|claimed| claimed.event.id));
            }
            let taken_bytes = events
                .iter()
                .map(ClaimedEvent::payload_bytes)
                .sum::<usize>();
            let room = Room {
                events: usize::try_from(limit.events)
                    .unwrap_or(0)
                    .saturating_sub(events.len()),
                bytes: usize::try_from(limit.bytes)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(taken_bytes),
                // The fetch returns at least one event.
                must_take_one: events.is_empty(),
            };
            events.extend(self.fetch_streamed(&parked, exclude, room).await?);
            Ok(events)
        })
    }

    fn mark_published<'a>(&'a self, fence: Fence<'a>, ids: &'a [i64]) -> Written<'a> {
        Box::pin(async move {
            let Some((relay_id, lease_token)) = self.holds_stream(fence.leases) else {
                return Ok(0);
            };
            // A row fetched from the table is marked there, even when a copy
            // of it streamed again after a restart is unsettled too.
            let (streamed, table_owned): (Vec<i64>, Vec<i64>) = {
                let state = self.received.lock();
                let mut from_table = self.lock_from_table();
                let streamed = ids
                    .iter()
                    .copied()
                    .filter(|id| state.tracker.is_unsettled(*id))
                    .collect();
                let table_owned = ids
                    .iter()
                    .copied()
                    .filter(|id| from_table.remove(id) || !state.tracker.is_unsettled(*id))
                    .collect();
                (streamed, table_owned)
            };
            let mut marked = self.received.settle(&streamed);
            if !table_owned.is_empty() {
                let writer = Writer {
                    relay_id: &relay_id,
                    lease_token,
                };
                let table_marked =
                    table_path::mark_table_owned_published(self.pool(), writer, &table_owned).await;
                self.parked.changed();
                marked += table_marked?;
            }
            Ok(marked.min(ids.len() as u64))
        })
    }

    fn record_failures<'a>(&'a self, fence: Fence<'a>, failed: &'a [FailedAttempt]) -> Written<'a> {
        Box::pin(async move {
            let Some((relay_id, lease_token)) = self.holds_stream(fence.leases) else {
                return Ok(0);
            };
            let writer = Writer {
                relay_id: &relay_id,
                lease_token,
            };
            {
                let mut from_table = self.lock_from_table();
                for failure in failed {
                    from_table.remove(&failure.id);
                }
            }
            let recorded = table_path::record_failures(self.pool(), writer, failed).await;
            self.parked.changed();
            let recorded = recorded?;
            // Durably recorded: the stream may move past them.
            self.received.settle(&recorded.settled);
            Ok(recorded.updated)
        })
    }

    fn watch_commits(&self, wakeup: Wakeup, tasks: &Tasks) {
        self.received.set_wakeup(wakeup);
        *self
            .tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = tasks.clone();
    }

    fn quiet_notifications<'a>(
        &'a self,
        relay_id: &'a str,
        window: std::time::Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        self.store.quiet_notifications(relay_id, window)
    }

    /// The stream tells of commits: the producers' `NOTIFY` is never needed.
    fn waits_for_notifications(&self) -> bool {
        false
    }
}

impl LeaseStore for LogicalSource {
    fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>> {
        Box::pin(std::future::ready(Ok(1)))
    }

    fn heartbeat<'a>(
        &'a self,
        relay_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<i64, Error>> {
        self.store.heartbeat(relay_id, ttl)
    }

    fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        self.store.deregister(relay_id)
    }

    fn renew_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
        ttl: Duration,
    ) -> Leased<'a> {
        Box::pin(async move {
            let mut renewed = Vec::new();
            for lease in leases
                .iter()
                .filter(|lease| lease.partition_no == STREAM_PARTITION)
            {
                let token: Option<i64> = sqlx::query_scalar(sql::renew_stream_lease)
                    .bind(relay_id)
                    .bind(ttl.as_secs_f64())
                    .bind(lease.lease_token)
                    .fetch_optional(self.pool())
                    .await?;
                match token {
                    Some(_) if self.stream_is_stuck(ttl) => {
                        self.give_up(relay_id, lease).await?;
                    }
                    Some(_) => renewed.push(*lease),
                    None => self.stop_stream_of(Some(std::slice::from_ref(lease))).await,
                }
            }
            Ok(renewed)
        })
    }

    fn acquire_leases<'a>(&'a self, relay_id: &'a str, limit: i64, ttl: Duration) -> Leased<'a> {
        Box::pin(async move {
            if limit < 1 || self.in_give_up_pause(ttl) {
                return Ok(Vec::new());
            }
            let token: Option<i64> = sqlx::query_scalar(sql::acquire_stream_lease)
                .bind(relay_id)
                .bind(ttl.as_secs_f64())
                .fetch_optional(self.pool())
                .await?;
            let Some(lease_token) = token else {
                return Ok(Vec::new());
            };
            tracing::info!(slot = %self.slot, lease_token, "acquired the stream lease");
            self.start_stream(relay_id, lease_token).await;
            Ok(vec![Lease {
                partition_no: STREAM_PARTITION,
                lease_token,
            }])
        })
    }

    fn release_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            self.stop_stream_of(Some(leases)).await;
            let mut released = 0;
            for lease in leases
                .iter()
                .filter(|lease| lease.partition_no == STREAM_PARTITION)
            {
                released += sqlx::query(sql::release_stream_lease)
                    .bind(relay_id)
                    .bind(lease.lease_token)
                    .execute(self.pool())
                    .await?
                    .rows_affected();
            }
            Ok(released)
        })
    }
}
