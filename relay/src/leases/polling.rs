//! [`LeaseStore`] for the polling stores ([`SqlStore`]): leases are renewed and taken by one
//! `UPDATE ... RETURNING`, or by an update and a select in a transaction
//! where the database has no `RETURNING` ([`LeaseStatements`]).

use std::time::Duration;

use futures::future::BoxFuture;

use super::{LeaseStore, Leased};
use crate::error::Error;
use crate::event::Lease;
use crate::store::rows::{StoreRow, lease_from_row, leases_json, map_rows};
use crate::store::sql_store::Param::{Leases, Limit, Partitions, RelayId, TimeToLive};
use crate::store::sql_store::{
    Dialect, LeaseStatements, On, SqlDatabase, SqlStore, Values, execute, fetch_all, fetch_one,
};

impl<D: Dialect> LeaseStore for SqlStore<D> {
    fn partition_count(&self) -> BoxFuture<'_, Result<i32, Error>> {
        Box::pin(async move {
            let statement = D::STATEMENTS.partition_count;
            let row = fetch_one(self.on_pool(), &statement, &Values::new()).await?;
            Ok(row.int(0)?)
        })
    }

    fn heartbeat<'a>(
        &'a self,
        relay_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<i64, Error>> {
        Box::pin(async move {
            let statements = D::STATEMENTS;
            let values = Values::new()
                .with(RelayId, D::Database::text(relay_id))
                .with(TimeToLive, D::duration(ttl));
            execute(self.on_pool(), &statements.heartbeat_upsert, &values).await?;
            let none = Values::new();
            execute(self.on_pool(), &statements.heartbeat_forget_dead, &none).await?;
            let row = fetch_one(self.on_pool(), &statements.live_relays, &none).await?;
            Ok(row.bigint(0)?)
        })
    }

    fn deregister<'a>(&'a self, relay_id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let values = Values::new().with(RelayId, D::Database::text(relay_id));
            execute(self.on_pool(), &D::STATEMENTS.deregister, &values).await?;
            Ok(())
        })
    }

    fn renew_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
        ttl: Duration,
    ) -> Leased<'a> {
        Box::pin(async move {
            if leases.is_empty() {
                return Ok(Vec::new());
            }
            let values = Values::new()
                .with(RelayId, D::Database::text(relay_id))
                .with(TimeToLive, D::duration(ttl))
                .with(Leases, D::Database::text(leases_json(leases)));
            match D::STATEMENTS.leases {
                LeaseStatements::Returning { renew, .. } => {
                    let rows = fetch_all(self.on_pool(), &renew, &values).await?;
                    Ok(map_rows(&rows, lease_from_row)?)
                }
                LeaseStatements::UpdateThenSelect {
                    renew, select_held, ..
                } => {
                    let partitions: Vec<i32> =
                        leases.iter().map(|lease| lease.partition_no).collect();
                    let values = values.with(Partitions, D::partition_list(&partitions));
                    let mut transaction = outbox::begin_transaction(self.pool()).await?;
                    execute(On::Transaction(&mut transaction), &renew, &values).await?;
                    let rows =
                        fetch_all(On::Transaction(&mut transaction), &select_held, &values).await?;
                    transaction.commit().await?;
                    let held = map_rows(&rows, lease_from_row)?;
                    // A partition lost and retaken by this relay has a new
                    // token: it is not the lease asked about.
                    Ok(held
                        .into_iter()
                        .filter(|lease| leases.contains(lease))
                        .collect())
                }
            }
        })
    }

    fn acquire_leases<'a>(&'a self, relay_id: &'a str, limit: i64, ttl: Duration) -> Leased<'a> {
        Box::pin(async move {
            if limit <= 0 {
                return Ok(Vec::new());
            }
            let values = Values::new()
                .with(RelayId, D::Database::text(relay_id))
                .with(TimeToLive, D::duration(ttl))
                .with(Limit, D::Database::bigint(limit));
            match D::STATEMENTS.leases {
                LeaseStatements::Returning { acquire, .. } => {
                    let rows = fetch_all(self.on_pool(), &acquire, &values).await?;
                    Ok(map_rows(&rows, lease_from_row)?)
                }
                LeaseStatements::UpdateThenSelect {
                    lock_free,
                    take,
                    select_held,
                    ..
                } => {
                    let mut transaction = outbox::begin_transaction(self.pool()).await?;
                    let rows =
                        fetch_all(On::Transaction(&mut transaction), &lock_free, &values).await?;
                    let locked = map_rows(&rows, |row| row.int(0))?;
                    if locked.is_empty() {
                        transaction.commit().await?;
                        return Ok(Vec::new());
                    }
                    let values = values.with(Partitions, D::partition_list(&locked));
                    execute(On::Transaction(&mut transaction), &take, &values).await?;
                    let rows =
                        fetch_all(On::Transaction(&mut transaction), &select_held, &values).await?;
                    transaction.commit().await?;
                    Ok(map_rows(&rows, lease_from_row)?)
                }
            }
        })
    }

    fn release_leases<'a>(
        &'a self,
        relay_id: &'a str,
        leases: &'a [Lease],
    ) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            if leases.is_empty() {
                return Ok(0);
            }
            let values = Values::new()
                .with(RelayId, D::Database::text(relay_id))
                .with(Leases, D::Database::text(leases_json(leases)));
            execute(self.on_pool(), &D::STATEMENTS.release_leases, &values).await
        })
    }
}
