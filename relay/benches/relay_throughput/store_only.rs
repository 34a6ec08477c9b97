//! The store's statements alone, without a broker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_relay::event::{Fence, FetchLimit, FetchRequest};
use outbox_relay::leases::LeaseStore;
use outbox_relay::source::EventSource;
use outbox_relay::store::PostgresStore;

use crate::Settings;
use crate::events::enqueue_all;
use crate::support::events::unique_name;
use crate::targets::create_database;

pub(crate) struct StoreOnly {
    pub(crate) batch_size: u32,
    pub(crate) fetch_ms: f64,
    pub(crate) fetch_double_ms: f64,
    pub(crate) serial_rate: f64,
    pub(crate) serial_fetch: Duration,
    pub(crate) serial_mark: Duration,
}

/// On a table of `settings.events` pending events: the time of one
/// `fetch_pending` of `batch_size` rows and of twice as many (what the
/// dispatcher asks for while the previous batch's mark is in flight), then a
/// serial loop of fetch + `mark_published` over the whole table, as the
/// relay would run it with an infinitely fast broker and no overlap.
pub(crate) async fn store_only(settings: &Settings, batch_size: u32) -> StoreOnly {
    const REPEAT: u32 = 20;
    let database = create_database().await;
    enqueue_all(settings, &database.pool, "store-only").await;
    let opened = Arc::new(
        PostgresStore::connect_with(&database.url, outbox_relay::store::Connections::KeptOpen)
            .await
            .expect("open store"),
    );
    let store = Arc::clone(&opened);
    let relay_id = unique_name("store");
    let partition_count = store.partition_count().await.expect("partition count");
    let leases = store
        .acquire_leases(
            &relay_id,
            i64::from(partition_count),
            Duration::from_secs(600),
        )
        .await
        .expect("acquire leases");
    let partitions: Vec<i32> = leases.iter().map(|lease| lease.partition_no).collect();
    let limit = i64::from(batch_size);
    let timed_fetch = async |limit: i64| {
        let started = Instant::now();
        for _ in 0..REPEAT {
            store
                .fetch_pending(FetchRequest {
                    partition_count,
                    partitions: &partitions,
                    exclude: &[],
                    hold_dead: false,
                    limit: FetchLimit::events(limit),
                })
                .await
                .expect("fetch");
        }
        started.elapsed().as_secs_f64() * 1e3 / f64::from(REPEAT)
    };
    let fetch_ms = timed_fetch(limit).await;
    let fetch_double_ms = timed_fetch(2 * limit).await;

    let mut serial_fetch = Duration::ZERO;
    let mut serial_mark = Duration::ZERO;
    let mut marked = 0u64;
    let started = Instant::now();
    loop {
        let fetch_started = Instant::now();
        let batch = store
            .fetch_pending(FetchRequest {
                partition_count,
                partitions: &partitions,
                exclude: &[],
                hold_dead: false,
                limit: FetchLimit::events(limit),
            })
            .await
            .expect("fetch");
        serial_fetch += fetch_started.elapsed();
        if batch.is_empty() {
            break;
        }
        let ids: Vec<i64> = batch.iter().map(|claimed| claimed.event.id).collect();
        let mark_started = Instant::now();
        marked += store
            .mark_published(
                Fence {
                    relay_id: &relay_id,
                    partition_count,
                    leases: &leases,
                },
                &ids,
            )
            .await
            .expect("mark");
        serial_mark += mark_started.elapsed();
    }
    let elapsed = started.elapsed();
    assert_eq!(marked, settings.events, "store-only: rows marked");
    store.release_leases(&relay_id, &leases).await.ok();
    opened.pool().close().await;
    drop(store);
    drop(opened);
    database.drop_database().await;
    StoreOnly {
        batch_size,
        fetch_ms,
        fetch_double_ms,
        serial_rate: marked as f64 / elapsed.as_secs_f64(),
        serial_fetch,
        serial_mark,
    }
}

pub(crate) fn print_store_only(result: &StoreOnly) {
    println!(
        "  store alone, batch_size {}: fetch_pending {:.2} ms for {} rows, {:.2} ms for {} rows; serial fetch+mark loop {:.0} rows/s (fetch {:.2} s, mark {:.2} s)",
        result.batch_size,
        result.fetch_ms,
        result.batch_size,
        result.fetch_double_ms,
        2 * result.batch_size,
        result.serial_rate,
        result.serial_fetch.as_secs_f64(),
        result.serial_mark.as_secs_f64(),
    );
}
