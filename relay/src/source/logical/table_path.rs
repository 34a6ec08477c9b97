//! The failure path of the logical source: what the stream cannot settle
//! by publishing goes through the table, with the polling relay's
//! semantics.
//!
//! - A rejected event is recorded as the polling relay records it
//!   (`attempts`, `last_error`, `next_attempt_at`, or `dead`).
//! - Its aggregate is then *parked*: later events of it that arrive on the
//!   stream are *held* (marked by `last_error`, no attempt used) instead of
//!   published, so its order is kept.
//! - Due events of parked aggregates are fetched from the table in id
//!   order, behind a waiting retry (or a dead event, under `hold`) exactly
//!   as polling fetches them, and marked published once acknowledged.
//! - An aggregate unparks once none of its events is held or failed and
//!   unpublished; `dead retry` and `dead discard` repair it as with polling.
//!
//! Every write is fenced by the stream's lease. Recording a failure or a
//! hold is what settles a streamed event, so the slot moves past it.

use std::collections::HashSet;

use sqlx::{PgPool, Row};

use crate::error::Error;
use crate::event::AggregateKey;
use crate::event::{ClaimedEvent, FailedAttempt, FetchLimit};
use crate::store::rows::claimed_from_row;

sql_files!(
    parked_aggregates,
    fetch_table_owned,
    mark_table_owned_published,
    fenced_hold_events = stream_lease_fence + hold_events,
    fenced_record_failure = stream_lease_fence + record_failure
);
/// Run before `sql/parked_aggregates.sql`, in its transaction: read the small
/// partial index, never the table. Without statistics (a table written in
/// a burst, before autovacuum analyzes it) the planner takes the index for
/// as large as the table and scans every row instead, on every fetch: 16 ms
/// at 100,000 rows.
const PARKED_AGGREGATES_SETTINGS: &str = "SET LOCAL enable_seqscan = off";

/// The note a held event carries in `last_error`.
pub(crate) const HELD_NOTE: &str = "held behind an earlier failed event of its aggregate";

/// Who writes: the relay and the stream lease token it holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Writer<'a> {
    pub(crate) relay_id: &'a str,
    pub(crate) lease_token: i64,
}

impl<'a> Writer<'a> {
    /// `statement`, fenced by this writer: its first two parameters are
    /// the relay and the lease token (`sql/stream_lease_fence.sql`).
    pub(crate) fn fenced(self, statement: &'static str) -> PgQuery<'a> {
        sqlx::query(statement)
            .bind(self.relay_id)
            .bind(self.lease_token)
    }
}

/// A statement on PostgreSQL with its parameters bound so far.
pub(crate) type PgQuery<'a> = sqlx::query::Query<'a, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// The aggregates whose next events must come from the table.
pub(crate) async fn parked_aggregates(
    pool: &PgPool,
    hold_dead: bool,
) -> Result<HashSet<AggregateKey>, Error> {
    let mut transaction = outbox::begin_transaction(pool).await?;
    sqlx::query(PARKED_AGGREGATES_SETTINGS)
        .execute(&mut *transaction)
        .await?;
    let rows = sqlx::query(sql::parked_aggregates)
        .bind(hold_dead)
        .fetch_all(&mut *transaction)
        .await?;
    transaction.commit().await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get::<String, _>("aggregate_type")?,
                row.try_get::<String, _>("aggregate_id")?,
            ))
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::from)
}

/// Due events the table path owns, in id order, within `limit`.
pub(crate) async fn fetch_table_owned(
    pool: &PgPool,
    hold_dead: bool,
    limit: FetchLimit,
    exclude: &[i64],
) -> Result<Vec<ClaimedEvent>, Error> {
    let rows = sqlx::query(sql::fetch_table_owned)
        .bind(hold_dead)
        .bind(limit.events)
        .bind(exclude.to_vec())
        .bind(limit.bytes)
        .fetch_all(pool)
        .await?;
    rows.into_iter()
        .map(|row| claimed_from_row(&row))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::from)
}

/// Hand `ids` to the table path. Returns `None` when the stream's lease is
/// lost (nothing was written), else the rows newly held.
pub(crate) async fn hold_events(
    pool: &PgPool,
    writer: Writer<'_>,
    ids: &[i64],
) -> Result<Option<i64>, Error> {
    let row = writer
        .fenced(sql::fenced_hold_events)
        .bind(ids.to_vec())
        .bind(HELD_NOTE)
        .fetch_one(pool)
        .await?;
    let lease_held: i64 = row.try_get("lease_held")?;
    let held: i64 = row.try_get("held")?;
    Ok((lease_held > 0).then_some(held))
}

/// Mark the table path's `ids` published; returns the rows marked.
pub(crate) async fn mark_table_owned_published(
    pool: &PgPool,
    writer: Writer<'_>,
    ids: &[i64],
) -> Result<u64, Error> {
    let result = writer
        .fenced(sql::mark_table_owned_published)
        .bind(ids.to_vec())
        .execute(pool)
        .await?;
    Ok(result.rows_affected())
}

/// What [`record_failures`] did.
#[derive(Debug, Default)]
pub(crate) struct RecordedFailures {
    /// Rows updated.
    pub(crate) updated: u64,
    /// Events the table now accounts for (updated, or no longer pending):
    /// all of them, unless the lease was lost.
    pub(crate) settled: Vec<i64>,
}

/// Record each failure in one transaction.
pub(crate) async fn record_failures(
    pool: &PgPool,
    writer: Writer<'_>,
    failures: &[FailedAttempt],
) -> Result<RecordedFailures, Error> {
    let mut transaction = outbox::begin_transaction(pool).await?;
    let mut recorded = RecordedFailures::default();
    for failure in failures {
        let row = writer
            .fenced(sql::fenced_record_failure)
            .bind(failure.id)
            .bind(&failure.error)
            .bind(failure.retry_in.map(|delay| delay.as_secs_f64()))
            .fetch_one(&mut *transaction)
            .await?;
        let lease_held: i64 = row.try_get("lease_held")?;
        if lease_held == 0 {
            // Lost: nothing written, nothing settled.
            return Ok(RecordedFailures::default());
        }
        let updated: i64 = row.try_get("updated")?;
        recorded.updated += u64::try_from(updated).unwrap_or(0);
        recorded.settled.push(failure.id);
    }
    transaction.commit().await?;
    Ok(recorded)
}
