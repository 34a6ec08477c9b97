//! Pruning: forget inbox rows past the deduplication window.
//!
//! A duplicate that arrives after its row was pruned is processed again:
//! the window must exceed the longest time a broker can redeliver (consumer
//! lag, retention of a replayed topic). Rows beyond `max_rows` are pruned
//! too, oldest first.

use std::time::Duration;

use sqlx::Pool;
use tokio_util::sync::CancellationToken;

use crate::backend::{InboxBackend, PruneRule};
use crate::error::Error;

/// How much of the inbox to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneSettings {
    /// Keep rows younger than this. Default 7 days.
    pub window: Duration,
    /// Keep at most this many rows per consumer; `None` for no limit.
    pub max_rows: Option<i64>,
    /// Rows deleted per statement. Default 1,000.
    pub batch_size: i64,
    /// Pause between two passes. Default 1 minute.
    pub interval: Duration,
}

impl Default for PruneSettings {
    fn default() -> Self {
        PruneSettings {
            window: Duration::from_secs(7 * 24 * 3600),
            max_rows: None,
            batch_size: 1_000,
            interval: Duration::from_secs(60),
        }
    }
}

/// Most statements per pass and rule.
const MAX_BATCHES_PER_PASS: usize = 100;

/// One pruning pass for `consumer`; returns the rows deleted.
///
/// # Errors
/// [`Error::Database`].
pub async fn prune_once<DB: InboxBackend>(
    pool: &Pool<DB>,
    consumer: &str,
    settings: &PruneSettings,
) -> Result<u64, Error> {
    let batch_size = settings.batch_size.max(1);
    let rules = std::iter::once(PruneRule::OlderThan(settings.window)).chain(
        settings
            .max_rows
            .map(|max_rows| PruneRule::BeyondCount(max_rows.max(0))),
    );
    let mut deleted = 0;
    for rule in rules {
        for _ in 0..MAX_BATCHES_PER_PASS {
            let batch = DB::prune(pool, consumer, rule, batch_size).await?;
            deleted += batch;
            if batch < batch_size as u64 {
                break;
            }
        }
    }
    Ok(deleted)
}

/// Prune every `settings.interval` until `stop`.
pub async fn prune_until_stopped<DB: InboxBackend>(
    pool: Pool<DB>,
    consumer: String,
    settings: PruneSettings,
    stop: CancellationToken,
) {
    loop {
        match prune_once(&pool, &consumer, &settings).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(consumer = %consumer, deleted, "pruned inbox rows"),
            Err(error) => tracing::warn!(consumer = %consumer, %error, "inbox pruning failed"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(settings.interval) => {}
        }
    }
}
