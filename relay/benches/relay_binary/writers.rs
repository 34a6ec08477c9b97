//! How the bench writes events, as an application would: plain SQL
//! `INSERT`s of the contract columns. A backlog is written 500 events per
//! transaction, a backlog of large payloads 10 per transaction; steady
//! producers commit one event per transaction on a fixed schedule.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::Connection;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::keys::{KeyDistribution, Keys};
use crate::sql::{INSERT_EVENT, INSERT_PAYLOAD_BACKLOG};
use crate::support::events::{AGGREGATE_TYPE, EVENT_TYPE, SOURCE, payload};

/// Events per transaction of a backlog.
const BACKLOG_TRANSACTION: u64 = 500;

/// One event written: its id, aggregate and payload.
#[derive(Clone)]
pub(crate) struct Written {
    pub(crate) event_id: Uuid,
    pub(crate) aggregate_id: String,
    pub(crate) payload: String,
}

async fn insert<'c, E>(executor: E, topic: &str, event: &Written) -> Result<(), sqlx::Error>
where
    E: sqlx::PgExecutor<'c>,
{
    sqlx::query(INSERT_EVENT)
        .bind(event.event_id)
        .bind(EVENT_TYPE)
        .bind(SOURCE)
        .bind(AGGREGATE_TYPE)
        .bind(&event.aggregate_id)
        .bind(topic)
        .bind(&event.payload)
        .execute(executor)
        .await
        .map(|_| ())
}

/// Write `events` pending events for `topic`: one `INSERT` per event, 500
/// per transaction, keys from `distribution`. No `ANALYZE` follows.
pub(crate) async fn write_backlog(
    pool: &sqlx::PgPool,
    topic: &str,
    distribution: KeyDistribution,
    events: u64,
    payload_bytes: usize,
) -> Duration {
    write_backlog_in(
        pool,
        topic,
        distribution,
        events,
        payload_bytes,
        BACKLOG_TRANSACTION,
    )
    .await
}

/// [`write_backlog`] with `per_transaction` events per transaction.
pub(crate) async fn write_backlog_in(
    pool: &sqlx::PgPool,
    topic: &str,
    distribution: KeyDistribution,
    events: u64,
    payload_bytes: usize,
    per_transaction: u64,
) -> Duration {
    let started = Instant::now();
    for rows in backlog_transactions(distribution, events, per_transaction) {
        let mut transaction = pool.begin().await.expect("begin");
        for (aggregate_id, number) in rows {
            let event = Written {
                event_id: Uuid::now_v7(),
                payload: payload(&aggregate_id, number, payload_bytes),
                aggregate_id,
            };
            insert(&mut *transaction, topic, &event)
                .await
                .expect("insert event");
        }
        transaction.commit().await.expect("commit");
    }
    started.elapsed()
}

/// A backlog's transactions: events numbered from 0 to `events`, in runs
/// of `per_transaction`, each with its aggregate drawn from
/// `distribution` (the same draws for every backlog of that distribution).
pub(crate) fn backlog_transactions(
    distribution: KeyDistribution,
    events: u64,
    per_transaction: u64,
) -> impl Iterator<Item = Vec<(String, u64)>> {
    let mut keys = Keys::new(distribution, 0x0b0c);
    let per_transaction = per_transaction.max(1);
    (0..events.div_ceil(per_transaction)).map(move |run| {
        let start = run * per_transaction;
        (start..(start + per_transaction).min(events))
            .map(|number| (keys.next_aggregate(), number))
            .collect()
    })
}

/// Events per transaction of a backlog of large payloads.
const PAYLOAD_TRANSACTION: u64 = 10;

/// Write `events` pending events for `topic` with payloads of about
/// `payload_bytes`, by plain SQL: one multi-row `INSERT ... SELECT` per
/// transaction of 10, over `aggregates` aggregates in turn. No `ANALYZE`
/// follows.
pub(crate) async fn write_payload_backlog(
    pool: &sqlx::PgPool,
    topic: &str,
    events: u64,
    payload_bytes: usize,
    aggregates: u64,
) -> Duration {
    let started = Instant::now();
    // The JSON around the padding: `{"note": "", "sequence": n,
    // "shipment": "s-n"}`.
    let pad = i32::try_from(payload_bytes.saturating_sub(45)).expect("payload size fits an int4");
    let mut first = 1;
    while first <= events {
        let last = (first + PAYLOAD_TRANSACTION - 1).min(events);
        sqlx::query(INSERT_PAYLOAD_BACKLOG)
            .bind(first as i64)
            .bind(last as i64)
            .bind(topic)
            .bind(pad)
            .bind(aggregates as i64)
            .bind(EVENT_TYPE)
            .bind(SOURCE)
            .bind(AGGREGATE_TYPE)
            .execute(pool)
            .await
            .expect("insert a transaction of large payloads");
        first = last + 1;
    }
    started.elapsed()
}

/// The schedule of steady producers.
#[derive(Clone, Copy)]
pub(crate) struct Pace {
    /// Concurrent writers, each with its own connection.
    pub(crate) writers: u64,
    /// Events per second, all writers together.
    pub(crate) rate: u64,
    /// Events at most; the writers also stop when cancelled.
    pub(crate) limit: u64,
    pub(crate) distribution: KeyDistribution,
    pub(crate) payload_bytes: usize,
}

/// What steady producers did.
pub(crate) struct Produced {
    /// When each event's `COMMIT` returned, by event id.
    pub(crate) commits: HashMap<Uuid, Instant>,
    /// Each transaction, from just before its `BEGIN` to its `COMMIT`'s
    /// return: what the relay's commit-to-ack histogram counts before the
    /// commit, its origin being the transaction's `now()`.
    pub(crate) transactions: Vec<Duration>,
    /// Events committed per second, over the writing time.
    pub(crate) rate: f64,
}

/// Commit one event per transaction on a fixed schedule of `pace.rate`
/// events/s over `pace.writers` writers, each on a connection of its own
/// (the pool needs that many), until `pace.limit` events or
/// `stop`. After each commit, `after_commit` is called with the event (a
/// direct publish, for the baseline; nothing for the relay).
pub(crate) async fn write_steadily<F, Fut>(
    pool: &sqlx::PgPool,
    topic: &str,
    pace: Pace,
    stop: CancellationToken,
    after_commit: F,
) -> Produced
where
    F: Fn(Written) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let commits: Arc<Mutex<HashMap<Uuid, Instant>>> = Arc::default();
    let transactions: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let period = Duration::from_secs_f64(1.0 / pace.rate.max(1) as f64);
    let started = Instant::now();
    let tasks: Vec<_> = (0..pace.writers)
        .map(|writer| {
            let pool = pool.clone();
            let topic = topic.to_owned();
            let commits = Arc::clone(&commits);
            let transactions = Arc::clone(&transactions);
            let stop = stop.clone();
            let after_commit = after_commit.clone();
            tokio::spawn(async move {
                let mut connection = pool.acquire().await.expect("writer connection");
                let mut keys = Keys::new(pace.distribution, 0x5eed + writer);
                let mut sequence = writer;
                while sequence < pace.limit && !stop.is_cancelled() {
                    let due = started + period * sequence as u32;
                    tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
                    let aggregate_id = keys.next_aggregate();
                    let event = Written {
                        event_id: Uuid::now_v7(),
                        payload: payload(&aggregate_id, sequence, pace.payload_bytes),
                        aggregate_id,
                    };
                    let begun = Instant::now();
                    let mut transaction = connection.begin().await.expect("begin");
                    insert(&mut *transaction, &topic, &event)
                        .await
                        .expect("insert event");
                    transaction.commit().await.expect("commit");
                    let committed = Instant::now();
                    commits.lock().unwrap().insert(event.event_id, committed);
                    transactions.lock().unwrap().push(committed - begun);
                    after_commit(event).await;
                    sequence += pace.writers;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
    let elapsed = started.elapsed();
    let commits = std::mem::take(&mut *commits.lock().unwrap());
    let transactions = std::mem::take(&mut *transactions.lock().unwrap());
    Produced {
        rate: commits.len() as f64 / elapsed.as_secs_f64(),
        commits,
        transactions,
    }
}
