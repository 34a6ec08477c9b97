//! A migrated test database with a slot of its own, and events written in
//! transactions the test controls.

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::event::{ClaimedEvent, FetchLimit, FetchRequest, Lease};
use outbox_relay::leases::LeaseStore;
use outbox_relay::source::EventSource;
use outbox_relay::source::logical::{LogicalSource, SlotName, prepare};
use outbox_relay::store::OperatorStore;
use outbox_relay::store::PostgresStore;
use outbox_testkit::{ReplicationSlotGuard, TestDatabase, unique_slot_name};

use outbox_testkit::Collected;

use crate::support::process::{FAST_CONFIG, RelayProcess, wait_until};
use crate::support::workload::check_delivery;

/// Waits in these tests are bounded by this; no test asserts a duration.
pub const WAIT: Duration = Duration::from_secs(30);

/// Bounds the waits for deliveries through a broker; no test asserts a
/// duration.
pub const DELIVERY_WAIT: Duration = Duration::from_secs(120);

/// SIGTERM `relay`; it must exit 0.
pub fn stop(relay: &mut RelayProcess) {
    relay.signal("TERM");
    let status = relay.wait_exit(WAIT);
    assert!(
        status.is_some_and(|status| status.success()),
        "the relay did not stop with exit 0: {status:?}\n{}",
        relay.log()
    );
}

/// A database prepared for the logical source, and its slot's guard
/// (declared after the database: it drops first).
pub struct LogicalDatabase {
    pub _slot_guard: ReplicationSlotGuard,
    pub db: TestDatabase<sqlx::Postgres>,
    pub store: Arc<PostgresStore>,
    pub slot: SlotName,
}

impl LogicalDatabase {
    /// A fresh database, migrated, with the slot and publication made.
    pub async fn new() -> Self {
        let db = outbox_testkit::postgres().await;
        let slot_name = unique_slot_name("outbox_test");
        let slot_guard = ReplicationSlotGuard::new(db.url(), &slot_name);
        let store = Arc::new(PostgresStore::connect(db.url()).await.expect("connect"));
        store.migrate().await.expect("migrate");
        let slot = SlotName::parse(&slot_name).expect("slot name");
        prepare(store.pool(), &slot)
            .await
            .expect("prepare the slot");
        LogicalDatabase {
            _slot_guard: slot_guard,
            db,
            store,
            slot,
        }
    }

    /// A fresh database, migrated, with no slot nor publication yet: the
    /// first relay (or `migrate --source logical`) creates them. The slot's
    /// name is reserved, and its guard drops whatever slot gets that name.
    pub async fn without_slot() -> Self {
        let db = outbox_testkit::postgres().await;
        let slot_name = unique_slot_name("outbox_test");
        let slot_guard = ReplicationSlotGuard::new(db.url(), &slot_name);
        let store = Arc::new(PostgresStore::connect(db.url()).await.expect("connect"));
        store.migrate().await.expect("migrate");
        LogicalDatabase {
            _slot_guard: slot_guard,
            db,
            store,
            slot: SlotName::parse(&slot_name).expect("slot name"),
        }
    }

    /// `outbox-relay <args>` on this database, with `--slot` of its slot
    /// after them; exit status, stdout and stderr.
    pub fn command(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(args)
            .args([
                "--database-url",
                self.db.url(),
                "--slot",
                self.slot.as_str(),
            ])
            .env_remove("OUTBOX_SOURCE")
            .output()
            .expect("run outbox-relay")
    }

    /// A source on this database's slot.
    pub fn source(&self) -> Arc<LogicalSource> {
        Arc::new(self.new_source())
    }

    /// A source on this database's slot whose stream buffers at most
    /// `bytes` of payloads.
    pub fn source_buffering(&self, bytes: usize) -> Arc<LogicalSource> {
        Arc::new(self.new_source().with_buffer_bytes(bytes))
    }

    fn new_source(&self) -> LogicalSource {
        LogicalSource::new(Arc::clone(&self.store), self.db.url(), self.slot.clone())
            .expect("source")
    }

    /// The slot's confirmed position, as `pg_lsn` text ordered by value.
    pub async fn confirmed_flush(&self) -> u64 {
        let text: String = sqlx::query_scalar(
            "SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::text FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(self.slot.as_str())
        .fetch_one(self.db.pool())
        .await
        .expect("slot position");
        text.parse().expect("numeric position")
    }
}

impl LogicalDatabase {
    /// `outbox-relay run --source logical` on this database and its slot,
    /// publishing to `broker`, with the tests' fast settings.
    pub fn spawn_relay(&self, broker: &str) -> RelayProcess {
        RelayProcess::spawn_with_args(
            self.db.url(),
            broker,
            FAST_CONFIG,
            &[],
            &["--source", "logical", "--slot", self.slot.as_str()],
        )
    }

    /// `outbox-relay status --json` of this database.
    pub fn status_json(&self) -> serde_json::Value {
        self.status_json_with(&[])
    }

    /// `outbox-relay status --json` of this database, with `args` (such
    /// as `--source logical`).
    pub fn status_json_with(&self, args: &[&str]) -> serde_json::Value {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(["status", "--json", "--database-url", self.db.url()])
            .args(args)
            .env_remove("OUTBOX_SOURCE")
            .output()
            .expect("run status");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("status JSON")
    }

    /// `outbox-relay recover-slot --slot <this slot> --since <since>` on
    /// this database; its exit status, stdout and stderr.
    pub fn recover_slot(&self, since: &str) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(["recover-slot", "--database-url", self.db.url()])
            .args(["--slot", self.slot.as_str(), "--since", since])
            .output()
            .expect("run recover-slot")
    }

    /// Wait until more than `events` rows are in the outbox table.
    pub async fn until_committed(&self, events: i64) {
        assert!(
            wait_until(WAIT, || async {
                self.db.count("SELECT COUNT(*) FROM outbox_events").await > events
            })
            .await,
            "the writers commit more than {events} events"
        );
    }

    /// The database's clock, as RFC 3339.
    pub async fn database_now(&self) -> String {
        let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
            .fetch_one(self.db.pool())
            .await
            .expect("database time");
        now.to_rfc3339()
    }

    /// `pg_current_wal_lsn()` as a number: a position every transaction
    /// committed so far ends before.
    pub async fn current_wal_position(&self) -> u64 {
        let text: String =
            sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text")
                .fetch_one(self.db.pool())
                .await
                .expect("wal position");
        text.parse().expect("numeric position")
    }
}

/// Insert one event of `aggregate` in `transaction`; returns its id.
pub async fn insert_event(
    transaction: &mut sqlx::PgConnection,
    topic: &str,
    aggregate: &str,
    sequence: u64,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
         VALUES ($1, 'shipment.moved', '/shipments', 'shipment', $2, $3, $4) RETURNING id",
    )
    .bind(uuid::Uuid::now_v7())
    .bind(aggregate)
    .bind(topic)
    .bind(serde_json::json!({ "shipment": aggregate, "sequence": sequence }))
    .fetch_one(transaction)
    .await
    .expect("insert event")
}

/// Take the stream's lease as `relay_id`: the source starts streaming.
pub async fn acquire(source: &LogicalSource, relay_id: &str) -> Vec<Lease> {
    source
        .acquire_leases(relay_id, 1, Duration::from_secs(30))
        .await
        .expect("acquire the stream lease")
}

/// Fetch until at least `count` events are pending (bounded by [`WAIT`]).
pub async fn fetch_at_least(source: &LogicalSource, count: usize) -> Vec<ClaimedEvent> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let fetched = source
            .fetch_pending(FetchRequest {
                partition_count: 1,
                partitions: &[0],
                exclude: &[],
                hold_dead: true,
                limit: FetchLimit::events(1000),
            })
            .await
            .expect("fetch");
        if fetched.len() >= count || tokio::time::Instant::now() > deadline {
            return fetched;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until every one of `enqueued` arrived, then check each aggregate's
/// order; returns the duplicates.
pub async fn all_arrive(
    enqueued: &[uuid::Uuid],
    collected: &Collected,
    relay: &RelayProcess,
    limit: Duration,
) -> usize {
    let arrived = wait_until(limit, || async {
        collected.distinct_ids().len() >= enqueued.len()
    })
    .await;
    assert!(
        arrived,
        "{} of {} events arrived:\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        relay.log()
    );
    check_delivery(enqueued, &collected.snapshot())
}
