//! `outbox-relay leave-logical`: from `--source logical` back to polling,
//! with nothing lost and only the events the slot had not confirmed
//! published again.
//!
//! Streamed events are published without a write, so their rows stay
//! `pending`; a polling relay would publish every one of them again. Under
//! the stream's lease (so no relay streams meanwhile):
//! 1. the slot is peeked, which confirms nothing, for the transactions it
//!    would still send: those after its confirmed position;
//! 2. the stream-owned events (pending, no attempt, no note) of every other
//!    committed transaction are marked published, as polling marks them:
//!    each was acknowledged by the broker before the slot confirmed it. The
//!    events of the unconfirmed transactions stay pending, so the polling
//!    relays publish them (again, for those the stream had sent);
//! 3. the slot and its publication are dropped, so the slot keeps no more
//!    WAL, and retention's checkpoints, which describe the slot, with them.
//!
//! The events of the table path (failed, held or handed over, carrying an
//! attempt or a note) are left as they are: polling publishes them as it
//! publishes its own. Running it again after an interruption is safe: until
//! the slot is dropped each step can be repeated, and once it is, there is
//! nothing left to do.

use sqlx::{AssertSqlSafe, PgPool, Row};

use super::operator_lease::OperatorLease;
use super::slot::{SlotName, drop_publication_statement, slot_status};
use crate::Error;

const UNCONFIRMED_TRANSACTIONS: &str = include_str!("sql/unconfirmed_transactions.sql");
const MARK_CONFIRMED_STREAMED: &str = include_str!("sql/mark_confirmed_streamed.sql");
const COUNT_STREAM_OWNED: &str = include_str!("sql/count_stream_owned.sql");
const DROP_SLOT: &str = include_str!("sql/drop_slot.sql");
const FORGET_ALL_CHECKPOINTS: &str = include_str!("sql/forget_all_checkpoints.sql");

/// The SQLSTATE of a slot another connection uses.
const OBJECT_IN_USE: &str = "55006";

/// Events marked published per statement.
const MARK_BATCH: i64 = 5000;

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
            return Err(Error::Logical(format!(
                "there is no replication slot `{slot}` in this database, so which streamed events \
                 were published is unknown: run recover-slot to re-create it, or name the slot \
                 with --slot"
            )));
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
    let unconfirmed: Vec<String> = sqlx::query_scalar(UNCONFIRMED_TRANSACTIONS)
        .bind(slot.as_str())
        .bind(slot.publication())
        .fetch_all(pool)
        .await
        .map_err(|error| slot_in_use(slot, error))?;
    tracing::info!(
        slot = %slot,
        unconfirmed_transactions = unconfirmed.len(),
        "peeked at the transactions the slot has not confirmed"
    );
    let marked_published = mark_confirmed(pool, &unconfirmed, operator_id, lease_token).await?;
    sqlx::query(DROP_SLOT)
        .bind(slot.as_str())
        .execute(pool)
        .await?;
    sqlx::query(AssertSqlSafe(drop_publication_statement(
        slot.publication(),
    )))
    .execute(pool)
    .await?;
    sqlx::query(FORGET_ALL_CHECKPOINTS).execute(pool).await?;
    let left_pending: i64 = sqlx::query_scalar(COUNT_STREAM_OWNED)
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

/// Mark the confirmed stream-owned events published, a batch at a time;
/// returns how many.
async fn mark_confirmed(
    pool: &PgPool,
    unconfirmed: &[String],
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
