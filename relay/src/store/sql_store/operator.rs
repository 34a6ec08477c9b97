//! [`OperatorStore`] for [`SqlStore`]: status, gauges, replay reads, dead
//! events, migrations and retention.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use super::Param::{
    AfterId, Limit, OlderThan, SelectedAggregateId, SelectedAggregateType, SelectedEventId, Since,
    Topic, Until,
};
use super::{Dialect, SqlDatabase, SqlStore, Values, execute, fetch_all, fetch_one};
use crate::error::Error;
use crate::event::OutboundEvent;
use crate::store::rows::{
    StoreRow, backlog_from_row, dead_from_row, map_rows, outbound_from_row, selector_binds,
    status_from_rows,
};
use crate::store::{
    DeadEvent, DeadSelector, OperatorStore, OutboxBacklog, OutboxStatus, ReplayWindow,
};

/// The values of the dead-event statements: the filters of `selector`.
fn selector_values<D: Dialect>(selector: &DeadSelector) -> Values<D::Database> {
    let (event_id, aggregate_type, aggregate_id) = selector_binds(selector);
    Values::new()
        .with(SelectedEventId, D::Database::optional_text(event_id))
        .with(
            SelectedAggregateType,
            D::Database::optional_text(aggregate_type),
        )
        .with(
            SelectedAggregateId,
            D::Database::optional_text(aggregate_id),
        )
}

impl<D: Dialect> OperatorStore for SqlStore<D> {
    fn migrate(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { Ok(outbox::migrate(&self.pool).await?) })
    }

    fn delete_published(
        &self,
        older_than: Duration,
        limit: i64,
    ) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            let values = Values::new()
                .with(OlderThan, D::duration(older_than))
                .with(Limit, D::Database::bigint(limit));
            execute(self.on_pool(), &D::STATEMENTS.delete_published, &values).await
        })
    }

    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>> {
        Box::pin(async move {
            let row = fetch_one(self.on_pool(), &D::STATEMENTS.backlog, &Values::new()).await?;
            Ok(backlog_from_row(&row)?)
        })
    }

    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, Error>> {
        Box::pin(async move {
            let statements = D::STATEMENTS;
            let none = Values::new();
            let row = fetch_one(self.on_pool(), &statements.status, &none).await?;
            let topic_rows = fetch_all(self.on_pool(), &statements.status_topics, &none).await?;
            let lease_rows = fetch_all(self.on_pool(), &statements.status_leases, &none).await?;
            Ok(status_from_rows(&row, &topic_rows, &lease_rows)?)
        })
    }

    fn database_time(&self) -> BoxFuture<'_, Result<DateTime<Utc>, Error>> {
        Box::pin(async move {
            let statement = D::STATEMENTS.database_time;
            let row = fetch_one(self.on_pool(), &statement, &Values::new()).await?;
            Ok(row.time(0)?)
        })
    }

    fn topic_exists<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(async move {
            let values = Values::new().with(Topic, D::Database::text(topic));
            let row = fetch_one(self.on_pool(), &D::STATEMENTS.topic_exists, &values).await?;
            Ok(row.bigint(0)? > 0)
        })
    }

    fn fetch_published<'a>(
        &'a self,
        window: &'a ReplayWindow,
        after_id: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<OutboundEvent>, Error>> {
        Box::pin(async move {
            let values = Values::new()
                .with(Topic, D::Database::text(&window.topic))
                .with(Since, D::time(window.since))
                .with(Until, D::time(window.until))
                .with(AfterId, D::Database::bigint(after_id))
                .with(Limit, D::Database::bigint(limit));
            let rows = fetch_all(self.on_pool(), &D::STATEMENTS.fetch_published, &values).await?;
            Ok(map_rows(&rows, outbound_from_row)?)
        })
    }

    fn list_dead<'a>(
        &'a self,
        selector: &'a DeadSelector,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<DeadEvent>, Error>> {
        Box::pin(async move {
            let values = selector_values::<D>(selector).with(Limit, D::Database::bigint(limit));
            let rows = fetch_all(self.on_pool(), &D::STATEMENTS.list_dead, &values).await?;
            Ok(map_rows(&rows, dead_from_row)?)
        })
    }

    fn retry_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            let values = selector_values::<D>(selector);
            execute(self.on_pool(), &D::STATEMENTS.retry_dead, &values).await
        })
    }

    fn discard_dead<'a>(&'a self, selector: &'a DeadSelector) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(async move {
            let values = selector_values::<D>(selector);
            execute(self.on_pool(), &D::STATEMENTS.discard_dead, &values).await
        })
    }
}
