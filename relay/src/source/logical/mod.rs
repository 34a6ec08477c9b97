//! The logical source: committed `outbox_events` inserts read from
//! PostgreSQL's WAL through a replication slot (pgoutput, a publication of
//! inserts of `outbox_events` only), instead of polling the table.
//!
//! - `slot.rs`: start-up checks, the slot and publication, their status.
//! - `slot_backlog.rs`: the events committed before the slot existed,
//!   handed to the table path before the stream opens.
//! - `stream.rs`: the replication connection, one session at a time.
//! - `server_probe.rs`: a plain connection beside the stream that ends it
//!   when the server shuts down.
//! - `pgoutput.rs`: pgoutput messages decoded into events.
//! - `acknowledgements.rs`: which position may be confirmed to the server.
//! - `received.rs`: streamed events not yet settled, shared by the stream
//!   and the source.
//! - `table_path.rs`: the failure path, through the table.
//! - `parked.rs`: the aggregates the table path holds.
//! - `catch_up.rs`: the slot's backlog handed to the table path before the
//!   stream opens.
//! - `source.rs`: [`LogicalSource`], the event source and the stream lease.
//!
//! What operators do with the slot (`recover-slot`, `leave-logical`,
//! retention and replay of streamed events, the slot's gauges) lives in
//! [`crate::operator`].
//!
//! **Acknowledgement.** Happy path: no row is written. An event is settled
//! when the broker acknowledged it, or when it was durably recorded in the
//! table (a failure, or a hold behind one). The slot's confirmed position
//! moves to the end of a transaction only once every event of it and of
//! every transaction before it is settled; a relay that stops or dies
//! before that has its unsettled transactions streamed again (at least
//! once).
//!
//! **One stream, standbys.** Every relay competes for the stream's lease
//! (row `-1` of `outbox_partitions`, with a fencing token); its holder
//! streams, the others retry every third of `lease_duration` and take over
//! once the lease expires.

mod acknowledgements;
mod catch_up;
mod parked;
pub(crate) mod pgoutput;
mod received;
mod server_probe;
pub(crate) mod slot;
pub(crate) mod slot_backlog;
mod source;
mod stream;
pub(crate) mod table_path;

use sqlx::PgPool;

pub use crate::source::SlotName;
pub use slot::{
    DroppedSlot, SlotStatus, check_prerequisites, ensure_slot_and_publication, missing_slot_error,
    relay_slots, slot_status,
};
pub use slot_backlog::SlotBacklog;
// What only this project's tests reach for.
#[cfg(feature = "test-util")]
pub use crate::source::DEFAULT_SLOT;
#[cfg(feature = "test-util")]
pub use slot::{OUTPUT_PLUGIN, check_stream_prerequisites, check_wal_level};
#[cfg(feature = "test-util")]
pub use slot_backlog::{BACKLOG_NOTE, BacklogBound, HANDED_OVER_NOTE, slot_backlogs};
pub use source::LogicalSource;

use crate::error::Error;

sql_files!(
    ensure_stream_lease,
    create_table_owned_index,
    create_table_blockers_index,
    index_exists,
    create_checkpoints,
    create_slot_backlogs,
    lock_table_preparation,
    quiet_notices
);

/// Check that the database can stream, then create what the logical source
/// needs when it is missing: the publication, the slot (with its backlog:
/// the events committed before it, see `slot_backlog.rs`), the stream's
/// lease row, the index of the failure path, the retention checkpoints and
/// the backlog table. Run on a migrated database.
///
/// # Errors
/// [`Error::Logical`] for a server, role or slot that cannot stream;
/// [`Error::Database`] when a statement fails.
pub async fn prepare(pool: &PgPool, slot: &SlotName) -> Result<(), Error> {
    check_prerequisites(pool, slot).await?;
    prepare_tables(pool).await?;
    ensure_slot_and_publication(pool, slot, DroppedSlot::Refuse).await?;
    Ok(())
}

/// What the logical source keeps in tables, created when missing: the
/// stream's lease row, the index of the failure path, the retention
/// checkpoints and the slots' backlogs. One relay at a time prepares them,
/// in one transaction: relays started together would otherwise race on
/// the catalog.
pub(crate) async fn prepare_tables(pool: &PgPool) -> Result<(), Error> {
    let mut transaction = pool.begin().await?;
    for statement in [
        sql::quiet_notices,
        sql::lock_table_preparation,
        sql::ensure_stream_lease,
    ] {
        sqlx::query(statement).execute(&mut *transaction).await?;
    }
    // CREATE INDEX locks the table against writers before it looks for the
    // index, even with IF NOT EXISTS, and waits for every transaction
    // writing to it: look first.
    for (index, create) in [
        (
            "outbox_events_table_owned_idx",
            sql::create_table_owned_index,
        ),
        (
            "outbox_events_table_blockers_idx",
            sql::create_table_blockers_index,
        ),
    ] {
        let exists: bool = sqlx::query_scalar(sql::index_exists)
            .bind(index)
            .fetch_one(&mut *transaction)
            .await?;
        if !exists {
            sqlx::query(create).execute(&mut *transaction).await?;
        }
    }
    for statement in [sql::create_checkpoints, sql::create_slot_backlogs] {
        sqlx::query(statement).execute(&mut *transaction).await?;
    }
    transaction.commit().await?;
    Ok(())
}
