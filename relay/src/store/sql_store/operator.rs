//! [`OperatorStore`] for [`SqlStore`]: status, gauges, replay reads, dead
//! events, migrations and retention.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use super::Param::{
    AfterId, ErrorContains, EventId, FilterEventType, FilterTopic, Limit, OlderThan,
    SelectedAggregateId, SelectedAggregateType, SelectedEventId, Since, Topic, Until,
};
use super::{Dialect, SqlDatabase, SqlStore, Values, execute, fetch_all, fetch_one};
use crate::error::Error;
use crate::event::OutboundEvent;
use crate::store::rows::{
    StoreRow, backlog_from_row, dead_from_row, map_rows, outbound_from_row, selector_binds,
    status_from_rows,
};
use crate::store::page::{
    page_dead_from_row, page_event_from_row, page_relays_from_rows, page_topic_from_row,
};
use crate::store::{
    DeadEvent, DeadFilter, DeadSelector, OperatorStore, OutboxBacklog, OutboxStatus,
    PageDeadEvent, PageEvent, PageRelay, PageTopic, ReplayWindow,
};

/// The earliest and the latest creation time a dead-event filter without
/// bounds stands for: every backend compares its `created_at` with them.
fn unbounded_window() -> (DateTime<Utc>, DateTime<Utc>) {
    let earliest = DateTime::<Utc>::UNIX_EPOCH;
    let latest = DateTime::parse_from_rfc3339("9999-12-31T00:00:00Z")
        .map(|time| time.with_timezone(&Utc))
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    (earliest, latest)
}

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

    fn page_topics(&self) -> BoxFuture<'_, Result<Vec<PageTopic>, Error>> {
        Box::pin(async move {
            let rows = fetch_all(self.on_pool(), &D::STATEMENTS.page_topics, &Values::new()).await?;
            Ok(map_rows(&rows, page_topic_from_row)?)
        })
    }

    fn page_relays(&self) -> BoxFuture<'_, Result<Vec<PageRelay>, Error>> {
        Box::pin(async move {
            let rows = fetch_all(self.on_pool(), &D::STATEMENTS.page_relays, &Values::new()).await?;
            Ok(page_relays_from_rows(&rows)?)
        })
    }

    fn page_dead<'a>(
        &'a self,
        filter: &'a DeadFilter,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<PageDeadEvent>, Error>> {
        Box::pin(async move {
            let (earliest, latest) = unbounded_window();
            let (aggregate_type, aggregate_id) = match &filter.aggregate {
                Some((aggregate_type, aggregate_id)) => {
                    (Some(aggregate_type.as_str()), Some(aggregate_id.as_str()))
                }
                None => (None, None),
            };
            let values = Values::new()
                .with(FilterTopic, D::Database::optional_text(filter.topic.as_deref()))
                .with(
                    FilterEventType,
                    D::Database::optional_text(filter.event_type.as_deref()),
                )
                .with(SelectedAggregateType, D::Database::optional_text(aggregate_type))
                .with(SelectedAggregateId, D::Database::optional_text(aggregate_id))
                .with(ErrorContains, D::Database::optional_text(filter.error.as_deref()))
                .with(Since, D::time(filter.since.unwrap_or(earliest)))
                .with(Until, D::time(filter.until.unwrap_or(latest)))
                .with(Limit, D::Database::bigint(limit));
            let rows = fetch_all(self.on_pool(), &D::STATEMENTS.page_dead, &values).await?;
            Ok(map_rows(&rows, page_dead_from_row)?)
        })
    }

    fn page_event(&self, id: i64) -> BoxFuture<'_, Result<Option<PageEvent>, Error>> {
        Box::pin(async move {
            let values = Values::new().with(EventId, D::Database::bigint(id));
            let rows = fetch_all(self.on_pool(), &D::STATEMENTS.page_event, &values).await?;
            Ok(rows.first().map(page_event_from_row).transpose()?)
        })
    }

    fn page_published_recently(&self, within: Duration) -> BoxFuture<'_, Result<i64, Error>> {
        Box::pin(async move {
            let values = Values::new().with(OlderThan, D::duration(within));
            let statement = D::STATEMENTS.page_published_recently;
            let row = fetch_one(self.on_pool(), &statement, &values).await?;
            Ok(row.bigint(0)?)
        })
    }
}
