//! [`SqlStore::fetch_pending_plan`]: the plan of the batch loop's fetch, on
//! the databases that explain it as JSON ([`ExplainFetch`]).

use futures::future::BoxFuture;
use sqlx::{Database, Pool};

use super::fetch_values::fetch_pending_values;
use super::{Dialect, SqlStore};
use crate::error::Error;
use crate::event::{FetchLimit, FetchRequest};

/// A dialect whose database explains a statement's plan as JSON.
pub trait ExplainFetch: Dialect {
    /// The plan of the fetch with `arguments`, as the database explains it
    /// with the fetch's own settings.
    fn explain_fetch(
        pool: &Pool<Self::Database>,
        arguments: <Self::Database as Database>::Arguments,
    ) -> BoxFuture<'_, Result<serde_json::Value, Error>>;
}

impl<D: ExplainFetch> SqlStore<D> {
    /// The plan the database chooses for the batch loop's fetch, with the
    /// fetch's own settings, as its `EXPLAIN` gives it in JSON: for
    /// operators looking into slow fetches, and for the test that keeps the
    /// plan free of a sort over the pending rows.
    ///
    /// # Errors
    /// [`Error::Database`] when the statement fails.
    pub async fn fetch_pending_plan(
        &self,
        partition_count: i32,
        partitions: &[i32],
        hold_dead: bool,
        limit: i64,
    ) -> Result<serde_json::Value, Error> {
        let limit = FetchLimit::events(limit);
        let values = fetch_pending_values::<D>(FetchRequest {
            partition_count,
            partitions,
            exclude: &[],
            hold_dead,
            limit,
        });
        let arguments = values.arguments(&D::STATEMENTS.fetch_pending)?;
        D::explain_fetch(&self.pool, arguments).await
    }
}
