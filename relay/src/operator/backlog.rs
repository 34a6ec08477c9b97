//! [`BacklogSource`]: what fills the table gauges of `/metrics` (pending
//! events, the oldest one's age, dead events) on each scrape. Polling reads
//! the table's pending rows ([`TableBacklog`]); the logical source counts
//! only what it has not published
//! ([`LogicalSource`](crate::source::logical::LogicalSource)), since the rows it
//! streamed and published stay `pending`.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::Error;
use crate::source::OutboxStore;
use crate::store::OutboxBacklog;

/// Reads the events waiting to be published, and the dead ones.
pub trait BacklogSource: Send + Sync {
    /// Pending and dead counts and the oldest pending event's time.
    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>>;

    /// What the source is busy with while it is ready, for `/readyz`
    /// ("ready: ..."); `None` when nothing is worth saying.
    fn activity(&self) -> BoxFuture<'_, Result<Option<String>, Error>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// The backlog of the polling source: every pending row of the table.
pub struct TableBacklog(pub Arc<dyn OutboxStore>);

impl BacklogSource for TableBacklog {
    fn backlog(&self) -> BoxFuture<'_, Result<OutboxBacklog, Error>> {
        self.0.backlog()
    }
}
