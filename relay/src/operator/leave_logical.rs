//! `outbox-relay leave-logical`: from `--source logical` back to polling,
//! with nothing lost and only the events the slot had not confirmed
//! published again.
//!
//! Streamed events are published without a write, so their rows stay
//! `pending`; a polling relay would publish every one of them again. Under
//! the stream's lease (so no relay streams meanwhile), while producers may
//! go on writing:
//! 1. a bound is taken: the oldest transaction running and the highest id
//!    committed. Only events of transactions finished before it may be
//!    marked; the WAL is flushed past their commit records before going on;
//! 2. the slot is peeked, which confirms nothing, and the events it would
//!    still send (those after its confirmed position) are decoded;
//! 3. the stream-owned events (pending, no attempt, no note) within the
//!    bound that the slot would not send again are marked published, as
//!    polling marks them: each was acknowledged by the broker before the
//!    slot confirmed it. Every other event stays pending, and the polling
//!    relays publish it (again, for those the stream had sent);
//! 4. retention's checkpoints, the publication and, last, the slot are
//!    dropped in one transaction, so the slot keeps no more WAL.
//!
//! The events of the table path (failed, held or handed over, carrying an
//! attempt or a note) are left as they are: polling publishes them as it
//! publishes its own. Running it again after an interruption is safe: until
//! the slot is dropped each step can be repeated, and once it is, there is
//! nothing left to do.

use std::time::Duration;

use futures::TryStreamExt;
use sqlx::{AssertSqlSafe, PgPool, Row};

use super::lease::OperatorLease;
use crate::error::Error;
use crate::source::SlotName;
use crate::source::logical::pgoutput::{Change, PgOutputDecoder};
use crate::source::logical::slot::{drop_publication_statement, missing_slot_error, slot_status};

sql_files!(
    leave_bound,
    wal_flushed_past,
    unconfirmed_changes,
    count_stream_owned,
    drop_slot
);
const MARK_CONFIRMED_STREAMED: &str = concat!(
    include_str!("../source/logical/sql/stream_lease_fence.sql"),
    include_str!("sql/mark_confirmed_streamed.sql")
);
const FORGET_ALL_CHECKPOINTS: &str =
    include_str!("../source/logical/sql/forget_all_checkpoints.sql");

/// The SQLSTATE of a slot another connection uses.
const OBJECT_IN_USE: &str = "55006";

/// Events marked published per statement.
const MARK_BATCH: i64 = 5000;

/// How long the WAL may take to be flushed past the bound (the WAL writer
/// flushes every `wal_writer_delay`, 200 ms by default), and how often
/// that is checked.
const FLUSH_WAIT: Duration = Duration::from_secs(30);
const FLUSH_POLL: Duration = Duration::from_millis(20);

/// What [`leave_logical`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftLogical {
    /// The slot, now dropped with its publication.
    pub slot: String,
    /// Streamed events the slot had confirmed, now marked published.
    pub marked_published: u64,
    /// Stream-owned events left pending, for the polling relays: those of
    /// the transactions the slot had not confirmed, and those committing
    /// while the command ran.
    pub left_pending: u64,
}

/// Leave the logical source as the module describes, holding the stream's
/// lease as `operator_id`. Run with every relay on the slot stopped.
///
/// # Errors
/// [`Error::Logical`] when the slot is missing or invalidated (which events
/// it confirmed is then unknown), or when the stream's lease is held or
/// lost; [`Error::Database`] when a statement fails.
pub async fn leave_logical(
    pool: &PgPool,
    slot: &SlotName,
    operator_id: &str,
) -> Result<LeftLogical, Error> {
    match slot_status(pool, slot).await? {
        None => {
            return Err(missing_slot_error(
                slot,
                "run recover-slot to re-create it, or name the slot with --slot",
            ));
        }
        Some(status) if status.is_lost() => {
            return Err(Error::Logical(format!(
                "PostgreSQL invalidated the replication slot `{slot}` (wal_status = lost), so \
                 which streamed events were published is unknown: run recover-slot, then the \
                 relays with --source logical until status shows nothing pending, then \
                 leave-logical again"
            )));
        }
        Some(_) => {}
    }
    let lease = OperatorLease::acquire(pool, operator_id, "leave-logical").await?;
    let left = leave_under_lease(pool, slot, operator_id, lease.token()).await;
    lease.release().await;
    left
}

async fn leave_under_lease(
    pool: &PgPool,
    slot: &SlotName,
    operator_id: &str,
    lease_token: i64,
) -> Result<LeftLogical, Error> {
    let bound = take_bound(pool).await?;
    let unconfirmed = unconfirmed_events(pool, slot).await?;
    tracing::info!(
        slot = %slot,
        unconfirmed_events = unconfirmed.len(),
        max_id = bound.max_id,
        "peeked at the events the slot has not confirmed"
    );
    let marked_published =
        mark_confirmed(pool, &bound, &unconfirmed, operator_id, lease_token).await?;
    drop_slot_and_publication(pool, slot).await?;
    let left_pending: i64 = sqlx::query_scalar(sql::count_stream_owned)
        .fetch_one(pool)
        .await?;
    let left_pending = u64::try_from(left_pending).unwrap_or(0);
    tracing::info!(
        slot = %slot,
        marked_published,
        left_pending,
        "left the logical source: the slot and its publication are dropped"
    );
    Ok(LeftLogical {
        slot: slot.as_str().to_owned(),
        marked_published,
        left_pending,
    })
}

/// What may be marked: events of the transactions finished when it was
/// taken, up to the highest id then committed.
struct Bound {
    /// The oldest transaction running then (xid8, as text).
    snapshot_xmin: String,
    max_id: i64,
}

/// Take the [`Bound`], and wait until the WAL is flushed past every commit
/// record of its transactions: the peek reads up to the flushed position
/// only, and with `synchronous_commit = off` a transaction is visible
/// before its commit record is flushed.
async fn take_bound(pool: &PgPool) -> Result<Bound, Error> {
    let row = sqlx::query(sql::leave_bound).fetch_one(pool).await?;
    let wal_position: String = row.try_get("wal_position")?;
    let bound = Bound {
        snapshot_xmin: row.try_get("snapshot_xmin")?,
        max_id: row.try_get("max_id")?,
    };
    let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
    loop {
        let flushed: bool = sqlx::query_scalar(sql::wal_flushed_past)
            .bind(&wal_position)
            .fetch_one(pool)
            .await?;
        if flushed {
            return Ok(bound);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Logical(format!(
                "the WAL was not flushed up to {wal_position} within {} s; nothing was changed: \
                 run leave-logical again",
                FLUSH_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(FLUSH_POLL).await;
    }
}

/// The ids of the events the slot would still send: decoded from a peek at
/// its Relation and Insert messages. Row ids, not transaction ids: a row
/// inserted after a savepoint carries its subtransaction's id, which the
/// stream reports under its top-level transaction.
async fn unconfirmed_events(pool: &PgPool, slot: &SlotName) -> Result<Vec<i64>, Error> {
    let mut changes = sqlx::query_scalar::<_, Vec<u8>>(sql::unconfirmed_changes)
        .bind(slot.as_str())
        .bind(slot.publication())
        .fetch(pool);
    let mut decoder = PgOutputDecoder::default();
    let mut ids = Vec::new();
    while let Some(message) = changes
        .try_next()
        .await
        .map_err(|error| slot_in_use(slot, error))?
    {
        let change = decoder
            .decode(&message)
            .map_err(|error| Error::Logical(format!("peeking at the slot `{slot}`: {error}")))?;
        if let Change::Inserted(event) = change {
            ids.push(event.event.id);
        }
    }
    Ok(ids)
}

/// Drop the slot last, in one transaction with its publication and
/// retention's checkpoints: until the slot is gone, leave-logical can run
/// again from the start.
async fn drop_slot_and_publication(pool: &PgPool, slot: &SlotName) -> Result<(), Error> {
    let mut transaction = outbox::begin_transaction(pool).await?;
    sqlx::query(FORGET_ALL_CHECKPOINTS)
        .execute(&mut *transaction)
        .await?;
    sqlx::query(AssertSqlSafe(drop_publication_statement(
        slot.publication(),
    )))
    .execute(&mut *transaction)
    .await?;
    sqlx::query(sql::drop_slot)
        .bind(slot.as_str())
        .execute(&mut *transaction)
        .await
        .map_err(|error| slot_in_use(slot, error))?;
    transaction.commit().await?;
    Ok(())
}

/// Mark the confirmed stream-owned events within `bound` published, a
/// batch at a time; returns how many.
async fn mark_confirmed(
    pool: &PgPool,
    bound: &Bound,
    unconfirmed: &[i64],
    operator_id: &str,
    lease_token: i64,
) -> Result<u64, Error> {
    let mut marked_published: u64 = 0;
    let mut after_id: i64 = 0;
    loop {
        let row = sqlx::query(MARK_CONFIRMED_STREAMED)
            .bind(operator_id)
            .bind(lease_token)
            .bind(unconfirmed)
            .bind(after_id)
            .bind(MARK_BATCH)
            .bind(bound.max_id)
            .bind(&bound.snapshot_xmin)
            .fetch_one(pool)
            .await?;
        let lease_held: i64 = row.try_get("lease_held")?;
        if lease_held == 0 {
            return Err(Error::Logical(format!(
                "the stream's lease was lost after {marked_published} event(s) were marked \
                 published; the slot is kept: run leave-logical again"
            )));
        }
        let marked: i64 = row.try_get("marked")?;
        marked_published += u64::try_from(marked).unwrap_or(0);
        match row.try_get::<Option<i64>, _>("last_id")? {
            Some(last_id) => after_id = last_id,
            None => return Ok(marked_published),
        }
    }
}

/// A peek refused because a replication connection still streams from the
/// slot (a relay killed before its lease expired, whose WAL sender has not
/// noticed yet) says so; any other error is passed on.
fn slot_in_use(slot: &SlotName, error: sqlx::Error) -> Error {
    let in_use = error
        .as_database_error()
        .and_then(|database| database.code())
        .is_some_and(|code| code == OBJECT_IN_USE);
    if in_use {
        Error::Logical(format!(
            "a replication connection still streams from the slot `{slot}` ({error}): wait until \
             it ends (at most wal_sender_timeout after its relay stopped), then run \
             leave-logical again"
        ))
    } else {
        error.into()
    }
}
