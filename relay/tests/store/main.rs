//! The relay's store against real PostgreSQL, MariaDB and SQLite: every
//! method of `LeaseStore`, `EventSource` and `OperatorStore`, each scenario
//! once per backend on a fresh database. Dead-event repair (`list_dead`,
//! `retry_dead`, `discard_dead`) runs in `the_backlog_reads_pending_and_dead_events_only`
//! and, through the CLI, in `dead_repair.rs`.

mod events;
mod leases;
mod operator;

use std::sync::Arc;
use std::time::Duration;

use outbox::Event;
use outbox_relay::event::{ClaimedEvent, FailedAttempt, Fence, FetchLimit, FetchRequest, Lease};
use outbox_relay::source::OutboxStore;
use outbox_relay::store::{MySqlStore, PostgresStore, SqliteStore};
use outbox_testkit::{TestBackend, TestDatabase};
use serde::Serialize;

use events::{
    a_commit_raises_the_watched_wakeup_where_the_backend_notifies,
    a_failed_event_holds_back_its_aggregate_only, a_fetch_stops_at_its_byte_cap,
    a_hand_written_created_at_is_read_as_the_same_instant,
};
use leases::{
    a_lost_lease_cannot_mark_or_fail_rows, concurrent_acquirers_split_the_partitions,
    heartbeat_counts_live_relays_and_deregister_forgets_one,
    the_delete_mark_removes_acknowledged_rows_under_a_live_lease_only,
    the_same_owner_with_an_old_token_is_fenced_out,
};
use operator::{
    database_time_is_the_clock_of_created_at, fetch_published_pages_one_topic_in_id_order,
    retention_deletes_only_old_published_events, the_backlog_reads_pending_and_dead_events_only,
    topic_exists_finds_events_in_any_state,
};

#[derive(Serialize, Event)]
#[event(
    type = "account.credited",
    aggregate = "account",
    topic = "accounts",
    source = "/accounts"
)]
pub(crate) struct AccountCredited {
    #[event(aggregate_id)]
    pub(crate) account: String,
    pub(crate) amount: i64,
}

pub(crate) const LONG: Duration = Duration::from_secs(60);

pub(crate) async fn enqueue<DB: outbox::Backend>(
    db: &TestDatabase<DB>,
    events: &[(&str, i64)],
) -> Vec<uuid::Uuid> {
    let events: Vec<AccountCredited> = events
        .iter()
        .map(|(account, amount)| AccountCredited {
            account: (*account).to_owned(),
            amount: *amount,
        })
        .collect();
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::enqueue_batch(&mut tx, &events)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    ids
}

/// As relay "relay": take every partition and fetch what is due.
pub(crate) async fn lease_all_and_fetch(
    store: &dyn OutboxStore,
    partition_count: i32,
) -> (Vec<Lease>, Vec<ClaimedEvent>) {
    let leases = store
        .acquire_leases("relay", 1000, LONG)
        .await
        .expect("acquire");
    let fetched = store
        .fetch_pending(fetch_request(partition_count, &partitions(&leases), &[]))
        .await
        .expect("fetch");
    (leases, fetched)
}

/// As relay "relay": mark `published`, and move `dead` to the dead state.
pub(crate) async fn publish_and_kill(
    store: &dyn OutboxStore,
    partition_count: i32,
    leases: &[Lease],
    published: &[i64],
    dead: &ClaimedEvent,
) {
    store
        .mark_published(
            Fence {
                relay_id: "relay",
                partition_count,
                leases,
            },
            published,
        )
        .await
        .expect("mark");
    let last_attempt = FailedAttempt {
        id: dead.event.id,
        partition_no: dead.partition_no,
        error: "rejected".to_owned(),
        retry_in: None,
    };
    store
        .record_failures(
            Fence {
                relay_id: "relay",
                partition_count,
                leases,
            },
            &[last_attempt],
        )
        .await
        .expect("record");
}

pub(crate) fn partitions(leases: &[Lease]) -> Vec<i32> {
    leases.iter().map(|lease| lease.partition_no).collect()
}

/// The batch loop's usual fetch of `partitions`: at most 100 events,
/// leaving out `exclude`, a dead event holding its aggregate back.
pub(crate) fn fetch_request<'a>(
    partition_count: i32,
    partitions: &'a [i32],
    exclude: &'a [i64],
) -> FetchRequest<'a> {
    FetchRequest {
        partition_count,
        partitions,
        exclude,
        hold_dead: true,
        limit: FetchLimit::events(100),
    }
}

/// The backend's store, over the test database's pool.
pub(crate) trait StoreBackend: outbox::Backend + TestBackend {
    /// Whether `watch_commits` hears of commits (PostgreSQL's `NOTIFY`).
    const NOTIFIES_COMMITS: bool;

    fn store(db: &TestDatabase<Self>) -> Arc<dyn OutboxStore>;
}

impl StoreBackend for sqlx::Postgres {
    const NOTIFIES_COMMITS: bool = true;

    fn store(db: &TestDatabase<Self>) -> Arc<dyn OutboxStore> {
        Arc::new(PostgresStore::new(db.pool().clone()))
    }
}

impl StoreBackend for sqlx::MySql {
    const NOTIFIES_COMMITS: bool = false;

    fn store(db: &TestDatabase<Self>) -> Arc<dyn OutboxStore> {
        Arc::new(MySqlStore::new(db.pool().clone()))
    }
}

impl StoreBackend for sqlx::Sqlite {
    const NOTIFIES_COMMITS: bool = false;

    fn store(db: &TestDatabase<Self>) -> Arc<dyn OutboxStore> {
        Arc::new(SqliteStore::new(db.pool().clone()))
    }
}

outbox_testkit::test_on_every_backend!(
    a_lost_lease_cannot_mark_or_fail_rows,
    the_delete_mark_removes_acknowledged_rows_under_a_live_lease_only,
    the_same_owner_with_an_old_token_is_fenced_out,
    concurrent_acquirers_split_the_partitions,
    heartbeat_counts_live_relays_and_deregister_forgets_one,
    a_failed_event_holds_back_its_aggregate_only,
    a_fetch_stops_at_its_byte_cap,
    a_hand_written_created_at_is_read_as_the_same_instant,
    a_commit_raises_the_watched_wakeup_where_the_backend_notifies,
    retention_deletes_only_old_published_events,
    the_backlog_reads_pending_and_dead_events_only,
    database_time_is_the_clock_of_created_at,
    topic_exists_finds_events_in_any_state,
    fetch_published_pages_one_topic_in_id_order,
);
