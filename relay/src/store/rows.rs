//! Row mapping and bind values shared by every backend: [`StoreRow`] reads
//! the columns of any backend's rows, and every row maps the same way
//! everywhere.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{ColumnIndex, Decode, Row, Type};

use super::{DeadEvent, DeadSelector, LiveLease, OutboxBacklog, OutboxStatus, TopicStatus};
use crate::event::{ClaimedEvent, Lease, OutboundEvent};

/// A column of a result row: its name, or its position from 0 (for the
/// one column of a statement that returns a single value).
#[derive(Debug, Clone, Copy)]
pub enum Column<'a> {
    /// The column of this name.
    Named(&'a str),
    /// The column at this position.
    At(usize),
}

impl<'a> From<&'a str> for Column<'a> {
    fn from(name: &'a str) -> Self {
        Column::Named(name)
    }
}

impl From<usize> for Column<'_> {
    fn from(position: usize) -> Self {
        Column::At(position)
    }
}

/// A value type every backend decodes the same way: integers of any width
/// that fits (MariaDB types `partition_key % ?` and `COUNT(*)` as
/// `BIGINT`), times as UTC (MariaDB's `DATETIME` has no zone; the schema
/// keeps it in UTC).
pub trait Decodes<R: Row>: for<'r> Decode<'r, R::Database> + Type<R::Database> {}

impl<R: Row, T: for<'r> Decode<'r, R::Database> + Type<R::Database>> Decodes<R> for T {}

/// The value of `column` of `row`.
fn value<'c, R, T>(row: &R, column: impl Into<Column<'c>>) -> Result<T, sqlx::Error>
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    usize: ColumnIndex<R>,
    T: Decodes<R>,
{
    match column.into() {
        Column::Named(name) => row.try_get(name),
        Column::At(position) => row.try_get(position),
    }
}

/// A result row of any backend, read by column name or position.
pub trait StoreRow: Row {
    /// A text column.
    fn text<'c>(&self, column: impl Into<Column<'c>>) -> Result<String, sqlx::Error>;
    /// A text column, copied once out of the row into a shared string.
    fn shared_text<'c>(&self, column: impl Into<Column<'c>>) -> Result<Arc<str>, sqlx::Error>;
    /// A nullable text column.
    fn optional_text<'c>(
        &self,
        column: impl Into<Column<'c>>,
    ) -> Result<Option<String>, sqlx::Error>;
    /// An `INTEGER` column.
    fn int<'c>(&self, column: impl Into<Column<'c>>) -> Result<i32, sqlx::Error>;
    /// A `BIGINT` column.
    fn bigint<'c>(&self, column: impl Into<Column<'c>>) -> Result<i64, sqlx::Error>;
    /// A nullable `BIGINT` column.
    fn optional_bigint<'c>(
        &self,
        column: impl Into<Column<'c>>,
    ) -> Result<Option<i64>, sqlx::Error>;
    /// A UTC time column.
    fn time<'c>(&self, column: impl Into<Column<'c>>) -> Result<DateTime<Utc>, sqlx::Error>;
    /// A nullable UTC time column.
    fn optional_time<'c>(
        &self,
        column: impl Into<Column<'c>>,
    ) -> Result<Option<DateTime<Utc>>, sqlx::Error>;
}

impl<R> StoreRow for R
where
    R: Row,
    for<'n> &'n str: ColumnIndex<R>,
    usize: ColumnIndex<R>,
    String: Decodes<R>,
    for<'r> &'r str: Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: Decodes<R>,
    i32: Decodes<R>,
    i64: Decodes<R>,
    Option<i64>: Decodes<R>,
    DateTime<Utc>: Decodes<R>,
    Option<DateTime<Utc>>: Decodes<R>,
{
    fn text<'c>(&self, column: impl Into<Column<'c>>) -> Result<String, sqlx::Error> {
        value(self, column)
    }
    fn shared_text<'c>(&self, column: impl Into<Column<'c>>) -> Result<Arc<str>, sqlx::Error> {
        let text: &str = match column.into() {
            Column::Named(name) => self.try_get(name)?,
            Column::At(position) => self.try_get(position)?,
        };
        Ok(Arc::from(text))
    }
    fn optional_text<'c>(
        &self,
        column: impl Into<Column<'c>>,
    ) -> Result<Option<String>, sqlx::Error> {
        value(self, column)
    }
    fn int<'c>(&self, column: impl Into<Column<'c>>) -> Result<i32, sqlx::Error> {
        value(self, column)
    }
    fn bigint<'c>(&self, column: impl Into<Column<'c>>) -> Result<i64, sqlx::Error> {
        value(self, column)
    }
    fn optional_bigint<'c>(
        &self,
        column: impl Into<Column<'c>>,
    ) -> Result<Option<i64>, sqlx::Error> {
        value(self, column)
    }
    fn time<'c>(&self, column: impl Into<Column<'c>>) -> Result<DateTime<Utc>, sqlx::Error> {
        value(self, column)
    }
    fn optional_time<'c>(
        &self,
        column: impl Into<Column<'c>>,
    ) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        value(self, column)
    }
}

/// Map every row with `map`.
pub(crate) fn map_rows<R, T>(
    rows: &[R],
    map: fn(&R) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, sqlx::Error> {
    rows.iter().map(map).collect()
}

pub(crate) fn lease_from_row<R: StoreRow>(row: &R) -> Result<Lease, sqlx::Error> {
    Ok(Lease {
        partition_no: row.int("partition_no")?,
        lease_token: row.bigint("lease_token")?,
    })
}

pub(crate) fn outbound_from_row<R: StoreRow>(row: &R) -> Result<OutboundEvent, sqlx::Error> {
    let event_id_text = row.text("event_id")?;
    let event_id =
        uuid::Uuid::parse_str(&event_id_text).map_err(|error| sqlx::Error::ColumnDecode {
            index: "event_id".to_owned(),
            source: Box::new(error),
        })?;
    let headers = row.text("headers")?;
    Ok(OutboundEvent {
        id: row.bigint("id")?,
        event_id,
        event_type: row.text("event_type")?,
        event_version: row.int("event_version")?,
        source: row.text("source")?,
        aggregate_type: row.text("aggregate_type")?,
        aggregate_id: row.text("aggregate_id")?,
        topic: row.text("topic")?,
        payload: row.shared_text("payload")?,
        headers: parse_headers(&event_id_text, &headers),
        created_at: row.time("created_at")?,
        attempts: row.int("attempts")?,
        replay: false,
    })
}

pub(crate) fn claimed_from_row<R: StoreRow>(row: &R) -> Result<ClaimedEvent, sqlx::Error> {
    Ok(ClaimedEvent {
        partition_no: row.int("partition_no")?,
        event: outbound_from_row(row)?,
        committed_at: None,
    })
}

pub(crate) fn dead_from_row<R: StoreRow>(row: &R) -> Result<DeadEvent, sqlx::Error> {
    Ok(DeadEvent {
        id: row.bigint("id")?,
        event_id: row.text("event_id")?,
        event_type: row.text("event_type")?,
        aggregate_type: row.text("aggregate_type")?,
        aggregate_id: row.text("aggregate_id")?,
        topic: row.text("topic")?,
        attempts: row.int("attempts")?,
        last_error: row.optional_text("last_error")?,
    })
}

pub(crate) fn topic_status_from_row<R: StoreRow>(row: &R) -> Result<TopicStatus, sqlx::Error> {
    Ok(TopicStatus {
        topic: row.text("topic")?,
        pending: row.bigint("pending")?,
        retrying: row.bigint("retrying")?,
        dead: row.bigint("dead")?,
        published: row.bigint("published")?,
    })
}

pub(crate) fn live_lease_from_row<R: StoreRow>(row: &R) -> Result<LiveLease, sqlx::Error> {
    Ok(LiveLease {
        partition_no: row.int("partition_no")?,
        owner: row.text("lease_owner")?,
        lease_token: row.bigint("lease_token")?,
        expires_at: row.time("lease_expires_at")?,
    })
}

pub(crate) fn backlog_from_row<R: StoreRow>(row: &R) -> Result<OutboxBacklog, sqlx::Error> {
    Ok(OutboxBacklog {
        pending: row.bigint("pending")?,
        dead: row.bigint("dead")?,
        oldest_pending_at: row.optional_time("oldest_pending_at")?,
    })
}

/// The status counts of `row` (from `status.sql`), with the per-topic and
/// lease rows of the two other status statements.
pub(crate) fn status_from_rows<R: StoreRow>(
    row: &R,
    topic_rows: &[R],
    lease_rows: &[R],
) -> Result<OutboxStatus, sqlx::Error> {
    Ok(OutboxStatus {
        pending: row.bigint("pending")?,
        retrying: row.bigint("retrying")?,
        in_flight: row.bigint("in_flight")?,
        dead: row.bigint("dead")?,
        published: row.bigint("published")?,
        oldest_pending_at: row.optional_time("oldest_pending_at")?,
        oldest_pending_age_seconds: row.optional_bigint("oldest_pending_age_seconds")?,
        leased_partitions: row.bigint("leased_partitions")?,
        partitions: row.bigint("partitions")?,
        live_relays: row.bigint("live_relays")?,
        topics: map_rows(topic_rows, topic_status_from_row)?,
        leases: map_rows(lease_rows, live_lease_from_row)?,
    })
}

/// The three optional filters of the dead-event statements.
pub(crate) fn selector_binds(
    selector: &DeadSelector,
) -> (Option<&str>, Option<&str>, Option<&str>) {
    match selector {
        DeadSelector::EventId(event_id) => (Some(event_id.as_str()), None, None),
        DeadSelector::Aggregate {
            aggregate_type,
            aggregate_id,
        } => (
            None,
            Some(aggregate_type.as_str()),
            Some(aggregate_id.as_str()),
        ),
        DeadSelector::All => (None, None, None),
    }
}

/// JSON array of leases, the form the fenced statements take them in.
pub(crate) fn leases_json(leases: &[Lease]) -> String {
    serde_json::to_string(leases).unwrap_or_else(|_| "[]".to_owned())
}

/// JSON array of integers (ids or partition numbers).
pub(crate) fn integers_json<T: Serialize>(values: &[T]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".to_owned())
}

/// Parse the `headers` column; a malformed value is logged and treated as
/// empty rather than blocking the event.
pub(crate) fn parse_headers(event_id: &str, text: &str) -> BTreeMap<String, String> {
    match serde_json::from_str::<BTreeMap<String, serde_json::Value>>(text) {
        Ok(map) => map
            .into_iter()
            .map(|(name, value)| match value {
                serde_json::Value::String(text) => (name, text),
                other => (name, other.to_string()),
            })
            .collect(),
        Err(error) => {
            tracing::warn!(event_id, %error, "headers column is not a JSON object; publishing without headers");
            BTreeMap::new()
        }
    }
}

/// Seconds as a float, the form the SQL takes durations in.
pub(crate) fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}
