//! The polling source: the SQL stores' fetch, marks and failures over
//! `outbox_events`, under partition leases, as the batch loop's
//! [`EventSource`]. Each statement lives in `store/sql/<backend>/`; each
//! write names the leases it is made under and changes nothing once one is
//! lost. [`OutboxStore`] is such a store together with its leases and
//! operator reads: what a polling relay runs on.

use std::time::Duration;

use futures::future::BoxFuture;

use super::{EventSource, Fetched, Written};
use crate::error::Error;
use crate::event::{FailedAttempt, Fence, FetchRequest, Wakeup};
use crate::leases::LeaseStore;
use crate::store::rows::{claimed_from_row, leases_json};
use crate::store::sql_store::Param::{
    Dead, EventId, EventIds, LastError, Leases, PartitionCount, RelayId, RetryDelay,
};
use crate::store::sql_store::fetch_values::fetch_pending_values;
use crate::store::sql_store::{On, SqlDatabase, Statement, Values, commit, execute, on_either};
use crate::store::{Dialect, OperatorStore, SqlStore};
use crate::tasks::Tasks;

/// Every statement a polling relay runs: what one database gives it.
pub trait OutboxStore: LeaseStore + EventSource + OperatorStore {}

impl<T: LeaseStore + EventSource + OperatorStore> OutboxStore for T {}

/// The values that fence a write: the relay, the partition count and the
/// leases.
fn fenced<D: Dialect>(fence: Fence<'_>) -> Values<D::Database> {
    Values::new()
        .with(RelayId, D::Database::text(fence.relay_id))
        .with(PartitionCount, D::Database::int(fence.partition_count))
        .with(Leases, D::Database::text(leases_json(fence.leases)))
}

/// Settle the acknowledged `ids` under `fence` with `statement` (the mark,
/// or the delete), with the mark's settings; returns the rows changed.
async fn settle<D: Dialect>(
    store: &SqlStore<D>,
    statement: Statement,
    fence: Fence<'_>,
    ids: &[i64],
) -> Result<u64, Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let values = fenced::<D>(fence).with(EventIds, D::id_list(ids));
    let mut transaction = store.settings_transaction(D::MARK_SETTINGS).await?;
    let settled = execute(
        on_either(store.pool(), &mut transaction),
        &statement,
        &values,
    )
    .await?;
    commit(transaction).await?;
    Ok(settled)
}

impl<D: Dialect> EventSource for SqlStore<D> {
    fn fetch_pending<'a>(&'a self, request: FetchRequest<'a>) -> Fetched<'a> {
        Box::pin(async move {
            if request.partitions.is_empty() {
                return Ok(Vec::new());
            }
            let statement = D::STATEMENTS.fetch_pending;
            let arguments = fetch_pending_values::<D>(request).arguments(&statement)?;
            let mut transaction = self.settings_transaction(D::FETCH_SETTINGS).await?;
            let rows = D::Database::fetch_all(
                on_either(self.pool(), &mut transaction),
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

    fn mark_published<'a>(&'a self, fence: Fence<'a>, ids: &'a [i64]) -> Written<'a> {
        Box::pin(settle(self, D::STATEMENTS.mark_published, fence, ids))
    }

    fn delete_acknowledged<'a>(&'a self, fence: Fence<'a>, ids: &'a [i64]) -> Written<'a> {
        Box::pin(settle(self, D::STATEMENTS.delete_acknowledged, fence, ids))
    }

    fn record_failures<'a>(&'a self, fence: Fence<'a>, failed: &'a [FailedAttempt]) -> Written<'a> {
        Box::pin(async move {
            let statement = D::STATEMENTS.record_failure;
            let mut updated = 0;
            let mut transaction = outbox::begin_transaction(self.pool()).await?;
            for failure in failed {
                let values = fenced::<D>(fence)
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

    fn watch_commits(&self, wakeup: Wakeup, tasks: &Tasks) {
        D::watch_commits(self.pool(), wakeup, tasks);
    }

    fn quiet_notifications<'a>(
        &'a self,
        relay_id: &'a str,
        window: Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        D::quiet_notifications(self.pool(), relay_id, window)
    }
}
