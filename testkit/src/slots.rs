//! Replication slots made by tests, dropped even when the test fails: a
//! forgotten slot keeps WAL on the shared server until its disk is full.
//!
//! [`ReplicationSlotGuard`] drops one slot when it goes out of scope (a
//! panicking test included); [`TestDatabase`](crate::TestDatabase) drops
//! every slot of its database before the database itself.

use sqlx::{Connection, PgConnection};

/// The statements that end a slot's streaming connection and drop it.
const TERMINATE_SLOT_SENDERS: &str = "SELECT pg_terminate_backend(active_pid) \
     FROM pg_replication_slots WHERE active_pid IS NOT NULL AND (slot_name = $1 OR database = $2)";
const SLOTS_TO_DROP: &str =
    "SELECT slot_name::text FROM pg_replication_slots WHERE slot_name = $1 OR database = $2";
const DROP_SLOT: &str = "SELECT pg_drop_replication_slot($1)";

/// Drops the replication slot it names when dropped.
pub struct ReplicationSlotGuard {
    admin_url: String,
    slot: String,
}

impl ReplicationSlotGuard {
    /// Guard `slot` on the server `database_url` points at.
    pub fn new(database_url: &str, slot: &str) -> Self {
        ReplicationSlotGuard {
            admin_url: database_url.to_owned(),
            slot: slot.to_owned(),
        }
    }

    /// The slot's name.
    pub fn slot(&self) -> &str {
        &self.slot
    }
}

impl Drop for ReplicationSlotGuard {
    fn drop(&mut self) {
        let (url, slot) = (self.admin_url.clone(), self.slot.clone());
        let dropper = std::thread::spawn(move || drop_slots_blocking(&url, Some(&slot), None));
        if let Err(panic) = dropper.join() {
            eprintln!("could not drop replication slot {}: {panic:?}", self.slot);
        }
    }
}

/// A unique slot name for one test.
pub fn unique_slot_name(prefix: &str) -> String {
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    format!("{prefix}_{}", &suffix[suffix.len() - 12..])
}

/// Drop the slot `slot` and every slot of `database`, ending their
/// streaming connections first, on a runtime of its own (callable from
/// `Drop`, inside or outside a test's runtime, on a thread of its own).
pub(crate) fn drop_slots_blocking(admin_url: &str, slot: Option<&str>, database: Option<&str>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("could not drop replication slots: {error}");
            return;
        }
    };
    if let Err(error) = runtime.block_on(drop_slots(admin_url, slot, database)) {
        eprintln!("could not drop replication slots: {error}");
    }
}

pub(crate) async fn drop_slots(
    admin_url: &str,
    slot: Option<&str>,
    database: Option<&str>,
) -> Result<(), sqlx::Error> {
    let mut admin = PgConnection::connect(admin_url).await?;
    // A terminated walsender releases its slot a moment later: retry.
    for _ in 0..50 {
        sqlx::query(TERMINATE_SLOT_SENDERS)
            .bind(slot)
            .bind(database)
            .execute(&mut admin)
            .await?;
        let slots: Vec<String> = sqlx::query_scalar(SLOTS_TO_DROP)
            .bind(slot)
            .bind(database)
            .fetch_all(&mut admin)
            .await?;
        if slots.is_empty() {
            return Ok(());
        }
        for name in slots {
            if let Err(error) = sqlx::query(DROP_SLOT).bind(&name).execute(&mut admin).await {
                eprintln!("dropping replication slot {name}: {error}; retrying");
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(())
}
