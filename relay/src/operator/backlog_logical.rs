//! What waits to be published under the logical source, for the `/metrics`
//! gauges and `outbox-relay status --source logical`.
//!
//! Streamed events are published without a write: their rows stay
//! `pending` until retention deletes them, so counting `pending` rows, as
//! polling does, counts what was published long ago. Here an event waits
//! when the table path owns it and has not published it (failed and
//! waiting for a retry, held behind such an event, or handed over by
//! `recover-slot`), or when this relay streamed it and has not settled it.
//! What is still ahead in the slot is not in any count: the slot's lag (in
//! bytes) tells it.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sqlx::{PgPool, Row};

use crate::error::Error;
use crate::operator::BacklogSource;
use crate::source::logical::LogicalSource;
use crate::source::logical::slot_backlog::{SlotBacklog, slot_backlogs};
use crate::store::{OutboxBacklog, OutboxStatus};

sql_files!(backlog, status_counts, status_topics, database_now, logical_tables_exist);
/// Run before `sql/backlog.sql`, in its transaction: read the small partial
/// index of the table path, never the table of streamed rows (see
/// `table_path.rs`).
const BACKLOG_SETTINGS: &str = "SET LOCAL enable_seqscan = off";

/// What `status --source logical` adds to the status.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogicalCounts {
    /// Pending rows with no attempt and no note: the stream publishes them
    /// without writing them (already published, or still ahead in the
    /// slot); retention deletes them once the slot confirmed them.
    pub stream_owned: i64,
    /// The same, per topic, by topic name.
    pub topics: Vec<(String, i64)>,
    /// The backlog still to publish of each slot that has one: the events
    /// committed before the slot existed.
    pub backlogs: Vec<SlotBacklog>,
}

/// The table-path backlog: pending and dead counts and the oldest pending
/// event, of the events the table path owns.
async fn table_path_backlog(pool: &PgPool) -> Result<OutboxBacklog, Error> {
    let mut transaction = outbox::begin_transaction(pool).await?;
    sqlx::query(BACKLOG_SETTINGS)
        .execute(&mut *transaction)
        .await?;
    let row = sqlx::query(sql::backlog)
        .fetch_one(&mut *transaction)
        .await?;
    transaction.commit().await?;
    Ok(OutboxBacklog {
        pending: row.try_get("pending")?,
        dead: row.try_get("dead")?,
        oldest_pending_at: row.try_get("oldest_pending_at")?,
    })
}

/// Add this relay's unsettled streamed events (`count`, the oldest created
/// at `oldest`) to the table path's backlog.
fn with_unsettled(
    mut backlog: OutboxBacklog,
    count: usize,
    oldest: Option<DateTime<Utc>>,
) -> OutboxBacklog {
    backlog.pending = backlog
        .pending
        .saturating_add(i64::try_from(count).unwrap_or(i64::MAX));
    backlog.oldest_pending_at = match (backlog.oldest_pending_at, oldest) {
        (Some(table), Some(stream)) => Some(table.min(stream)),
        (table, stream) => table.or(stream),
    };
    backlog
}

impl BacklogSource for LogicalSource {
    /// Every relay reports the table path's events; the streaming one adds
    /// those it streamed and has not settled, so `max` over the relays is
    /// the whole backlog (an event streamed again after a restart while
    /// the table path owns it may count twice for a moment).
    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>> {
        Box::pin(async move {
            let backlog = table_path_backlog(self.pool()).await?;
            let (count, oldest) = self.unsettled_summary();
            let mut backlog = with_unsettled(backlog, count, oldest);
            // The slot's backlog not handed over yet: pending too.
            if let Some(slot_backlog) = self.slot_backlog().await? {
                backlog = with_unsettled(
                    backlog,
                    usize::try_from(slot_backlog.not_handed_over).unwrap_or(0),
                    slot_backlog.oldest_at,
                );
            }
            Ok(backlog)
        })
    }

    /// While the slot's backlog is published: what is left of it.
    fn activity(&self) -> BoxFuture<'_, Result<Option<String>, Error>> {
        Box::pin(async move {
            Ok(self.slot_backlog().await?.map(|backlog| {
                let oldest = backlog
                    .oldest_at
                    .map(|at| format!(", the oldest created at {}", at.to_rfc3339()))
                    .unwrap_or_default();
                format!(
                    "publishing the backlog of slot `{}`: {} event(s) committed before the slot \
                     existed are left, {} of them not handed to the table path yet{oldest}",
                    backlog.slot, backlog.remaining, backlog.not_handed_over
                )
            }))
        })
    }
}

impl LogicalSource {
    /// What is left of this source's slot's backlog, when anything is.
    pub(crate) async fn slot_backlog(&self) -> Result<Option<SlotBacklog>, Error> {
        Ok(slot_backlogs(self.pool())
            .await?
            .into_iter()
            .find(|backlog| backlog.slot == self.slot().as_str() && backlog.remaining > 0))
    }
}

/// `status` under the logical source: `status` (read as for polling) with
/// pending, in flight and the oldest pending event counted as the module
/// says, per topic too; returns the stream-owned rows beside.
///
/// # Errors
/// [`Error::Logical`] when the logical source was never prepared on this
/// database; [`Error::Database`] when a statement fails.
pub async fn logical_status(
    pool: &PgPool,
    status: &mut OutboxStatus,
) -> Result<LogicalCounts, Error> {
    let prepared: bool = sqlx::query_scalar(sql::logical_tables_exist)
        .fetch_one(pool)
        .await?;
    if !prepared {
        return Err(Error::Logical(
            "the logical source was never prepared on this database (its tables are missing), \
             so nothing here was streamed: prepare it with `outbox-relay migrate --source \
             logical`, or read the polling status without --source logical"
                .to_owned(),
        ));
    }
    let row = sqlx::query(sql::status_counts).fetch_one(pool).await?;
    status.pending = row.try_get("pending")?;
    status.in_flight = row.try_get("in_flight")?;
    status.oldest_pending_at = row.try_get("oldest_pending_at")?;
    status.oldest_pending_age_seconds = row.try_get("oldest_pending_age_seconds")?;
    let mut stream_owned: i64 = row.try_get("stream_owned")?;
    // The slots' backlogs not handed over yet look stream-owned, but no
    // slot streamed them: they are pending.
    let backlogs = slot_backlogs(pool).await?;
    for backlog in &backlogs {
        status.pending += backlog.not_handed_over;
        stream_owned -= backlog.not_handed_over;
        status.oldest_pending_at = match (status.oldest_pending_at, backlog.oldest_at) {
            (Some(table), Some(slot)) => Some(table.min(slot)),
            (table, slot) => table.or(slot),
        };
    }
    if let Some(oldest) = status.oldest_pending_at {
        let now: DateTime<Utc> = sqlx::query_scalar(sql::database_now)
            .fetch_one(pool)
            .await?;
        status.oldest_pending_age_seconds = Some((now - oldest).num_seconds().max(0));
    }
    let mut topics = Vec::new();
    for row in sqlx::query(sql::status_topics).fetch_all(pool).await? {
        let topic: String = row.try_get("topic")?;
        let pending: i64 = row.try_get("pending")?;
        if let Some(counts) = status
            .topics
            .iter_mut()
            .find(|counts| counts.topic == topic)
        {
            counts.pending = pending;
        }
        topics.push((topic, row.try_get("stream_owned")?));
    }
    Ok(LogicalCounts {
        stream_owned,
        topics,
        backlogs,
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn unsettled_events_add_to_the_table_path_and_may_be_the_oldest() {
        let at = |minute| {
            Utc.with_ymd_and_hms(2026, 12, 1, 10, minute, 0)
                .single()
                .expect("valid time")
        };
        let table = OutboxBacklog {
            pending: 2,
            dead: 1,
            oldest_pending_at: Some(at(5)),
        };
        let both = with_unsettled(table, 3, Some(at(1)));
        assert_eq!((both.pending, both.dead), (5, 1));
        assert_eq!(both.oldest_pending_at, Some(at(1)));
        assert_eq!(
            with_unsettled(table, 0, None).oldest_pending_at,
            Some(at(5))
        );
        let empty = OutboxBacklog {
            pending: 0,
            dead: 0,
            oldest_pending_at: None,
        };
        assert_eq!(
            with_unsettled(empty, 1, Some(at(7))).oldest_pending_at,
            Some(at(7))
        );
    }
}
