//! The batch loop's statements on [`SqlStore`]: the fetch, the marks and
//! the failures, each fenced by the leases it names. The polling source
//! (`source/polling.rs`) offers them to the loop as its `EventSource`.

use std::time::Duration;

use futures::future::BoxFuture;

use super::Param::{
    Dead, EventId, EventIds, ExcludedIds, HoldDead, LastError, Leases, Limit, MaxBytes,
    PartitionCount, Partitions, RelayId, RetryDelay,
};
use super::{Dialect, On, SqlDatabase, SqlStore, Values, commit, execute, on_either};
use crate::error::Error;
use crate::event::Wakeup;
use crate::event::{ClaimedEvent, FailedAttempt, FetchLimit, Lease};
use crate::store::rows::{claimed_from_row, leases_json};
use crate::tasks::Tasks;

/// The values of the batch loop's fetch.
pub(super) fn fetch_pending_values<D: Dialect>(
    partition_count: i32,
    partitions: &[i32],
    exclude: &[i64],
    hold_dead: bool,
    limit: FetchLimit,
) -> Values<D::Database> {
    Values::new()
        .with(PartitionCount, D::Database::int(partition_count))
        .with(Partitions, D::partition_list(partitions))
        .with(ExcludedIds, D::id_list(exclude))
        .with(HoldDead, D::Database::flag(hold_dead))
        .with(Limit, D::Database::bigint(limit.events))
        .with(MaxBytes, D::Database::bigint(limit.bytes))
}

impl<D: Dialect> SqlStore<D> {
    /// Fetch the due events of `partitions`, leaving out `exclude`, within
    /// `limit`, each aggregate's in order.
    ///
    /// # Errors
    /// [`Error::Database`] when the statement fails.
    pub(crate) fn fetch_pending<'a>(
        &'a self,
        partition_count: i32,
        partitions: &'a [i32],
        exclude: &'a [i64],
        hold_dead: bool,
        limit: FetchLimit,
    ) -> BoxFuture<'a, Result<Vec<ClaimedEvent>, Error>> {
        Box::pin(async move {
            if partitions.is_empty() {
                return Ok(Vec::new());
            }
            let statement = D::STATEMENTS.fetch_pending;
            let values =
                fetch_pending_values::<D>(partition_count, partitions, exclude, hold_dead, limit);
            let arguments = values.arguments(&statement)?;
            let mut transaction = self.settings_transaction(D::FETCH_SETTINGS).await?;
            let rows = D::Database::fetch_all(
                on_either(&self.pool, &mut transaction),
                statement.sql,
                arguments,
                !D::PLAN_EACH_FETCH,
            )
            .await?;
            commit(transaction).await?;
            // Each row is dropped once mapped: the batch is held once.
            Ok(rows
                .into_iter()
                .map(|row| claimed_from_row(&row))
                .collect::<Result<_, _>>()?)
        })
    }

    /// Mark `ids` published, fenced by `leases`; returns the rows marked.
    ///
    /// # Errors
    /// [`Error::Database`] when the statement fails.
    pub(crate) fn mark_published<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(0);
            }
            let values = Values::new()
                .with(RelayId, D::Database::text(relay_id))
                .with(PartitionCount, D::Database::int(partition_count))
                .with(Leases, D::Database::text(leases_json(leases)))
                .with(EventIds, D::id_list(ids));
            let statement = D::STATEMENTS.mark_published;
            let mut transaction = self.settings_transaction(D::MARK_SETTINGS).await?;
            let marked =
                execute(on_either(&self.pool, &mut transaction), &statement, &values).await?;
            commit(transaction).await?;
            Ok(marked)
        })
    }

    /// Record `failures`, fenced by `leases`; returns the rows updated.
    ///
    /// # Errors
    /// [`Error::Database`] when a statement fails.
    pub(crate) fn record_failures<'a>(
        &'a self,
        relay_id: &'a str,
        partition_count: i32,
        leases: &'a [Lease],
        failures: &'a [FailedAttempt],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            let statement = D::STATEMENTS.record_failure;
            let leases = leases_json(leases);
            let mut updated = 0;
            let mut transaction = outbox::begin_transaction(&self.pool).await?;
            for failure in failures {
                let values = Values::new()
                    .with(RelayId, D::Database::text(relay_id))
                    .with(PartitionCount, D::Database::int(partition_count))
                    .with(Leases, D::Database::text(&leases))
                    .with(EventId, D::Database::bigint(failure.id))
                    .with(LastError, D::Database::text(&failure.error))
                    .with(RetryDelay, D::retry_delay(failure.retry_in))
                    .with(Dead, D::Database::flag(failure.retry_in.is_none()));
                updated += execute(On::Transaction(&mut transaction), &statement, &values).await?;
            }
            transaction.commit().await?;
            Ok(updated)
        })
    }

    /// Raise `wakeup` whenever events are committed, until `tasks` is
    /// cancelled, where the database can tell; the watch runs on `tasks`.
    pub(crate) fn watch_commits(&self, wakeup: Wakeup, tasks: &Tasks) {
        D::watch_commits(&self.pool, wakeup, tasks);
    }

    /// Tell producers' triggers that relay `relay_id` polls on its own for
    /// `window`; returns whether the database has such notifications.
    ///
    /// # Errors
    /// [`Error::Database`] when the statement fails.
    pub(crate) fn quiet_notifications<'a>(
        &'a self,
        relay_id: &'a str,
        window: Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        D::quiet_notifications(&self.pool, relay_id, window)
    }
}
